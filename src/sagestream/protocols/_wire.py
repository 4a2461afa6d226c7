"""What the three encoders write alike: compact JSON, one JSON string, an SSE event, padding, ids.

Written by hand: these are a few lines over the standard library's ``json``, on the path of every token, and
each is measured (``make bench``: instructions per delta) against the alternatives.

Environment variables read: none.

Example::

    >>> dumps({"a": "é", "b": [1, 2.5, None]})
    b'{"a":"\xc3\xa9","b":[1,2.5,null]}'
    >>> event({"x": 1}), event({"type": "ping"}, "ping")
    (b'data: {"x":1}\\n\\n', b'event: ping\\ndata: {"type":"ping"}\\n\\n')
    >>> padding(6), padding(0)
    (b':   \\n\\n', b'')
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

from sagestream.errors import APIError

__all__ = ["MIN_PAD_BYTES", "dumps", "error_event", "event", "json_string", "new_id", "padding"]

# The smallest SSE comment: a colon, one space of padding, and the blank line that ends it.
MIN_PAD_BYTES = len(b": \n\n")


def _not_json(obj: Any) -> Any:
    raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")


# json's C encoder, made once with json.dumps(ensure_ascii=False, separators=(",", ":"))'s options and no
# circular-reference check (events are built from JSON values): JSONEncoder.encode builds one per call, which
# is half of what serialising a small event costs. c_make_encoder is the C half of the standard library's own
# json.encoder (not a public name): where an interpreter lacks it, the public encoder gives the same bytes.
_c_make_encoder: Any = getattr(json.encoder, "c_make_encoder", None)
_c_encode_basestring: Any = getattr(json.encoder, "c_encode_basestring", None)
_C_ENCODER: Any = (
    _c_make_encoder(None, _not_json, _c_encode_basestring, None, ":", ",", False, False, True)
    if _c_make_encoder is not None and _c_encode_basestring is not None
    else None
)
_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def dumps(obj: Any) -> bytes:
    """``obj`` as compact JSON bytes, as ``json.dumps(obj, ensure_ascii=False, separators=(",", ":"))``."""
    if _C_ENCODER is not None:
        return "".join(_C_ENCODER(obj, 0)).encode()
    return _JSON.encode(obj).encode()


# One JSON string, quotes included, as json.dumps(s, ensure_ascii=False) writes it: json's own C encoder of a
# string without the Python frame of JSONEncoder.encode around it. The text-delta fast paths run it per delta.
json_string: Callable[[str], str] = _c_encode_basestring or json.encoder.encode_basestring


def event(obj: Any, name: str | None = None) -> bytes:
    """One SSE event whose data is ``obj`` as compact JSON; named (``event:``) when ``name`` is given."""
    data = b"data: " + dumps(obj) + b"\n\n"
    return b"event: " + name.encode() + b"\n" + data if name is not None else data


def padding(pad_bytes: int) -> bytes:
    """An SSE comment of ``pad_bytes`` bytes (SSE_PAD_BYTES) that clients skip; none for 0.

    It fills a proxy's fixed read block, so that a small event is not held back waiting for more bytes."""
    if not pad_bytes:
        return b""
    if pad_bytes < MIN_PAD_BYTES:
        raise ValueError(f"pad_bytes must be 0 or at least {MIN_PAD_BYTES}")
    return b":" + b" " * (pad_bytes - 3) + b"\n\n"


def new_id(prefix: str) -> str:
    """A fresh object id: ``prefix`` and 32 hex digits (``chatcmpl-``, ``msg_``, ``resp_``, ...)."""
    return prefix + uuid.uuid4().hex


def error_event(err: APIError) -> bytes:
    """The SSE event for an error after the first byte: OpenAI's error shape in one ``data:`` event.

    Chat and completions write it (their encoders' ``error``), and so does the app for a route that has no
    encoder when its answer fails after a byte (a route of OpenAI's shape, as every route without a client API).

        >>> error_event(APIError.upstream(502, "model died", code="upstream_error"))[:33]
        b'data: {"error":{"message":"model '
    """
    return b"data: " + err.json_bytes() + b"\n\n"
