"""Events that no front builds, which only a direct ``Invoke`` of the function can send: each is a 400 in the route's
own error shape (Anthropic's on /v1/messages), naming what is wrong, never an unhandled exception or a 500; and the
execution environment serves the next invocation.

The events go to the runtime as Lambda hands them over (the local Runtime API, real runtime processes); the next
request comes through the Function URL front as any client's would.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from sagestream.function_url import Prelude
from sagestream_local.runtime_api import FunctionError
from tests.client import request
from tests.e2e.conftest import GetStack

CHAT, MESSAGES = "/v1/chat/completions", "/v1/messages"
BODY = json.dumps({"messages": [{"role": "user", "content": "Hello"}]})


def url_event(path: str = CHAT, **fields: Any) -> dict[str, Any]:
    """A Function URL event (payload 2.0) for ``path``, its fields overridden by ``fields``."""
    event: dict[str, Any] = {
        "version": "2.0",
        "rawPath": path,
        "rawQueryString": "",
        "headers": {"content-type": "application/json", "authorization": "Bearer sk-malformed"},
        "requestContext": {"requestId": "r-1", "http": {"method": "POST", "path": path, "sourceIp": "127.0.0.1"}},
        "body": BODY,
        "isBase64Encoded": False,
    }
    event.update(fields)
    return event


def rest_event(**fields: Any) -> dict[str, Any]:
    """An API Gateway REST proxy event (payload 1.0) for the chat route, its fields overridden by ``fields``."""
    event: dict[str, Any] = {
        "resource": "/{proxy+}",
        "path": CHAT,
        "httpMethod": "POST",
        "headers": {"Content-Type": "application/json"},
        "multiValueHeaders": {"Content-Type": ["application/json"]},
        "pathParameters": {"proxy": CHAT.lstrip("/")},
        "requestContext": {"requestId": "r-2", "identity": {"sourceIp": "127.0.0.1"}},
        "body": BODY,
        "isBase64Encoded": False,
    }
    event.update(fields)
    return event


def with_context(**context: Any) -> dict[str, Any]:
    event = url_event()
    event["requestContext"].update(context)
    return event


MALFORMED: dict[str, Any] = {
    "a list": [1, 2],
    "a string": "hello",
    "a number": 42,
    "null": None,
    "list headers": url_event(headers=["content-type: application/json"]),
    "a header that is a number": url_event(headers={"content-type": "application/json", "x-n": 7}),
    "list query": url_event(queryStringParameters=["a=1"]),
    "a string requestContext": url_event(requestContext="ctx"),
    "a list http": with_context(http=["POST"]),
    "a numeric requestId": with_context(requestId=12),
    "isBase64Encoded 'false'": url_event(isBase64Encoded="false"),
    "bad base64": url_event(body="not base64 at all!", isBase64Encoded=True),
    "a numeric userArn": with_context(authorizer={"iam": {"userArn": 123}}),
    "an object body": url_event(body={"messages": []}),
    "a lone surrogate in the body": url_event(body='{"x": "\ud800"}'),
    "a lone surrogate in the path": url_event("/v1/\ud800"),
    "a lone surrogate in a header": url_event(headers={"content-type": "application/json", "x-a": "\ud800"}),
    "a lone surrogate in the requestId": with_context(requestId="\ud800"),
    "a rest string multi-value header": rest_event(multiValueHeaders={"Content-Type": "application/json"}),
    "a rest string pathParameters": rest_event(pathParameters="v1/chat/completions"),
    "a rest string identity": rest_event(requestContext={"identity": "me"}),
}


class Collected:
    """The invocation's response as the runtime streamed it: prelude, body, how it ended."""

    def __init__(self) -> None:
        self.status: int | None = None
        self.headers: dict[str, str] = {}
        self.body = b""
        self.error: FunctionError | None = None
        self.ended = threading.Event()

    def prelude(self, prelude: Prelude) -> None:
        self.status, self.headers = prelude.status, prelude.headers

    def chunk(self, data: bytes) -> None:
        self.body += data

    def end(self, error: FunctionError | None) -> None:
        self.error = error
        self.ended.set()


def invoke(stack: Any, event: Any) -> Collected:
    """``event`` handed to the function as a direct Invoke hands it over."""
    sink = Collected()
    inv = stack.pool.submit(event, sink, wait_s=30)
    assert inv.wait(30) and sink.ended.wait(5), "the invocation ended"
    return sink


@pytest.fixture
def keyed(stack_for: GetStack) -> Any:
    """One environment (the next invocation goes to the one that took the malformed event), keys required: the
    400 comes before the key check, which a malformed event could not pass."""
    return stack_for(concurrency=1, AUTH_MODE="api_key", API_KEYS="sk-malformed")


@pytest.mark.parametrize("event", list(MALFORMED.values()), ids=list(MALFORMED))
def test_a_malformed_event_is_a_400_naming_it_and_the_next_invocation_is_served(keyed: Any, event: Any) -> None:
    answer = invoke(keyed, event)
    assert answer.error is None, f"no unhandled exception: {answer.error}"
    assert answer.status == 400 and answer.headers["content-type"] == "application/json"
    error = json.loads(answer.body)["error"]
    assert error["type"] == "invalid_request_error" and error["code"] == "invalid_event"
    assert "not one a Function URL or API Gateway sends" in error["message"]
    assert keyed.endpoint.records == [], "nothing reached the endpoint"
    served = request(
        keyed.url,
        "POST",
        CHAT,
        {"messages": [{"role": "user", "content": "hi"}]},
        headers={"x-api-key": "sk-malformed"},
    )
    assert served.status == 200


def test_the_400_names_the_field_and_takes_the_routes_shape(keyed: Any) -> None:
    chat = json.loads(invoke(keyed, url_event(headers=["x"])).body)["error"]
    assert "`$.headers`" in chat["message"]
    flag = json.loads(invoke(keyed, url_event(isBase64Encoded="false")).body)["error"]
    assert "isBase64Encoded" in flag["message"]
    anthropic = invoke(keyed, url_event(MESSAGES, headers=["x"]))
    body = json.loads(anthropic.body)
    assert anthropic.status == 400 and body["type"] == "error"
    assert body["error"]["type"] == "invalid_request_error" and "`$.headers`" in body["error"]["message"]
