"""The fastapi-aiobotocore peer: the usual Python design, FastAPI on uvicorn with aiobotocore, as it runs
behind the Lambda Web Adapter (which turns Lambda's invocations into HTTP requests to it; the bench sends
those requests itself, so the adapter's own process and its cost are not counted).

Run in a venv of its own (requirements.txt beside this file) by ``bench.designs``::

    .venv-bench-fastapi/bin/python -m uvicorn app:app --app-dir bench/fastapi_peer --fd 3

A chat request in; the endpoint's OpenAI-style SSE out, each PayloadPart's complete lines decoded and
written on as OpenAI ``chat.completion.chunk`` events as they arrive, then ``data: [DONE]``: the same work
as the node-streamify peer's handler. The client is made once, at start-up (FastAPI's lifespan).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from aiobotocore.session import get_session
from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse

ENDPOINT_NAME = os.environ.get("SAGEMAKER_ENDPOINT_NAME", "")


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    async with get_session().create_client("sagemaker-runtime") as client:
        app.state.client = client
        yield


app = FastAPI(lifespan=lifespan)


def _chunk(chat_id: str, created: int, choice: dict[str, Any]) -> str:
    out = {
        "id": chat_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": ENDPOINT_NAME,
        "choices": [{"index": 0, "delta": choice.get("delta") or {}, "finish_reason": choice.get("finish_reason")}],
    }
    return f"data: {json.dumps(out)}\n\n"


@app.post("/v1/chat/completions")
async def chat(request: Request) -> StreamingResponse:
    body = await request.json()
    upstream: dict[str, Any] = {"messages": body["messages"], "stream": True}
    if body.get("max_tokens") is not None:
        upstream["max_tokens"] = body["max_tokens"]
    response = await request.app.state.client.invoke_endpoint_with_response_stream(
        EndpointName=ENDPOINT_NAME, ContentType="application/json", Body=json.dumps(upstream)
    )
    chat_id, created = f"chatcmpl-{time.time_ns():x}", int(time.time())

    async def events() -> AsyncIterator[str]:
        tail = b""
        async for event in response["Body"]:
            part = event.get("PayloadPart")
            if not part:
                continue
            *lines, tail = (tail + part["Bytes"]).split(b"\n")
            for line in lines:
                if not line.startswith(b"data:") or line[5:].strip() == b"[DONE]":
                    continue
                choices = json.loads(line[5:]).get("choices") or ()
                if choices:
                    yield _chunk(chat_id, created, choices[0])
        yield "data: [DONE]\n\n"

    return StreamingResponse(events(), media_type="text/event-stream")
