"""Event-stream frames cut across socket reads at every byte offset, through botocore's real decoding.

The raw body of a real ``invoke_endpoint_with_response_stream`` answer (a stubbed boto3 client: botocore
parses the response and builds its ``EventStream``) is replaced by one whose ``read1`` returns the cut
pieces, so :class:`~sagestream.upstream.PayloadParts` meets every way TCP can deliver a frame.
"""

from __future__ import annotations

import functools
from typing import Any

import botocore.eventstream
import pytest

from sagestream.errors import APIError
from sagestream.upstream import PayloadParts
from sagestream_local.endpoint import exception_frame, payload_part_frame, with_bad_crc
from tests.fakes import RawPieces, Upstream, event_stream_response, stubbed_client

PAYLOADS = [
    b'data: {"choices":[{"delta":{"content":" caf\xc3\xa9"}}]}\n\n',
    b'data: {"choices":[{"delta":{"content":" \xf0\x9f\x9a\x80"}}]}\n\n',
    b"data: [DONE]\n\n",
]


@functools.cache
def _template() -> botocore.eventstream.EventStream:
    """The EventStream botocore made for one real (stubbed) call: its output shape and parser are reused."""
    upstream = Upstream(override=lambda op, _: event_stream_response([]))
    client: Any = stubbed_client(upstream)
    body = client.invoke_endpoint_with_response_stream(EndpointName="e", Body=b"{}", ContentType="application/json")
    return body["Body"]


def parts_over(chunks: list[bytes]) -> tuple[PayloadParts, RawPieces]:
    """PayloadParts over a botocore EventStream, as botocore builds it, whose socket reads return ``chunks``."""
    template = _template()
    raw = RawPieces(chunks)
    stream = botocore.eventstream.EventStream(raw, template._output_shape, template._parser, template._operation_name)
    return PayloadParts(stream), raw


def test_one_frame_cut_at_every_offset_yields_its_payload_once() -> None:
    frame = payload_part_frame(PAYLOADS[0])
    for cut in range(1, len(frame)):
        parts, _ = parts_over([frame[:cut], frame[cut:]])
        assert list(parts) == [PAYLOADS[0]], cut


def test_three_frames_cut_at_every_pair_of_offsets_yield_the_payloads_in_order() -> None:
    wire = b"".join(payload_part_frame(p) for p in PAYLOADS)
    for a in range(1, len(wire), 3):
        for b in range(a + 1, len(wire), 3):
            parts, _ = parts_over([wire[:a], wire[a:b], wire[b:]])
            assert list(parts) == PAYLOADS, (a, b)


def test_byte_by_byte_reads_yield_each_part_as_soon_as_its_last_byte_is_read() -> None:
    frames = [payload_part_frame(p) for p in PAYLOADS]
    wire = b"".join(frames)
    parts, raw = parts_over([wire[i : i + 1] for i in range(len(wire))])
    reads_at_yield = [raw.reads for _ in parts]
    # The n-th payload is handed on by the very read that completed its frame, not one read later.
    ends = [sum(len(f) for f in frames[: n + 1]) for n in range(len(frames))]
    assert reads_at_yield == ends


@pytest.mark.parametrize(
    ("frame", "code"),
    [
        (exception_frame("ModelStreamError", {"Message": "boom", "ErrorCode": "X"}), "model_stream_error"),
        (exception_frame("InternalStreamFailure", {"Message": "boom"}), "internal_stream_failure"),
        (with_bad_crc(payload_part_frame(b"data: [DONE]\n\n")), "upstream_stream_corrupt"),
    ],
    ids=["model_stream_error", "internal_stream_failure", "corrupt_crc"],
)
def test_a_failing_frame_cut_at_every_offset_fails_after_the_good_one_before_it(frame: bytes, code: str) -> None:
    good = payload_part_frame(PAYLOADS[0])
    wire = good + frame
    for cut in range(1, len(wire)):
        parts, _ = parts_over([wire[:cut], wire[cut:]])
        got: list[bytes] = []
        with pytest.raises(APIError) as failure:
            got.extend(parts)
        assert got == [PAYLOADS[0]], cut
        assert failure.value.code == code, cut


def test_a_frame_cut_off_by_the_end_of_the_body_gives_what_was_whole_then_fails() -> None:
    """A body that ends mid-frame (the connection closed cleanly) yields the whole frames before it, then is a
    corrupt stream: taken for the model's end, the answer would close as complete with its tail missing."""
    wire = payload_part_frame(PAYLOADS[0]) + payload_part_frame(PAYLOADS[1])
    first = len(payload_part_frame(PAYLOADS[0]))
    parts, _ = parts_over([wire[:first]])
    assert list(parts) == [PAYLOADS[0]]  # cut between frames: nothing here tells it from the end
    for cut in range(first + 1, len(wire)):
        parts, _ = parts_over([wire[:cut]])
        got: list[bytes] = []
        with pytest.raises(APIError) as failure:
            got.extend(parts)
        assert got == [PAYLOADS[0]], cut
        assert failure.value.code == "upstream_stream_corrupt", cut
