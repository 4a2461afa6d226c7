"""The event-stream frames of a streamed answer, read by the function itself: PayloadPart bytes out of raw bytes.

``InvokeEndpointWithResponseStream`` answers in AWS's event-stream framing
(``application/vnd.amazon.eventstream``): each frame is a prelude (total length, headers length, the
prelude's CRC-32), typed headers, the payload, and the CRC-32 of all that. :class:`FrameReader` is fed the
body's bytes as the socket hands them over, cut anywhere, and gives back the payload of every
``PayloadPart`` event those bytes complete, before anything more is read (invariant 1 of
docs/architecture.md).

Why by hand: botocore's own ``EventStreamBuffer`` is pure Python and builds, per frame, a prelude object, a
header dictionary (a dozen small calls and a slice of the headers per header), a message object, and copies
the whole buffer on each frame: 78 k of the 250 k instructions a delta cost with it (docs/benchmark.md).
Here a frame is a few ``unpack_from`` calls, two ``zlib.crc32`` (C) and one slice for the payload: a
``PayloadPart``'s headers are the same bytes in every frame of a stream, so they are parsed once and then
recognised by comparison. Everything else stays botocore's: it still signs and sends the call, and a frame that is not a
``PayloadPart`` event (a modeled exception such as ``ModelStreamError``, an error, an unknown event) goes
through botocore's own event parser, so it raises the same ``EventStreamError`` the fault table maps today.

The limits and the errors are botocore's (tests/unit/test_eventstream.py holds the two readers to the same
payloads and errors over random frames, cuts and corruptions): headers at most 128 KiB, a payload at most 24
MiB (so memory per stream is bounded by one frame, invariant 3), botocore's ``ChecksumMismatch``,
``InvalidHeadersLength``, ``InvalidPayloadLength`` and ``DuplicateHeader``. Where botocore's reader has no
error of its own (a frame shorter than its own prelude, headers that run past their section, an unknown
header type: a ``struct.error``, ``KeyError`` or a silently short value there), this one raises
:class:`MalformedFrame`. All are botocore's ``ParserError``: the client sees ``upstream_stream_corrupt``.

Environment variables read: none.

Example::

    >>> from sagestream_local.endpoint import payload_part_frame
    >>> reader = FrameReader(parse_event=lambda message: None)
    >>> wire = payload_part_frame(b"data: 1\\n\\n") + payload_part_frame(b"data: 2\\n\\n")
    >>> reader.feed(wire[:30]), reader.feed(wire[30:])
    ([], [b'data: 1\\n\\n', b'data: 2\\n\\n'])
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any
from zlib import crc32

from botocore.eventstream import (
    ChecksumMismatch,
    DuplicateHeader,
    EventStreamMessage,
    InvalidHeadersLength,
    InvalidPayloadLength,
    ParserError,
)

__all__ = ["FrameReader", "MalformedFrame", "parse_headers"]

_PRELUDE_LENGTH = 12  # total length, headers length, prelude CRC: three big-endian u32
_MESSAGE_CRC_LENGTH = 4
# botocore's limits (botocore.eventstream._MAX_HEADERS_LENGTH, _MAX_PAYLOAD_LENGTH): one frame is the most a
# stream holds in memory.
MAX_HEADERS_LENGTH = 128 * 1024
MAX_PAYLOAD_LENGTH = 24 * 1024 * 1024

_prelude = struct.Struct("!III").unpack_from
_u32 = struct.Struct("!I").unpack_from
_u16 = struct.Struct("!H").unpack_from

# A header's value by its type byte: (struct format or None, fixed size); -1 marks the u16-length types.
_FIXED: dict[int, tuple[Callable[..., tuple[Any, ...]] | None, int]] = {
    2: (struct.Struct("!b").unpack_from, 1),  # byte
    3: (struct.Struct("!h").unpack_from, 2),  # short
    4: (struct.Struct("!i").unpack_from, 4),  # integer
    5: (struct.Struct("!q").unpack_from, 8),  # long
    8: (struct.Struct("!q").unpack_from, 8),  # timestamp (ms since the epoch, as botocore gives it)
    9: (None, 16),  # uuid: its 16 bytes
}
_BYTE_ARRAY, _STRING = 6, 7

_PAYLOAD_PART = ("event", "PayloadPart")


class MalformedFrame(ParserError):  # type: ignore[misc]  # botocore has no types: its ParserError is Any
    """A frame whose prelude checks out but whose lengths or headers cannot be a message."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"Malformed event-stream frame: {reason}")
        self.reason = reason


def parse_headers(data: bytes) -> dict[str, Any]:
    """A frame's headers section as botocore gives it (names to values by type); :class:`MalformedFrame` if it
    does not parse to its exact end, ``DuplicateHeader`` if a name comes twice.

    >>> parse_headers(b"\\x0b:event-type\\x07\\x00\\x0bPayloadPart\\x04flag\\x00")
    {':event-type': 'PayloadPart', 'flag': True}
    """
    headers: dict[str, Any] = {}
    end = len(data)
    pos = 0
    try:
        while pos < end:
            name_end = pos + 1 + data[pos]
            if name_end >= end:  # the name, then at least its type byte
                raise MalformedFrame("a header runs past the headers section")
            name = data[pos + 1 : name_end].decode("utf-8")
            kind = data[name_end]
            pos = name_end + 1
            value: Any
            if kind in (_STRING, _BYTE_ARRAY):
                if pos + 2 > end:
                    raise MalformedFrame("a header runs past the headers section")
                value_end = pos + 2 + _u16(data, pos)[0]
                value = data[pos + 2 : value_end]
                if kind == _STRING:
                    value = value.decode("utf-8")
            elif kind in (0, 1):
                value, value_end = kind == 0, pos
            elif kind in _FIXED:
                unpack, size = _FIXED[kind]
                value_end = pos + size
                if value_end <= end:
                    value = unpack(data, pos)[0] if unpack is not None else data[pos:value_end]
            else:
                raise MalformedFrame(f"unknown header type {kind}")
            if value_end > end:
                raise MalformedFrame("a header runs past the headers section")
            if name in headers:
                raise DuplicateHeader(name)
            headers[name] = value
            pos = value_end
    except UnicodeDecodeError:
        raise MalformedFrame("a header name or string is not UTF-8") from None
    return headers


class FrameReader:
    """Event-stream frames out of bytes fed in arbitrary pieces; the payload of each ``PayloadPart`` event.

    ``parse_event`` is botocore's event parser (``EventStream._parse_event``): it gets every frame that is not
    a ``PayloadPart`` event as botocore's ``EventStreamMessage``, raises botocore's ``EventStreamError`` for an
    exception or error frame, and may return a parsed event whose ``PayloadPart`` bytes are handed on.
    Only an unfinished frame is held between feeds, never more than one frame's worth.

    A bad frame after good ones in the same bytes: the good ones' payloads are returned first (a client gets
    every token the endpoint sent before the fault), and the fault is kept in :attr:`failure`, raised by the
    next :meth:`feed`; the caller raises it once it has handed those payloads on, before reading again.
    """

    __slots__ = ("_need", "_parse_event", "_payload_part_headers", "_pending", "failure")

    def __init__(self, parse_event: Callable[[EventStreamMessage], Any]) -> None:
        self._parse_event = parse_event
        self._pending = bytearray()  # the start of a frame not yet complete
        self._need = _PRELUDE_LENGTH  # how many bytes _pending must reach before it is worth parsing
        # The headers section of the last PayloadPart event: a stream repeats it, byte for byte, in every frame.
        self._payload_part_headers: bytes | None = None
        self.failure: Exception | None = None

    @property
    def pending(self) -> int:
        """How many bytes of an unfinished frame are held: at the body's end, anything but 0 is a cut stream."""
        return len(self._pending)

    def feed(self, data: bytes) -> list[bytes]:
        """The (non-empty) payloads of the ``PayloadPart`` events that ``data`` completes, in order."""
        if self.failure is not None:
            raise self.failure
        parts: list[bytes] = []
        try:
            self._frames(data, parts)
        except Exception as exc:
            if not parts:
                raise
            self.failure = exc
        return parts

    def _frames(self, data: bytes, parts: list[bytes]) -> None:
        """The payloads of the frames ``data`` completes, onto ``parts``; the unfinished rest kept."""
        if self._pending:
            self._pending += data
            if len(self._pending) < self._need:
                return
            data = bytes(self._pending)
            self._pending = bytearray()
            self._need = _PRELUDE_LENGTH
        pos = 0
        end = len(data)
        known = self._payload_part_headers
        while end - pos >= _PRELUDE_LENGTH:
            total, headers_length, prelude_crc = _prelude(data, pos)
            computed = crc32(data[pos : pos + 8])
            if computed != prelude_crc:
                raise ChecksumMismatch(prelude_crc, computed)
            if headers_length > MAX_HEADERS_LENGTH:
                raise InvalidHeadersLength(headers_length)
            payload_length = total - headers_length - _PRELUDE_LENGTH - _MESSAGE_CRC_LENGTH
            if payload_length > MAX_PAYLOAD_LENGTH:
                raise InvalidPayloadLength(payload_length)
            if payload_length < 0:
                raise MalformedFrame(f"total length {total} leaves no room for {headers_length} bytes of headers")
            if end - pos < total:
                self._need = total
                break
            payload_end = pos + total - _MESSAGE_CRC_LENGTH
            expected = _u32(data, payload_end)[0]
            # The message CRC covers the prelude too: the CRC of [prelude + headers + payload] is botocore's
            # crc32(prelude CRC bytes + headers + payload, prelude CRC), since the prelude CRC checked out.
            computed = crc32(data[pos:payload_end])
            if computed != expected:
                raise ChecksumMismatch(expected, computed)
            headers_start = pos + _PRELUDE_LENGTH
            payload_start = headers_start + headers_length
            if known is not None and headers_length == len(known) and data.startswith(known, headers_start):
                if payload_start < payload_end:  # an empty PayloadPart carries nothing: skipped, as before
                    parts.append(data[payload_start:payload_end])
            else:
                header_bytes = data[headers_start:payload_start]
                payload = data[payload_start:payload_end]
                headers = parse_headers(header_bytes)
                if (headers.get(":message-type"), headers.get(":event-type")) == _PAYLOAD_PART:
                    known = self._payload_part_headers = header_bytes
                    if payload:
                        parts.append(payload)
                else:
                    # Not the common frame: botocore's parser says what it is (it raises for exceptions).
                    event = self._parse_event(EventStreamMessage(None, headers, payload, expected))
                    part = event.get("PayloadPart") if event else None
                    if part is not None and part.get("Bytes"):
                        parts.append(part["Bytes"])
            pos += total
        if pos < end:
            self._pending = bytearray(data[pos:] if pos else data)
