"""Handlers that misbehave on purpose, run in real runtime processes (``_HANDLER=tests.reliability.handlers.X``)."""

from __future__ import annotations

import base64
import json
from typing import Any

from sagestream.function_url import event_body
from sagestream.lambda_runtime import LambdaContext, ResponseStream
from sagestream.lambda_runtime import stream as runtime_stream


def raw_prelude(event: dict[str, Any], stream: ResponseStream, context: LambdaContext) -> None:
    """``{"prelude": base64}``: sends those bytes as the prelude, past ``encode_prelude``'s checks, as a
    runtime with a bug (or a handler writing its own prelude) would; the Function URL side must refuse it."""
    prelude = base64.b64decode(json.loads(event_body(event))["prelude"])
    checked = runtime_stream.encode_prelude
    runtime_stream.encode_prelude = lambda *args, **kwargs: prelude  # type: ignore[assignment]
    try:
        stream.start(200, {})
    finally:
        runtime_stream.encode_prelude = checked
    stream.write(b"body")
