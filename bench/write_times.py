"""When the runtime process wrote each content delta: the function's own added latency, without the harness.

Loaded as ``_HANDLER=bench.write_times.handler`` by :mod:`bench.many`: the function's handler, with each
invocation's body writes timed (``time.monotonic_ns`` after the write returned, the same clock the
simulated endpoint stamps its sends with) and, once the invocation ends, one JSON line ``{"prompt": ...,
"writes": [ns, ...]}`` appended to the file ``WRITE_TIMES`` names. Only the writes that carry a content
delta are kept, so the k-th time pairs with the endpoint's k-th token.

A send-to-write figure is what the runtime adds: the upstream socket, its wake-up, the GIL, the relay and
the write into the Runtime API's socket. What comes after (the Runtime API and Function URL, AWS's on
Lambda; here local stand-ins sharing a Python process and a CPU with the endpoint and the clients) is not
in it.
"""

from __future__ import annotations

import base64
import json
import os
import threading
import time
from typing import Any

_lock = threading.Lock()
_CONTENT, _EMPTY = b'"delta":{"content":"', b'"delta":{"content":""'


def _install() -> Any:
    from sagestream import app

    inner = app.handler
    path = os.environ["WRITE_TIMES"]

    def handler(event: dict[str, Any], stream: Any, context: Any) -> Any:
        body = event.get("body") or "{}"
        if event.get("isBase64Encoded"):
            body = base64.b64decode(body)
        prompt = json.loads(body)["messages"][-1]["content"]
        writes: list[int] = []
        write = stream.write

        def timed_write(data: bytes | str) -> None:
            write(data)
            raw = data.encode() if isinstance(data, str) else data
            if _CONTENT in raw and _EMPTY not in raw:  # as the clients count: a delta with text in it
                writes.append(time.monotonic_ns())

        stream.write = timed_write
        try:
            return inner(event, stream, context)
        finally:
            line = json.dumps({"prompt": prompt, "writes": writes}) + "\n"
            with _lock, open(path, "a") as out:
                out.write(line)

    return handler


def __getattr__(name: str) -> Any:
    """``handler``, made when the runtime asks for it (``_HANDLER``)."""
    if name != "handler":
        raise AttributeError(name)
    handler = globals()["handler"] = _install()
    return handler
