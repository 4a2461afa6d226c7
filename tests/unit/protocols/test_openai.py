"""OpenAI's chat and completions routes keep their own format beside other client protocols."""

from __future__ import annotations

import json

from sagestream.config import Config
from sagestream.errors import APIError
from sagestream.protocols.openai import CHAT, COMPLETIONS
from tests.fakes import Upstream
from tests.unit.test_app import run
from tests.unit.test_protocols import bracketed_app


def test_a_refusal_on_an_apis_route_takes_that_apis_error_shape_and_the_openai_routes_keep_theirs() -> None:
    handler = bracketed_app(Upstream())
    mine = run(handler, "POST", "/v1/bracketed", {"messages": "not a list"})
    assert mine.status == 400
    assert json.loads(mine.body) == {"kind": "bracket-error", "status": 400, "what": "messages"}
    theirs = run(handler, "POST", "/v1/chat/completions", {"messages": "not a list"})
    assert theirs.status == 400 and json.loads(theirs.body)["error"]["param"] == "messages"


def test_the_openai_apis_read_their_own_request_model_and_keep_it_as_the_original() -> None:
    cfg = Config.from_env({"SAGEMAKER_ENDPOINT_NAME": "unit-llm"})
    chat = CHAT.parse(b'{"messages": [{"role": "user", "content": "Hi"}]}', cfg)
    completion = COMPLETIONS.parse(b'{"prompt": "Hi", "stream": true}', cfg)
    assert chat.original is chat.request and not chat.stream
    assert completion.original is completion.request and completion.stream
    assert CHAT.error_body(APIError.invalid_request("x")) == APIError.invalid_request("x").json_bytes()
