"""The order of a streamed response's events: each ``sequence_number`` once, the events framed as SSE.

Example::

    >>> events = EventSequence()
    >>> events.event("response.output_text.delta", {"delta": "Hi"}).split(b"\\n")[1]
    b'data: {"type":"response.output_text.delta","delta":"Hi","sequence_number":0}'
    >>> events.take(3), events.seq
    (1, 4)
"""

from __future__ import annotations

from typing import Any

from sagestream.protocols._wire import dumps

__all__ = ["EventSequence"]


class EventSequence:
    """The next ``sequence_number`` of one response's events, and the events built around it."""

    __slots__ = ("seq",)

    def __init__(self) -> None:
        self.seq = 0

    def take(self, count: int = 1) -> int:
        """The first of ``count`` sequence numbers, which the caller writes into events it builds itself."""
        seq = self.seq
        self.seq = seq + count
        return seq

    def event(self, kind: str, body: dict[str, Any]) -> bytes:
        seq = self.seq
        self.seq = seq + 1
        return (
            b"event: " + kind.encode() + b"\ndata: " + dumps({"type": kind, **body, "sequence_number": seq}) + b"\n\n"
        )

    def lifecycle(self, kind: str, response: bytes) -> bytes:
        """A ``response.*`` event around the response's JSON."""
        seq = self.seq
        self.seq = seq + 1
        name = kind.encode()
        return (
            b"event: "
            + name
            + b'\ndata: {"type":"'
            + name
            + b'","response":'
            + response
            + b',"sequence_number":'
            + str(seq).encode()
            + b"}\n\n"
        )
