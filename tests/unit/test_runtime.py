"""The runtime's values without a socket (tests/protocol/test_runtime.py runs it against a Runtime API)."""

from __future__ import annotations

import time

from sagestream.lambda_runtime import ClientDisconnected, LambdaContext


def test_the_context_counts_down_to_its_deadline_and_never_below_zero() -> None:
    context = LambdaContext(aws_request_id="r", deadline_ms=int(time.time() * 1000) + 5000)
    assert 4000 < context.get_remaining_time_in_millis() <= 5000
    assert LambdaContext(aws_request_id="r", deadline_ms=0).get_remaining_time_in_millis() == 0


def test_a_client_gone_is_a_connection_error() -> None:
    # The relay catches it by class before any upstream failure: it must stay distinct from those.
    assert issubclass(ClientDisconnected, ConnectionError)
