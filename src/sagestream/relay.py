"""The pump: PayloadPart bytes in, ``(delta, bytes)`` out. No I/O, no clock, no invocation record.

One streamed answer goes PayloadPart bytes → :class:`~sagestream.lines.LineSplitter` → SSE line →
dialect decoder → :class:`~sagestream.delta.Delta` → the client API's :class:`~sagestream.protocols.StreamEncoder`
(:class:`~sagestream.protocols.openai.encoder.ChunkEncoder` for OpenAI's) → bytes.
:func:`relay` is that path as a generator: it yields each delta with its bytes the moment the part that
completed it has been split and decoded, before it asks for the next part (invariant 1 of
docs/architecture.md); whoever iterates writes the bytes and notes the delta. The bytes may be empty:
a delta that only carries usage, say, is noted but sends nothing yet.

Faults are stream items (as in aws-lambda-rust-runtime): any exception out of the parts (an upstream
failure, :class:`~sagestream.faults.DeadlineReached`) or out of the parsers becomes an
:class:`~sagestream.errors.APIError` through :func:`~sagestream.faults.error_from`. Before any bytes
were yielded it is raised, so the caller can still answer with its HTTP status. After, it is yielded as
``(err, encoder.error(err))`` and the generator ends: the stream closes without its normal end (``[DONE]``
in OpenAI's format; invariant 6). A deadline first closes the answer with ``finish_reason: "length"``: the
client knows it was cut.

An empty part is the endpoint's silence (:data:`~sagestream.upstream.SILENCE`: the parts' reader saw
nothing for the keep-alive interval): it yields ``(KEEPALIVE, KEEPALIVE_EVENT)``, an SSE comment every
client protocol's parser skips, and the response counts as started from then on.

A good end yields a last chunk with ``finish_reason: "stop"`` when the container never gave one, then
``(None, b"data: [DONE]\\n\\n")`` (with the usage chunk before it when asked for).

Environment variables read: none.

Example::

    >>> import json
    >>> from sagestream.dialects import dialect_named
    >>> from sagestream.protocols.openai.encoder import ChunkEncoder
    >>> encoder = ChunkEncoder(model="m", kind="completion", include_usage=False, id="cmpl-1", created=0)
    >>> parts = [b'data: {"choices": [{"text": "Hi"}]}\\n\\ndata: {"choices": [{"te', b'xt": "!"}]}\\n\\n']
    >>> for item, data in relay(parts, dialect_named("openai").stream_decoder(), encoder):
    ...     print(repr(item.content) if item else item, json.loads(data[6:]) if item else data)
    'Hi' ... 'choices': [{'index': 0, 'text': 'Hi', 'logprobs': None, 'finish_reason': None}]}
    '!' ... 'choices': [{'index': 0, 'text': '!', 'logprobs': None, 'finish_reason': None}]}
    '' ... 'choices': [{'index': 0, 'text': '', 'logprobs': None, 'finish_reason': 'stop'}]}
    None b'data: [DONE]\\n\\n'
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from sagestream.delta import Delta
from sagestream.dialects import StreamDecoder
from sagestream.errors import DEADLINE_EXCEEDED, APIError
from sagestream.faults import error_from
from sagestream.lines import LineSplitter, decode_line, sse_data
from sagestream.protocols._api import StreamEncoder

__all__ = ["KEEPALIVE", "KEEPALIVE_EVENT", "Item", "KeepAlive", "relay"]


class KeepAlive:
    """What :func:`relay` yields for the endpoint's silence: no delta, only bytes that keep the stream open."""

    __slots__ = ()


KEEPALIVE = KeepAlive()
KEEPALIVE_EVENT = b": keep-alive\n\n"

Item = tuple[Delta | APIError | KeepAlive | None, bytes]
"""What :func:`relay` yields: a delta and its bytes; a keep-alive and its comment; ``None`` and the closing
bytes; or the fault and its SSE error event, last."""


def relay(parts: Iterable[bytes], decoder: StreamDecoder, encoder: StreamEncoder) -> Iterator[Item]:
    """The SSE bytes of one streamed answer, delta by delta, from the PayloadParts that carry it."""
    sent = False  # were any bytes yielded: then the response has started and faults travel in it
    finished = False  # did a delta say why the answer ended
    splitter = LineSplitter()
    try:
        for part in parts:
            if not part:  # SILENCE: the endpoint has said nothing for the keep-alive interval
                sent = True
                yield KEEPALIVE, KEEPALIVE_EVENT
                continue
            for line in splitter.feed(part):
                for delta, data in _deltas(line, decoder, encoder):
                    sent, finished = sent or bool(data), finished or bool(delta.finish_reason)
                    yield delta, data
            if decoder.done:
                break
        else:
            for line in splitter.finish():
                for delta, data in _deltas(line, decoder, encoder):
                    sent, finished = sent or bool(data), finished or bool(delta.finish_reason)
                    yield delta, data
    except Exception as exc:
        err = error_from(exc)
        if not sent:
            raise err from exc
        if err.code == DEADLINE_EXCEEDED:
            cut = Delta(finish_reason="length")
            yield cut, encoder.encode(cut)
        yield err, encoder.error(err)
        return
    if not finished:
        # The container ended without saying why; a client still needs a last chunk that does.
        stop = Delta(finish_reason="stop")
        yield stop, encoder.encode(stop)
    yield None, encoder.done()


def _deltas(line: bytes, decoder: StreamDecoder, encoder: StreamEncoder) -> Iterator[tuple[Delta, bytes]]:
    if not line:
        return  # the blank line after each SSE event carries nothing
    data = sse_data(decode_line(line))
    if data is None:
        return
    for delta in decoder.decode(data):
        yield delta, encoder.encode(delta)
