"""Lines out of PayloadParts: bytes joined and split as bytes, text decoded only once a line is whole.

A SageMaker streaming answer is cut into PayloadParts wherever the container's writes and the
event-stream framing happen to fall: inside a line, inside a multi-byte UTF-8 character. The
:class:`LineSplitter` holds only the unfinished tail of the current line (so memory per stream is bounded
by the longest line: invariant 3 of docs/architecture.md) and looks at each byte once;
:func:`decode_line` turns a complete line into text (invariant 4); :func:`sse_data` gives the event data,
if any, a line carries, for SSE (``data: {...}``) and jsonlines (``{...}``) containers alike.

Each way the bytes can be wrong is its own exception carrying its data, :class:`LineTooLong` and
:class:`UndecodableLine`; this module knows nothing of HTTP: :func:`sagestream.faults.error_from` gives
them the status a client sees.

Example::

    >>> splitter = LineSplitter()
    >>> splitter.feed(b'data: {"a": "\\xc3')
    []
    >>> [decode_line(line) for line in splitter.feed(b'\\xa9"}\\r\\n\\r\\n: ping\\n{"b"')]
    ['data: {"a": "é"}', '', ': ping']
    >>> splitter.finish()
    [b'{"b"']
    >>> [sse_data(text) for text in ['data: {"a": 1}', "data:[DONE]", "", ": ping", "event: x", '{"b": 2}']]
    ['{"a": 1}', '[DONE]', None, None, None, '{"b": 2}']
"""

from __future__ import annotations

__all__ = ["LineError", "LineSplitter", "LineTooLong", "UndecodableLine", "decode_line", "sse_data"]

DEFAULT_MAX_LINE_BYTES = 1 << 20


class LineError(Exception):
    """The upstream's bytes do not make acceptable lines. The model answered, the relay cannot read it."""


class LineTooLong(LineError):
    """A line grew past the cap; holding more would let one stream take the function's memory."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"The model endpoint sent a line longer than {limit} bytes.")
        self.limit = limit


class UndecodableLine(LineError):
    """A complete line is not UTF-8."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"The model endpoint sent a line that is not valid UTF-8 ({reason}).")
        self.reason = reason


class LineSplitter:
    """Split a byte stream fed in arbitrary pieces into lines ended by LF or CRLF.

    A lone CR is kept as content: containers end lines with ``\\n`` and a CR that is not followed by
    LF is far more likely a byte of a JSON string than a line end.
    """

    __slots__ = ("_buffer", "_max_line_bytes")

    def __init__(self, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
        if max_line_bytes < 1:
            raise ValueError("max_line_bytes must be at least 1")
        self._max_line_bytes = max_line_bytes
        # Only ever the unterminated tail: no LF in it, so each feed searches only the new bytes.
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        """The lines that ``data`` completes, without their terminators."""
        newline = data.find(b"\n")
        if newline < 0:
            self._buffer += data
            self._check_tail()
            return []
        lines = [self._line(bytes(self._buffer) + data[:newline] if self._buffer else data[:newline])]
        start = newline + 1
        while (newline := data.find(b"\n", start)) >= 0:
            lines.append(self._line(data[start:newline]))
            start = newline + 1
        if start < len(data):
            # Replaced, not trimmed in place: the old tail may have been as long as the cap.
            self._buffer = bytearray(data[start:])
            self._check_tail()
        elif self._buffer:
            self._buffer = bytearray()  # the part ended on a line end, as most do: no tail to keep
        return lines

    def finish(self) -> list[bytes]:
        """The last line if the stream ended without a terminator; the splitter is empty afterwards."""
        tail, self._buffer = bytes(self._buffer), bytearray()
        return [tail] if tail else []

    def _line(self, line: bytes) -> bytes:
        if line.endswith(b"\r"):
            line = line[:-1]
        if len(line) > self._max_line_bytes:
            raise LineTooLong(self._max_line_bytes)
        return line

    def _check_tail(self) -> None:
        excess = len(self._buffer) - self._max_line_bytes
        # One byte of grace for a CR that may turn out to be half of a CRLF.
        if excess > 1 or (excess == 1 and not self._buffer.endswith(b"\r")):
            raise LineTooLong(self._max_line_bytes)


def decode_line(line: bytes) -> str:
    """A complete line as text; :class:`UndecodableLine` if it is not UTF-8."""
    try:
        return line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UndecodableLine(f"byte {exc.start}: {exc.reason}") from None


_IGNORED_FIELDS = frozenset({"event", "id", "retry"})


def sse_data(line: str) -> str | None:
    """The event data a line carries, or ``None`` for lines that carry none.

    ``data:`` (with or without the space) gives what follows; blank lines, comments and the other SSE
    fields give ``None``; anything else is a jsonlines line and is given back whole. One event per
    ``data:`` line is what every container sends, so multi-line ``data`` events are not joined.
    """
    if not line or line.startswith(":"):
        return None
    field, _, value = line.partition(":")
    if field == "data":
        return value[1:] if value.startswith(" ") else value
    # A line that is all field name ("event") is that field with an empty value, so it lands here too.
    if field in _IGNORED_FIELDS:
        return None
    return line
