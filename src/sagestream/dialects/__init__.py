"""The container dialects: what a SageMaker model container is sent, and its answers read into deltas.

A *dialect* is the body format a container speaks, one :class:`Dialect` each:

``openai`` (:mod:`~sagestream.dialects.openai`)
    OpenAI ``chat.completion.chunk`` / ``text_completion`` events ending with ``[DONE]``: TGI's Messages
    API, vLLM, SGLang and LMI's chat endpoint.
``tgi`` (:mod:`~sagestream.dialects.tgi`)
    text-generation-inference ``generate_stream`` events: ``{"token": {"text", "special"}, "details"}``,
    ``details`` only on the last one.
``lmi`` (:mod:`~sagestream.dialects.lmi`)
    LMI (DJL Serving) rolling-batch jsonlines: TGI's event shape (:mod:`~sagestream.dialects.generate`
    holds what the two share) under other names.

A decoder is made per request (:meth:`Dialect.stream_decoder`) and fed one record at a time (the text of
one line, see :mod:`sagestream.lines`). Whatever the record, it either returns deltas or raises one of two
plain exceptions: :class:`DecodeError` when the record is not what the dialect promises,
:class:`UpstreamStreamError` when the container itself reports an error. The statuses a client sees for
them are given in one place, :func:`sagestream.faults.error_from`.

A new dialect is one module with a :class:`Dialect` subclass (of its closest relative) and one line in
:data:`REGISTRY`.

Example::

    >>> tgi = dialect_named("tgi")
    >>> tgi.stream_decoder().decode('{"index": 1, "token": {"id": 9, "text": "Hé", "special": false}}')
    [Delta(content='Hé')]
    >>> DIALECTS
    ('openai', 'tgi', 'lmi')
"""

from __future__ import annotations

from sagestream.delta import Delta
from sagestream.dialects._base import Dialect, StreamDecoder
from sagestream.dialects._read import DecodeError, UpstreamStreamError, error_message
from sagestream.dialects.lmi import LMIDialect
from sagestream.dialects.openai import OpenAIDialect
from sagestream.dialects.tgi import TGIDialect

__all__ = [
    "DIALECTS",
    "REGISTRY",
    "DecodeError",
    "Delta",
    "Dialect",
    "StreamDecoder",
    "UpstreamStreamError",
    "dialect_named",
    "error_message",
]

# UPSTREAM_FORMAT's values, each the dialect it names; the first is the default.
REGISTRY: dict[str, Dialect] = {d.name: d for d in (OpenAIDialect(), TGIDialect(), LMIDialect())}
DIALECTS: tuple[str, ...] = tuple(REGISTRY)


def dialect_named(name: str) -> Dialect:
    """The dialect ``name`` names; ``ValueError`` naming the known ones if it is none of them.

    >>> dialect_named("lmi")
    <dialect lmi>
    """
    dialect = REGISTRY.get(name)
    if dialect is None:
        raise ValueError(f"Unknown dialect {name!r}; known dialects: {', '.join(DIALECTS)}.")
    return dialect
