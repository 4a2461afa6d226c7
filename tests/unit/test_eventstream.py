"""The function's frame reader gives what botocore's ``EventStreamBuffer`` and parser give, over any bytes.

The property tests feed both readers the same random frames (PayloadParts from the simulator's encoder,
modeled exceptions, frames with random typed headers), cut at random offsets and corrupted at random (a
flipped byte, a cut-off end, a prelude with other lengths and a recomputed CRC, junk): the same payloads
come out, and the same error, compared by class and message (botocore's ``EventStreamError`` by its parsed
response). The one deliberate difference, pinned by its own tests: where botocore's reader has no error of
its own for a frame that cannot be a message (a ``struct.error``, ``KeyError``, or bytes silently read as
headers or the next frame), this one raises :class:`~sagestream.eventstream.MalformedFrame`, a
``ParserError``: botocore must have handed on the same payloads up to that frame.
"""

from __future__ import annotations

import itertools
import json
import struct
import zlib
from collections.abc import Callable
from typing import Any

import botocore.eventstream
import botocore.parsers
import botocore.session
import pytest
from botocore.eventstream import EventStreamBuffer, EventStreamHeaderParser, ParserError
from botocore.exceptions import EventStreamError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sagestream.eventstream import MAX_PAYLOAD_LENGTH, FrameReader, MalformedFrame, parse_headers
from sagestream.faults import error_from
from sagestream_local.endpoint import exception_frame, payload_part_frame, with_bad_crc

# --- botocore's side: its parser for this operation's event stream, its buffer as the function used it -------

_MODEL = botocore.session.get_session().get_service_model("sagemaker-runtime")
_OPERATION = "InvokeEndpointWithResponseStream"
_STREAM = botocore.eventstream.EventStream(
    None,
    _MODEL.operation_model(_OPERATION).output_shape.members["Body"],
    botocore.parsers.RestJSONParser()._event_stream_parser,
    _OPERATION,
)
parse_event: Callable[[Any], Any] = _STREAM._parse_event

Outcome = tuple[list[bytes], BaseException | None]


def botocore_reads(chunks: list[bytes]) -> Outcome:
    """What the function yielded with botocore's EventStreamBuffer and parser (upstream.py before this reader)."""
    payloads: list[bytes] = []
    buffer = EventStreamBuffer()
    try:
        for chunk in chunks:
            buffer.add_data(chunk)
            for message in buffer:
                headers = message.headers
                if headers.get(":message-type") == "event" and headers.get(":event-type") == "PayloadPart":
                    if message.payload:
                        payloads.append(message.payload)
                    continue
                event = parse_event(message)
                part = event.get("PayloadPart") if event else None
                if part is not None and part.get("Bytes"):
                    payloads.append(part["Bytes"])
    except Exception as exc:
        return payloads, exc
    return payloads, None


def own_reads(chunks: list[bytes]) -> Outcome:
    """What :class:`FrameReader` hands on, as :class:`sagestream.upstream.PayloadParts` drives it."""
    payloads: list[bytes] = []
    reader = FrameReader(parse_event)
    try:
        for chunk in chunks:
            payloads.extend(reader.feed(chunk))
            if reader.failure is not None:
                raise reader.failure
    except Exception as exc:
        return payloads, exc
    return payloads, None


def error_of(exc: BaseException | None) -> Any:
    if isinstance(exc, EventStreamError):
        return ("EventStreamError", exc.response)
    return None if exc is None else (type(exc).__name__, str(exc))


def assert_same(chunks: list[bytes]) -> None:
    own, theirs = own_reads(chunks), botocore_reads(chunks)
    if isinstance(own[1], MalformedFrame):
        # botocore misreads this frame (see the module's docstring): the same payloads up to it, at least.
        assert theirs[0][: len(own[0])] == own[0]
        return
    assert own[0] == theirs[0]
    assert error_of(own[1]) == error_of(theirs[1])


# --- frames ---------------------------------------------------------------------------------------------------

_TYPES = {"true": 0, "false": 1, "byte": 2, "short": 3, "integer": 4, "long": 5, "bytes": 6, "string": 7}
_TYPES |= {"timestamp": 8, "uuid": 9}


def encode_header(name: str, kind: str, value: Any) -> bytes:
    """One typed header (the simulator's encoder writes strings only; botocore has no encoder)."""
    raw = name.encode()
    head = struct.pack("!B", len(raw)) + raw + struct.pack("!B", _TYPES[kind])
    if kind in ("true", "false"):
        return head
    if kind in ("bytes", "string"):
        data = value.encode() if kind == "string" else value
        return head + struct.pack("!H", len(data)) + data
    if kind == "uuid":
        return head + value
    fmt = {"byte": "!b", "short": "!h", "integer": "!i", "long": "!q", "timestamp": "!q"}[kind]
    return head + struct.pack(fmt, value)


def frame(headers: bytes, payload: bytes, *, total: int | None = None, headers_length: int | None = None) -> bytes:
    """A frame with these headers' bytes and payload; other ``total``/``headers_length`` make a lying prelude."""
    total = 16 + len(headers) + len(payload) if total is None else total
    prelude = struct.pack("!II", total, len(headers) if headers_length is None else headers_length)
    message = prelude + struct.pack("!I", zlib.crc32(prelude)) + headers + payload
    return message + struct.pack("!I", zlib.crc32(message))


names = st.text(min_size=1, max_size=20).filter(lambda s: len(s.encode()) < 256)
typed_values = st.one_of(
    st.tuples(st.sampled_from(["true", "false"]), st.none()),
    st.tuples(st.just("byte"), st.integers(-128, 127)),
    st.tuples(st.just("short"), st.integers(-(2**15), 2**15 - 1)),
    st.tuples(st.just("integer"), st.integers(-(2**31), 2**31 - 1)),
    st.tuples(st.sampled_from(["long", "timestamp"]), st.integers(-(2**63), 2**63 - 1)),
    st.tuples(st.just("bytes"), st.binary(max_size=40)),
    st.tuples(st.just("string"), st.text(max_size=40)),
    st.tuples(st.just("uuid"), st.binary(min_size=16, max_size=16)),
)
headers_sections = st.lists(st.tuples(names, typed_values), max_size=5).map(
    lambda hs: b"".join(encode_header(name, kind, value) for name, (kind, value) in hs)
)
payloads = st.binary(max_size=300)
members = st.fixed_dictionaries({"Message": st.text(max_size=30)}, optional={"ErrorCode": st.text(max_size=10)})


@st.composite
def typed_frames(draw: st.DrawFn) -> bytes:
    """A frame of random typed headers, usually with the ones that say what it is."""
    said = []
    message_type = draw(st.sampled_from(["event", "exception", "error", "other", None]))
    if message_type is not None:
        said.append(encode_header(":message-type", "string", message_type))
    if draw(st.booleans()):
        said.append(encode_header(":event-type", "string", draw(st.sampled_from(["PayloadPart", "Other"]))))
    if draw(st.booleans()):
        kind = draw(st.sampled_from(["ModelStreamError", "InternalStreamFailure", "Other"]))
        said.append(encode_header(":exception-type", "string", kind))
    if message_type == "error":
        said.append(encode_header(":error-code", "string", draw(st.text(max_size=10))))
    order = draw(st.permutations(said)) if said else []
    extra = draw(headers_sections)
    body = draw(st.one_of(payloads, members.map(lambda m: json.dumps(m).encode())))
    return frame(b"".join(order) + extra, body)


frames = st.one_of(
    payloads.map(payload_part_frame),
    payloads.map(payload_part_frame),  # the common frame, four times as likely as each other kind
    payloads.map(payload_part_frame),
    payloads.map(payload_part_frame),
    st.tuples(st.sampled_from(["ModelStreamError", "InternalStreamFailure", "Other"]), members).map(
        lambda t: exception_frame(*t)
    ),
    typed_frames(),
)


@st.composite
def corrupted(draw: st.DrawFn, framed: list[bytes]) -> bytes:
    """The frames' bytes with one corruption: a flipped byte, an early end, a lying prelude between two frames,
    junk after them, or none."""
    wire = b"".join(framed)
    how = draw(st.sampled_from(["none", "flip", "cut", "lengths", "junk"]))
    if how == "none" or (how in ("flip", "cut") and not wire):
        return wire
    if how == "flip":
        at = draw(st.integers(0, len(wire) - 1))
        return wire[:at] + bytes([wire[at] ^ draw(st.integers(1, 255))]) + wire[at + 1 :]
    if how == "cut":
        return wire[: draw(st.integers(0, len(wire) - 1))]
    if how == "junk":
        return wire + draw(st.binary(min_size=1, max_size=40))
    # A frame whose prelude lies about its lengths but carries a right CRC: it checks out, then misleads.
    lie = frame(
        draw(headers_sections),
        draw(payloads),
        total=draw(st.one_of(st.integers(0, 400), st.integers(0, 2**32 - 1))),
        headers_length=draw(st.one_of(st.none(), st.integers(0, 300), st.integers(0, 2**32 - 1))),
    )
    at = draw(st.integers(0, len(framed)))
    return b"".join(framed[:at]) + lie + b"".join(framed[at:])


@st.composite
def cuts(draw: st.DrawFn, wire: bytes) -> list[bytes]:
    """``wire`` cut into reads at random offsets (a read of every size from one byte to all of it)."""
    offsets = sorted(draw(st.sets(st.integers(1, max(1, len(wire) - 1)), max_size=12))) if len(wire) > 1 else []
    bounds = [0, *offsets, len(wire)]
    return [wire[a:b] for a, b in itertools.pairwise(bounds) if b > a]


@st.composite
def streams(draw: st.DrawFn) -> list[bytes]:
    return draw(cuts(draw(corrupted(draw(st.lists(frames, max_size=6))))))


# --- the properties -------------------------------------------------------------------------------------------


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(streams())
def test_the_same_payloads_and_the_same_error_as_botocore_over_random_frames_cuts_and_corruptions(
    chunks: list[bytes],
) -> None:
    assert_same(chunks)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(frames, max_size=6), st.data())
def test_well_formed_frames_are_never_called_malformed(framed: list[bytes], data: st.DataObject) -> None:
    chunks = data.draw(cuts(b"".join(framed)))
    assert not isinstance(own_reads(chunks)[1], MalformedFrame)
    assert_same(chunks)


@settings(max_examples=300, deadline=None)
@given(st.lists(payloads, min_size=1, max_size=8), st.data())
def test_payload_parts_cut_anywhere_come_out_whole_in_order(parts: list[bytes], data: st.DataObject) -> None:
    chunks = data.draw(cuts(b"".join(payload_part_frame(p) for p in parts)))
    assert own_reads(chunks) == ([p for p in parts if p], None)


@settings(max_examples=300, deadline=None)
@given(headers_sections)
def test_headers_parse_to_what_botocores_header_parser_gives(section: bytes) -> None:
    try:
        theirs: Any = EventStreamHeaderParser().parse(section)
    except ParserError as exc:  # a duplicate name
        with pytest.raises(type(exc)):
            parse_headers(section)
        return
    assert parse_headers(section) == theirs


# --- each fault, and what the client is told -------------------------------------------------------------------

GOOD = payload_part_frame(b'data: {"choices":[{"delta":{"content":"Hi"}}]}\n\n')


@pytest.mark.parametrize(
    ("bad", "code"),
    [
        (exception_frame("ModelStreamError", {"Message": "boom", "ErrorCode": "X"}), "model_stream_error"),
        (exception_frame("InternalStreamFailure", {"Message": "boom"}), "internal_stream_failure"),
        (with_bad_crc(GOOD), "upstream_stream_corrupt"),
        (frame(b"", b"", total=12), "upstream_stream_corrupt"),  # shorter than a prelude and its CRC
        (frame(b"\x01x\x0c", b""), "upstream_stream_corrupt"),  # an unknown header type
        (frame(b"\x01x\x07\x00\x09abc", b""), "upstream_stream_corrupt"),  # a value past the headers' end
        (frame(b"\x01x\x07\x00\x02\xff\xfe", b""), "upstream_stream_corrupt"),  # a string that is not UTF-8
    ],
    ids=["model_stream_error", "internal_stream_failure", "bad_crc", "short", "type", "past_end", "not_utf8"],
)
def test_a_bad_frame_after_a_good_one_in_the_same_read_comes_after_its_payload(bad: bytes, code: str) -> None:
    payloads, failure = own_reads([GOOD + bad])
    assert len(payloads) == 1
    assert failure is not None and error_from(failure).code == code


def test_botocore_reads_an_impossible_frame_as_an_empty_message_where_this_reader_says_corrupt() -> None:
    """The one place the two differ, on purpose: a 12-byte "frame" (a prelude, no message CRC) checks out."""
    impossible = frame(b"", b"", total=12)
    assert botocore_reads([impossible]) == ([], None)  # botocore: an empty message, and on
    # ... and then reads the next frame from the wrong offset.
    assert isinstance(botocore_reads([impossible + GOOD])[1], botocore.eventstream.ChecksumMismatch)
    assert isinstance(own_reads([impossible])[1], MalformedFrame)


def test_a_prelude_declaring_too_large_a_payload_is_refused_before_the_payload_arrives() -> None:
    prelude = struct.pack("!II", 16 + MAX_PAYLOAD_LENGTH + 1, 0)
    prelude += struct.pack("!I", zlib.crc32(prelude))
    reader = FrameReader(parse_event)
    with pytest.raises(botocore.eventstream.InvalidPayloadLength):
        reader.feed(prelude)


def test_a_frame_arriving_a_byte_at_a_time_comes_out_with_its_last_byte() -> None:
    reader = FrameReader(parse_event)
    got = [reader.feed(GOOD[i : i + 1]) for i in range(len(GOOD))]
    assert got == [[]] * (len(GOOD) - 1) + [[b'data: {"choices":[{"delta":{"content":"Hi"}}]}\n\n']]
