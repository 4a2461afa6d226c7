"""Quotas as the app meets them, in-process: a real boto3 client answered by the shared fakes upstream, and the
counts in moto's DynamoDB server on loopback. The reservation comes before the upstream call (a refusal sends
nothing upstream), the headers ride on the answer, and the settle runs once the response is closed, charging
the container's usage, or what was written to a client that left, or nothing when nothing was generated."""

from __future__ import annotations

import hashlib
import io
import itertools
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from sagestream import metering, quotas
from sagestream.auth import Authenticator
from sagestream.config import Config
from sagestream.lambda_runtime import ClientDisconnected
from sagestream.quotas import DynamoQuotas
from sagestream.telemetry import Telemetry
from sagestream_local.dynamodb import LocalDynamoDB
from tests.fakes import RecordingStream, Upstream, load_app, response, stubbed_client
from tests.unit.test_app import CHAT, run

app = load_app()
_SERVICES = itertools.count()
KEY = "sk-metered"
ASK = [{"role": "user", "content": "Hi"}]


@pytest.fixture(scope="module")
def db() -> Iterator[LocalDynamoDB]:
    with LocalDynamoDB() as local:
        yield local


@pytest.fixture(autouse=True)
def _within_one_minute() -> None:
    """A test's requests and its reading of their counts fall in one minute's item."""
    left = 60 - time.time() % 60
    if left < 5:
        time.sleep(left + 0.1)


def fingerprint(key: str) -> str:
    return "key:" + hashlib.sha256(key.encode()).hexdigest()[:16]


def make(
    db: LocalDynamoDB, monkeypatch: pytest.MonkeyPatch, quota: str, client: Any = None, **env: str
) -> tuple[Any, Upstream, io.StringIO]:
    """An app with ``quota`` for every caller, counting in ``db`` (or through ``client``), logging to a buffer."""
    # A service of its own each: Powertools gives a logger that already has a handler no second one.
    monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", f"metering-{next(_SERVICES)}")
    settings = {
        "SAGEMAKER_ENDPOINT_NAME": "unit-llm",
        "AUTH_MODE": "api_key",
        "API_KEYS": KEY,
        "QUOTAS": quota,
        "QUOTAS_TABLE": db.quotas_table,
        **env,
    }
    config = Config.from_env(settings)
    out = io.StringIO()
    upstream = Upstream()
    # The app makes its DynamoDB client at init, as in Lambda: for this test's table (and replaced below).
    monkeypatch.setenv("AWS_DEFAULT_REGION", db.region)
    monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", db.url)
    the_app = app.App(config, stubbed_client(upstream), telemetry=Telemetry(config, out=out))
    assert the_app.quotas is not None
    the_app.quotas = DynamoQuotas(db.quotas_table, the_app.quotas.policy, client or db.client())
    return the_app, upstream, out


def log_of(out: io.StringIO) -> dict[str, Any]:
    [record] = [json.loads(line) for line in out.getvalue().splitlines() if '"message":"invocation"' in line]
    out.truncate(0)
    out.seek(0)
    return record  # type: ignore[no-any-return]


def minute_tokens(db: LocalDynamoDB, key: str = KEY) -> int:
    digest = hashlib.sha256(fingerprint(key).encode()).hexdigest()[:32]
    pk = f"{digest}#minute#{int(time.time() // 60)}"
    item = db.client().get_item(TableName=db.quotas_table, Key={"pk": {"S": pk}}, ConsistentRead=True)
    return int(item.get("Item", {}).get("tokens", {}).get("N", "0"))


AUTH = {"authorization": f"Bearer {KEY}"}


def test_a_stream_carries_the_headers_and_settles_to_the_containers_usage(
    db: LocalDynamoDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    the_app, upstream, out = make(db, monkeypatch, "tokens_per_minute=100000000 requests_per_minute=1000000")
    before = minute_tokens(db)
    answer = run(the_app, "POST", CHAT, {"messages": ASK, "stream": True, "max_tokens": 5}, AUTH)
    assert answer.status == 200 and answer.headers["x-ratelimit-limit-tokens"] == "100000000"
    assert int(answer.headers["x-ratelimit-remaining-requests"]) < 1000000
    sent = json.loads(upstream.calls[-1][3])
    assert sent["stream_options"] == {"include_usage": True}, "the container is asked for its usage"
    events = answer.data_events()
    assert not any(isinstance(e, dict) and e.get("usage") for e in events), "the client did not ask for it"
    record = log_of(out)
    assert record["quota"] == "reserved" and record["quota_subject"] == fingerprint(KEY)
    # The stub reports its usage (prompt tokens and the 5 generated): that is the charge, not the worst case.
    assert record["quota_tokens"] == minute_tokens(db) - before and 5 <= record["quota_tokens"] < 40
    asked = run(
        the_app,
        "POST",
        CHAT,
        {"messages": ASK, "stream": True, "max_tokens": 5, "stream_options": {"include_usage": True}},
        AUTH,
    )
    usage = [e["usage"] for e in asked.data_events() if isinstance(e, dict) and e.get("usage")][-1]
    assert log_of(out)["quota_tokens"] == usage["total_tokens"]


def test_a_refusal_sends_nothing_upstream(db: LocalDynamoDB, monkeypatch: pytest.MonkeyPatch) -> None:
    the_app, upstream, out = make(db, monkeypatch, "requests_per_minute=0")
    refused = run(the_app, "POST", CHAT, {"messages": ASK}, AUTH)
    assert refused.status == 429 and upstream.calls == []
    assert json.loads(refused.body)["error"]["type"] == "requests"
    assert refused.headers["retry-after"] and refused.headers["x-ratelimit-limit-requests"] == "0"
    assert log_of(out)["quota"] == "refused"
    messages = run(the_app, "POST", "/v1/messages", {"messages": ASK, "max_tokens": 5, "model": "unit-llm"}, AUTH)
    assert messages.status == 429 and json.loads(messages.body)["error"]["type"] == "rate_limit_error"
    assert messages.headers["anthropic-ratelimit-requests-limit"] == "0"
    assert "x-ratelimit-limit-requests" not in messages.headers


class Leaving(RecordingStream):
    """A client that reads ``writes`` chunks and goes."""

    def __init__(self, writes: int) -> None:
        super().__init__()
        self.left = writes

    def write(self, data: bytes | str) -> None:
        if self.left <= 0:
            raise ClientDisconnected("gone")
        self.left -= 1
        super().write(data)


def test_a_client_that_leaves_is_charged_the_prompt_and_what_was_written(
    db: LocalDynamoDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    the_app, upstream, out = make(db, monkeypatch, "tokens_per_minute=100000000")
    upstream.scenario = type(upstream.scenario)(ttft_ms=0, cadence_ms=0, tokens=30, non_ascii=0.0)
    run(the_app, "POST", CHAT, {"messages": ASK, "stream": True, "max_tokens": 30}, AUTH, stream=Leaving(4))
    record = log_of(out)
    assert record["client_disconnected"] is True
    payload = upstream.calls[-1][3]
    # No usage reached the function (the stream was closed first): the estimate and the deltas written.
    assert record["quota_tokens"] == quotas.estimate_tokens(payload) + record["output_tokens"]
    assert record["output_tokens"] < 30


def test_nothing_generated_is_nothing_charged(db: LocalDynamoDB, monkeypatch: pytest.MonkeyPatch) -> None:
    the_app, upstream, out = make(db, monkeypatch, "tokens_per_minute=100000000")
    upstream.override = lambda operation, body: response(500, b'{"message": "boom"}')
    before = minute_tokens(db)
    failed = run(the_app, "POST", CHAT, {"messages": ASK, "stream": True}, AUTH)
    assert failed.status >= 500
    assert log_of(out)["quota_tokens"] == 0 and minute_tokens(db) == before


@pytest.mark.parametrize(("mode", "status"), [("closed", 503), ("open", 200)])
def test_dynamodb_out_of_reach_is_closed_or_open_never_a_500(
    db: LocalDynamoDB, monkeypatch: pytest.MonkeyPatch, mode: str, status: int
) -> None:
    import botocore.config
    import botocore.session

    dead = botocore.session.get_session().create_client(
        "dynamodb",
        region_name="us-east-1",
        endpoint_url="http://127.0.0.1:9",
        aws_access_key_id="x",
        aws_secret_access_key="x",
        config=botocore.config.Config(connect_timeout=0.5, retries={"max_attempts": 1}),
    )
    the_app, upstream, out = make(db, monkeypatch, "tokens_per_minute=10", client=dead, QUOTAS_UNAVAILABLE=mode)
    answer = run(the_app, "POST", CHAT, {"messages": ASK}, AUTH)
    assert answer.status == status and log_of(out)["quota"] == "unavailable"
    if mode == "closed":
        assert json.loads(answer.body)["error"]["code"] == "quota_unavailable" and upstream.calls == []
        assert answer.headers["retry-after"] == str(quotas.UNAVAILABLE_RETRY_S)
    else:
        assert len(upstream.calls) == 1 and "x-ratelimit-limit-tokens" not in answer.headers


class NoSettles:
    """DynamoDB that reserves but whose settles' answers are lost."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def update_item(self, **args: Any) -> Any:
        if ":d" in args["ExpressionAttributeValues"]:
            raise ConnectionResetError("reset")
        return self.inner.update_item(**args)


def test_a_settle_that_fails_is_logged_and_counted_and_the_answer_stands(
    db: LocalDynamoDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    the_app, _upstream, out = make(db, monkeypatch, "tokens_per_minute=100000000", client=NoSettles(db.client()))
    answer = run(the_app, "POST", CHAT, {"messages": ASK, "stream": True}, AUTH)
    assert answer.status == 200 and answer.data_events()[-1] == "[DONE]"
    text = out.getvalue()
    record = log_of(out)
    assert record["quota_settle_failed"] is True
    assert '"QuotaSettleFailures":[1.0]' in text and "not applied" in text


def test_requests_alone_need_no_settle(db: LocalDynamoDB, monkeypatch: pytest.MonkeyPatch) -> None:
    the_app, _upstream, out = make(db, monkeypatch, "requests_per_minute=1000")
    answer = run(the_app, "POST", CHAT, {"messages": ASK, "stream": True}, AUTH)
    assert answer.status == 200 and answer.headers["x-ratelimit-limit-requests"] == "1000"
    assert "x-ratelimit-limit-tokens" not in answer.headers
    record = log_of(out)
    assert record["quota"] == "reserved" and "quota_tokens" not in record, "no token limit: nothing to settle"


def test_a_named_key_is_matched_by_its_name() -> None:
    class Source:
        def get(self, name: str, max_age: int | None = None, **kwargs: Any) -> str:
            return json.dumps({"ci": "sk-ci-1", "alice": "sk-alice-1"})

    config = Config(endpoint_name="llm", auth_mode="api_key", api_keys_parameter="ssm:/keys")
    auth = Authenticator(config, sources={"ssm": Source()})
    headers = {"authorization": "Bearer sk-ci-1"}
    auth.check(headers)
    digest, name = auth.matched_key(headers) or ("", None)
    assert name == "ci" and digest == hashlib.sha256(b"sk-ci-1").hexdigest()
    assert quotas.subject("api_key", key=(digest, name)).names == ("key:ci", fingerprint("sk-ci-1"))
    assert Authenticator(Config(endpoint_name="llm", auth_mode="none")).matched_key(headers) is None


def test_the_style_follows_the_api() -> None:
    assert metering.style_of("messages") == "anthropic"
    assert {metering.style_of(kind) for kind in ("chat", "completion", "response")} == {"openai"}
