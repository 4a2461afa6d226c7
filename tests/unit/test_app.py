"""The routes in-process, over a real boto3 client answered by the shared fakes: the route table (404, 405 with
Allow, HEAD), what unauthenticated answers say, x-request-id on every answer, and the writer's one rule."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest

from sagestream.config import Config
from sagestream.function_url import build_event
from sagestream.lambda_runtime import ClientDisconnected, WriteTimedOut
from sagestream.telemetry import Telemetry
from sagestream_local.endpoint import model_error
from tests.fakes import RecordingStream, Upstream, context, load_app, response, stubbed_client

app = load_app()
CHAT = "/v1/chat/completions"
ASK = {"messages": [{"role": "user", "content": "Hi"}]}


def make(**env: str) -> tuple[Any, Upstream]:
    upstream = Upstream()
    return app.App(Config.from_env({"SAGEMAKER_ENDPOINT_NAME": "unit-llm", **env}), stubbed_client(upstream)), upstream


def run(
    handler: Any,
    method: str,
    path: str,
    body: Any = None,
    headers: dict[str, str] | None = None,
    *,
    stream: RecordingStream | None = None,
    seconds_left: float = 60.0,
) -> RecordingStream:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode() if body is not None else b""
    event = build_event(
        method=method,
        raw_path=path,
        raw_query="",
        headers=list({"content-type": "application/json", **(headers or {})}.items()),
        body=raw,
        source_ip="127.0.0.1",
    )
    stream = stream or RecordingStream()
    handler(event, stream, context(seconds_left))
    assert stream.closed
    return stream


def logged(service: str, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Upstream, io.StringIO]:
    """An app whose log records and metrics go to the returned buffer."""
    # A service of its own: Powertools gives a logger that already has a handler no second one.
    monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", service)
    out = io.StringIO()
    config = Config.from_env({"SAGEMAKER_ENDPOINT_NAME": "unit-llm", "AUTH_MODE": "none"})
    upstream = Upstream()
    return app.App(config, stubbed_client(upstream), telemetry=Telemetry(config, out=out)), upstream, out


def invocation_log(out: io.StringIO) -> Any:
    [log] = [json.loads(line) for line in out.getvalue().splitlines() if '"message":"invocation"' in line]
    return log


@pytest.fixture(scope="module")
def open_app() -> Any:
    return make(AUTH_MODE="none", SERVE_UI="true")[0]


def test_a_known_path_with_the_wrong_method_is_a_405_naming_the_allowed_ones(open_app: Any) -> None:
    post_only = run(open_app, "GET", CHAT)
    assert post_only.status == 405 and post_only.headers["allow"] == "POST"
    get_only = run(open_app, "DELETE", "/v1/models")
    assert get_only.status == 405 and get_only.headers["allow"] == "GET, HEAD"
    assert json.loads(get_only.body)["error"]["code"] == "method_not_allowed"


def test_unknown_paths_and_models_are_404s(open_app: Any) -> None:
    assert json.loads(run(open_app, "GET", "/v2/x").body)["error"]["code"] == "unknown_url"
    missing = json.loads(run(open_app, "GET", "/v1/models/other").body)["error"]
    assert (missing["code"], missing["param"]) == ("model_not_found", "model")
    assert run(open_app, "GET", "/v1/models/unit-llm/").status == 200, "a trailing slash names the same route"


@pytest.mark.parametrize("path", ["/health", "/v1/models", "/v1/models/unit-llm", "/"])
def test_head_answers_as_get_does_without_the_body(open_app: Any, path: str) -> None:
    get, head = run(open_app, "GET", path), run(open_app, "HEAD", path)
    assert get.status == head.status == 200 and get.body
    assert head.body == b""
    assert {k: v for k, v in head.headers.items() if k != "x-request-id"} == {
        k: v for k, v in get.headers.items() if k != "x-request-id"
    }


def test_health_says_ok_and_nothing_else(open_app: Any) -> None:
    assert json.loads(run(open_app, "GET", "/health").body) == {"status": "ok"}


@pytest.mark.parametrize(
    ("method", "path", "body", "status"),
    [
        ("POST", CHAT, {**ASK, "stream": True}, 200),
        ("POST", CHAT, ASK, 200),
        ("POST", "/v1/completions", {"prompt": "Hi"}, 200),
        ("POST", CHAT, {"messages": []}, 400),
        ("GET", "/v1/models", None, 200),
        ("GET", "/nowhere", None, 404),
    ],
)
def test_every_answer_carries_the_invocations_id(open_app: Any, method: str, path: str, body: Any, status: int) -> None:
    answer = run(open_app, method, path, body)
    assert answer.status == status and answer.headers["x-request-id"] == "stub-invocation"


def test_chat_and_completion_are_one_handler_given_a_parser_and_a_kind(open_app: Any) -> None:
    chat = run(open_app, "POST", CHAT, {**ASK, "stream": True}).data_events()
    text = run(open_app, "POST", "/v1/completions", {"prompt": "Hi", "stream": True}).data_events()
    assert chat[0]["object"] == "chat.completion.chunk" and text[0]["object"] == "text_completion"
    assert chat[-1] == text[-1] == "[DONE]"
    refused = run(open_app, "POST", "/v1/completions", {"prompt": "Hi", "model": "gpt-4o"})
    assert (refused.status, json.loads(refused.body)["error"]["param"]) == (404, "model")


def test_a_container_refusal_before_the_stream_is_its_own_4xx_in_openais_shape() -> None:
    handler, upstream = make(AUTH_MODE="none")
    refusal = model_error(400, json.dumps({"object": "error", "message": "maximum context length is 8"}), "e", "v")
    upstream.override = lambda op, body: response(refusal.status, json.dumps(refusal.body).encode(), refusal.headers())
    answer = run(handler, "POST", CHAT, {**ASK, "stream": True})
    assert answer.status == 400 and answer.headers["x-request-id"] == "stub-invocation"
    error = json.loads(answer.body)["error"]
    assert (error["code"], error["type"], error["message"]) == (
        "context_length_exceeded",
        "invalid_request_error",
        "maximum context length is 8",
    )
    assert len(upstream.calls) == 1


def test_the_route_table_is_the_one_place_that_says_which_routes_need_a_key(open_app: Any) -> None:
    keyed = {path for path, route in open_app.routes.exact.items() if route.keyed}
    assert keyed == {
        CHAT,
        "/v1/completions",
        "/v1/messages",
        "/v1/messages/count_tokens",
        "/v1/models",
        "/v1/responses",
        "/v1/models/unit-llm",
    }


class StalledReader(RecordingStream):
    """A response whose caller stops reading after the first delta: the runtime's write times out."""

    def write(self, data: bytes | str) -> None:
        if self.writes:
            raise WriteTimedOut("the caller stopped reading")
        super().write(data)


def test_a_caller_that_stops_reading_ends_the_invocation_as_a_deadline_stop_with_its_record(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    handler, _, out = logged("unit-stalled-reader", monkeypatch)
    stream = run(handler, "POST", CHAT, {**ASK, "stream": True}, stream=StalledReader())
    assert len(stream.writes) == 1
    log = invocation_log(out)
    assert (log["error_code"], log["deadline_stop"], log["client_disconnected"]) == ("deadline_exceeded", True, False)


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_a_request_with_too_little_time_left_is_a_504_deadline_stop_and_the_endpoint_is_not_called(
    stream: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    handler, upstream, out = logged(f"unit-out-of-time-{stream}", monkeypatch)
    answer = run(handler, "POST", CHAT, {**ASK, "stream": stream}, seconds_left=1.0)  # less than the 3 s margin
    assert answer.status == 504 and json.loads(answer.body)["error"]["code"] == "deadline_exceeded"
    assert upstream.calls == []
    assert invocation_log(out)["deadline_stop"] is True


class GoneBeforeTheError(RecordingStream):
    """A client that is gone by the time the answer (an error) is written."""

    def write(self, data: bytes | str) -> None:
        raise ClientDisconnected("gone")


def test_a_client_that_leaves_while_its_error_is_written_is_noted_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    handler, _, out = logged("unit-gone-before-error", monkeypatch)
    run(handler, "POST", CHAT, b"x", {"content-type": "text/plain"}, stream=GoneBeforeTheError())  # raises nothing
    log = invocation_log(out)
    assert (log["status"], log["client_disconnected"]) == (415, True)


def test_every_client_a_request_reaches_for_is_made_at_init_never_on_the_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The store's and quotas' DynamoDB client, the Lambda client a background request starts its run with, and
    Bedrock's for a guardrail: each parses a service model when made, which beside a relaying stream holds its
    deltas back (issue 53); made by App's init, the request path only finds them."""
    import botocore.session

    from sagestream import storage
    from sagestream.protocols.responses import background, stored

    env = {"AWS_DEFAULT_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x"}
    for name, value in {**env, "AWS_ENDPOINT_URL_DYNAMODB": "http://127.0.0.1:9"}.items():
        monkeypatch.setenv(name, value)
    made: list[str] = []
    create = botocore.session.Session.create_client

    def counted(self: Any, service: str, *args: Any, **kwargs: Any) -> Any:
        made.append(service)
        return create(self, service, *args, **kwargs)

    monkeypatch.setattr(botocore.session.Session, "create_client", counted)
    monkeypatch.setattr(storage, "_clients", {})
    monkeypatch.setattr(background, "_LAMBDA", [])
    monkeypatch.setattr(stored, "_STORES", {})
    monkeypatch.setattr(stored, "_RUNS", {})
    config = Config.from_env(
        {
            "SAGEMAKER_ENDPOINT_NAME": "unit-llm",
            "RESPONSES_STORE": "dynamodb",
            "RESPONSES_TABLE": "responses",
            "QUOTAS": "tokens_per_minute=100",
            "QUOTAS_TABLE": "quotas",
            "GUARDRAIL_ID": "gr-1",
        }
    )
    upstream_client = stubbed_client(Upstream())  # the upstream's, made as the module's init makes it
    made.clear()
    the_app = app.App(config, upstream_client)
    assert sorted(made) == ["bedrock-runtime", "dynamodb", "lambda"], made  # one DynamoDB client for both tables
    made.clear()
    assert stored.store_for(config).db.client is storage.dynamodb()  # type: ignore[union-attr]
    assert stored.runs_for(config).store.db.client is the_app.quotas.db.client  # type: ignore[union-attr]
    assert background._lambda() is background._LAMBDA[0] and the_app.guardrails is not None
    assert made == [], "the request path made a client"
