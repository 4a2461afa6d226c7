"""What a handler sees, without a socket."""

from __future__ import annotations

import time
import traceback

from sagestream.lambda_runtime.interface import (
    ClientDisconnected,
    LambdaContext,
    ResponseRefused,
    WriteTimedOut,
    error_payload,
)


def test_the_context_counts_down_to_its_deadline_and_never_below_zero() -> None:
    context = LambdaContext(aws_request_id="r", deadline_ms=int(time.time() * 1000) + 5000)
    assert 4000 < context.get_remaining_time_in_millis() <= 5000
    assert LambdaContext(aws_request_id="r", deadline_ms=0).get_remaining_time_in_millis() == 0


def test_a_client_gone_is_a_connection_error_and_a_stall_or_a_refusal_is_one_kind_of_it() -> None:
    # The relay catches it by class before any upstream failure: it must stay distinct from those.
    assert issubclass(ClientDisconnected, ConnectionError)
    assert issubclass(WriteTimedOut, ClientDisconnected) and issubclass(ResponseRefused, ClientDisconnected)
    refused = ResponseRefused(413, b"too big")
    assert refused.status == 413 and "413" in str(refused)


def test_the_error_payload_names_the_type_and_keeps_the_traceback_s_last_ten_parts() -> None:
    def chained(n: int) -> None:
        try:
            raise KeyError(f"k{n}")
        except KeyError:
            if n:
                chained(n - 1)
            raise

    try:
        chained(5)  # five chained exceptions: far more than ten parts in all
    except KeyError as exc:
        payload = error_payload(exc, "Runtime.HandlerNotFound")
        whole = traceback.format_exception(exc)
    assert payload["errorType"] == "Runtime.HandlerNotFound" and payload["errorMessage"] == "'k0'"
    assert len(whole) > 10 and payload["stackTrace"] == whole[-10:]
