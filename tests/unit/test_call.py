"""sagestream.call: one invocation's parts, and what the walk fills in on the way."""

from __future__ import annotations

import pytest

from sagestream.call import Call
from sagestream.http import Request, Writer
from sagestream.identity import Identity
from sagestream.record import StreamRecord
from sagestream.sagemaker_ids import UpstreamIds
from tests.fakes import RecordingStream, call_of, context


def test_a_call_starts_knowing_only_the_invocation_and_the_walk_fills_in_the_rest() -> None:
    request = Request(method="POST", path="/v1/chat/completions", headers={}, body=b"{}")
    call = call_of(request)
    assert (call.encoder, call.ids, call.identity) == (None, None, None)
    call.ids, call.identity = UpstreamIds.of("req-1", None), Identity(sub="user-7")
    assert call.identity.sub == "user-7" and call.ids == UpstreamIds.of("req-1", None)


def test_a_call_is_made_of_its_own_fields_only() -> None:
    request = Request(method="GET", path="/", headers={}, body=b"")
    with pytest.raises(TypeError, match="mystery"):
        Call(request, Writer(RecordingStream(), "req-1"), context(), StreamRecord(), mystery=1)  # type: ignore[call-arg]
