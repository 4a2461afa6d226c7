"""The AWS event-stream wire format the simulated endpoint writes: frames, string headers, CRCs.

An encoder written independently of botocore's decoder, so that the decoder (what the function runs in AWS)
is checked against something it did not write: :func:`payload_part_frame` for each slice of model output,
:func:`exception_frame` for the modeled stream exceptions, :func:`with_bad_crc` for a frame a decoder must
reject. Standard library only.

Example::

    >>> from botocore.eventstream import EventStreamBuffer
    >>> buffer = EventStreamBuffer()
    >>> buffer.add_data(payload_part_frame("data: café\\n\\n".encode()))
    >>> message = next(iter(buffer))
    >>> message.headers[":event-type"], message.payload.decode()
    ('PayloadPart', 'data: café\\n\\n')
    >>> [len(f) for f in iter_frames(exception_frame("ModelStreamError", {"Message": "x"}) * 2)]
    [126, 126]
"""

from __future__ import annotations

import binascii
import json
import struct
from collections.abc import Iterator, Mapping

EVENTSTREAM_CONTENT_TYPE = "application/vnd.amazon.eventstream"

# botocore only decodes event streams, and moto's encoder (moto.core.eventstream) cannot be imported without
# moto.core appending its BotocoreStubber to botocore's BUILTIN_HANDLERS, i.e. into every boto3 client the
# process creates afterwards, the very clients this simulator exists to test. Only string headers are needed,
# so the encoder is these few lines.

_HEADER_TYPE_STRING = 7


def encode_message(headers: Mapping[str, str], payload: bytes) -> bytes:
    """One event-stream message: prelude (total and headers length, CRC), headers, payload, message CRC."""
    encoded_headers = b"".join(
        struct.pack("!B", len(name.encode()))
        + name.encode()
        # string header: type 7, u16 length, utf-8 value
        + struct.pack("!BH", _HEADER_TYPE_STRING, len(value.encode()))
        + value.encode()
        for name, value in headers.items()
    )
    total_length = 12 + len(encoded_headers) + len(payload) + 4
    prelude = struct.pack("!II", total_length, len(encoded_headers))
    prelude += struct.pack("!I", binascii.crc32(prelude))
    message = prelude + encoded_headers + payload
    return message + struct.pack("!I", binascii.crc32(message))


def payload_part_frame(data: bytes) -> bytes:
    """The ``PayloadPart`` event carrying one slice of the model output."""
    return encode_message(
        {
            ":event-type": "PayloadPart",
            ":content-type": "application/octet-stream",
            ":message-type": "event",
        },
        data,
    )


def exception_frame(exception_type: str, members: Mapping[str, str]) -> bytes:
    """A modeled stream exception (``ModelStreamError``, ``InternalStreamFailure``) with its JSON members."""
    return encode_message(
        {
            ":exception-type": exception_type,
            ":content-type": "application/json",
            ":message-type": "exception",
        },
        json.dumps(dict(members)).encode(),
    )


def with_bad_crc(frame: bytes) -> bytes:
    """The same frame with its trailing message CRC flipped, so a decoder must reject it."""
    (crc,) = struct.unpack("!I", frame[-4:])
    return frame[:-4] + struct.pack("!I", crc ^ 0xFFFFFFFF)


def iter_frames(data: bytes) -> Iterator[bytes]:
    """Split a buffer of whole event-stream messages by their prelude lengths (for debugging and tests)."""
    while data:
        (length,) = struct.unpack("!I", data[:4])
        yield data[:length]
        data = data[length:]
