"""Security: a request reaches only the configured endpoint, variant and component; no header value from a
client or a model can inject or break prelude headers; cookies travel only in the prelude's ``cookies``; no
API key or credential reaches a log or a client, nor does a stack trace; the template grants no wildcard.
"""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sagestream.config import Config
from sagestream.function_url import PreludeError, build_event, decode_prelude, encode_prelude
from sagestream_local.endpoint import Scenario
from sagestream_local.function_url import FunctionURL
from sagestream_local.runtime_api import Pool
from sagestream_local.stack import LocalStack
from tests.cfn import load_template
from tests.client import StreamedResponse, request
from tests.conftest import PYTHONPATH
from tests.e2e.conftest import GetStack
from tests.fakes import (
    RecordingStream,
    Upstream,
    context,
    event_stream_response,
    load_app,
    stubbed_client,
)

CHAT = "/v1/chat/completions"
BODY = {"messages": [{"role": "user", "content": "Hello"}], "stream": True}


# --- only the configured endpoint, variant and component ---------------------------------------------------

FORGED_FIELDS = {
    "EndpointName": "other-endpoint",
    "endpoint_name": "other-endpoint",
    "endpoint": "other-endpoint",
    "TargetVariant": "green",
    "target_variant": "green",
    "InferenceComponentName": "ic-other",
    "inference_component": "ic-other",
    "CustomAttributes": "x",
    "url": "http://169.254.169.254/latest/meta-data/",
}
FORGED_HEADERS = {
    "X-Amzn-SageMaker-Target-Variant": "green",
    "X-Amzn-SageMaker-Inference-Component": "ic-other",
    "X-Amzn-SageMaker-Target-Model": "other.tar.gz",
    "X-Amzn-SageMaker-Target-Container-Hostname": "other",
    "X-Amzn-SageMaker-Session-Id": "NEW_SESSION",
    "X-Amzn-SageMaker-Custom-Attributes": "x",
    "X-Forwarded-Host": "runtime.sagemaker.us-west-2.amazonaws.com",
    "Host": "runtime.sagemaker.us-west-2.amazonaws.com",
}
PATHS = [
    "/v1/chat/completions/../../endpoints/other-endpoint/invocations",
    "/endpoints/other-endpoint/invocations-response-stream",
    "/v1/chat/completions?endpoint=other-endpoint&TargetVariant=green",
    "//v1/chat/completions",
    "/v1/chat%2Fcompletions",
    "/v1/models/other-endpoint",
    "/2015-03-31/functions/other/invocations",
]


@pytest.mark.parametrize("configured", [True, False], ids=["component-and-variant", "none-configured"])
def test_no_request_reaches_an_endpoint_variant_or_component_but_the_configured_ones(
    stack_for: GetStack, configured: bool
) -> None:
    stack = stack_for(INFERENCE_COMPONENT_NAME="ic-llama", TARGET_VARIANT="blue") if configured else stack_for()
    assert stack.endpoint is not None
    answers: list[StreamedResponse] = []
    for model in (None, "sagestream-sim", "other-endpoint", "ic-other", "arn:aws:sagemaker:us-east-1:1:endpoint/x"):
        body: dict[str, Any] = {**BODY, **FORGED_FIELDS, **({"model": model} if model else {})}
        for stream in (True, False):
            answers.append(request(stack.url, "POST", CHAT, {**body, "stream": stream}, headers=FORGED_HEADERS))
    for path in PATHS:
        answers.append(request(stack.url, "POST", path, BODY, headers=FORGED_HEADERS))
    answers.append(request(stack.url, "POST", "/v1/completions", {"prompt": "x", **FORGED_FIELDS}))
    assert {a.status for a in answers} <= {200, 400, 404, 405}, [a.status for a in answers]
    # A field OpenAI does not define is refused by name (issue 13), before any endpoint is called.
    for answer in answers:
        if answer.status == 400:
            error = answer.json()["error"]
            assert error["code"] == "unknown_parameter" and error["param"] in FORGED_FIELDS, error
    records = stack.endpoint.records
    assert len(records) == sum(a.status == 200 for a in answers) > 0
    for record in records:
        assert record.endpoint == "sagestream-sim"
        assert record.target_variant == ("blue" if configured else None)
        assert record.inference_component == ("ic-llama" if configured else None)
        assert isinstance(record.request, dict)
        assert not set(FORGED_FIELDS) & set(record.request), "a forged field reached the container"
        assert b"other-endpoint" not in record.body and b"ic-other" not in record.body


# --- prelude headers cannot be injected or broken ------------------------------------------------------------

BAD = ["\r", "\n", "\x00", "\r\n", "a\r\nSet-Cookie: evil=1", "a\nX-Injected: 1", "v\x00x"]


@pytest.mark.parametrize("bad", BAD)
def test_encode_prelude_refuses_cr_lf_and_nul_in_names_values_and_cookies(bad: str) -> None:
    for headers, cookies in (({"x-a": bad}, []), ({f"x{bad}": "v"}, []), ({}, [f"c={bad}"])):
        with pytest.raises(PreludeError):
            encode_prelude(200, headers, cookies)


@settings(max_examples=300, deadline=None)
@given(
    headers=st.dictionaries(st.text(max_size=12), st.text(max_size=24), max_size=5),
    cookies=st.lists(st.text(max_size=24), max_size=3),
)
def test_any_prelude_either_is_refused_or_decodes_to_exactly_what_was_given(
    headers: dict[str, str], cookies: list[str]
) -> None:
    try:
        data = encode_prelude(200, headers, cookies)
    except PreludeError:
        assert any(c in "".join([*headers, *headers.values(), *cookies]) for c in "\r\n\x00") or any(
            not n or ":" in n or " " in n or n.lower() == "set-cookie" for n in headers
        )
        return
    assert data.count(b"\x00" * 8) == 1 and data.endswith(b"\x00" * 8)
    prelude = decode_prelude(data[:-8])
    assert prelude.headers == headers and list(prelude.cookies) == cookies


@pytest.fixture(scope="module")
def raw_prelude_url() -> Iterator[FunctionURL]:
    env = {"_HANDLER": "tests.reliability.handlers.raw_prelude", "PYTHONPATH": PYTHONPATH}
    with Pool(size=1, timeout_s=30, env=env) as pool, FunctionURL(pool, port=0) as url:
        yield url


def _bad_prelude(headers: Any, cookies: Any = ()) -> str:
    raw = json.dumps({"statusCode": 200, "headers": headers, "cookies": list(cookies)}).encode() + b"\x00" * 8
    return base64.b64encode(raw).decode()


@pytest.mark.parametrize(
    ("headers", "cookies"),
    [
        ({"x-a": "1\r\nX-Injected: yes"}, []),
        ({"x-a": "1\x00X-Injected: yes"}, []),
        ({}, ["a=1\r\nX-Injected: yes"]),
        ({"x-a": "日本"}, []),  # not Latin-1: cannot be a header byte string
    ],
    ids=["crlf-value", "nul-value", "crlf-cookie", "non-latin-1"],
)
def test_the_local_front_refuses_a_prelude_that_would_inject_headers(
    raw_prelude_url: FunctionURL, headers: dict[str, str], cookies: list[str]
) -> None:
    url = raw_prelude_url
    resp = request(url.url, "POST", "/", {"prelude": _bad_prelude(headers, cookies)})
    assert resp.status == 502, (resp.status, resp.headers)
    assert resp.header("x-injected") is None and resp.header("set-cookie") is None
    assert resp.json() == {"Message": "Internal Server Error"}
    ok = request(url.url, "POST", "/", {"prelude": _bad_prelude({"x-a": "fine"}, ["c=1"])})
    assert ok.status == 200 and ok.header("x-a") == "fine" and ok.header_values("set-cookie") == ["c=1"]


def test_a_client_header_value_with_nul_or_odd_bytes_is_never_reflected(stack: LocalStack) -> None:
    resp = request(stack.url, "POST", CHAT, BODY, headers={"X-Probe": "a\x00b\x7fc", "Origin": "https://evil.example"})
    assert resp.status == 200
    assert all("evil" not in v and "\x00" not in v for _, v in resp.headers)


@pytest.fixture(scope="module")
def relay() -> tuple[Any, Upstream]:
    upstream = Upstream()
    app = load_app()
    return app.App(Config.from_env({"SAGEMAKER_ENDPOINT_NAME": "sec-llm"}), stubbed_client(upstream)), upstream


HOSTILE = "\r\nSet-Cookie: evil=1\r\n\r\n\n\ndata: [DONE]\n\nevent: x\r\x00\u2028"


def test_model_output_cannot_inject_headers_cookies_or_sse_events(relay: tuple[Any, Upstream]) -> None:
    from sagestream_local.endpoint import payload_part_frame

    handler, upstream = relay

    def hostile(operation: str, _: Any) -> Any:
        chunk = {"choices": [{"index": 0, "delta": {"content": HOSTILE}, "finish_reason": None}]}
        end = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
        frames = [payload_part_frame(b"data: " + json.dumps(c).encode() + b"\n\n") for c in (chunk, end)]
        frames.append(payload_part_frame(b"data: [DONE]\n\n"))
        return event_stream_response(
            frames,
            {"X-Amzn-SageMaker-Custom-Attributes": "a, Set-Cookie: evil=1", "X-Amzn-SageMaker-Closed-Session-Id": "s"},
        )

    upstream.override = hostile
    try:
        stream = RecordingStream()
        body = json.dumps(BODY).encode()
        event = build_event(
            method="POST",
            raw_path=CHAT,
            raw_query="",
            headers=[("content-type", "application/json")],
            body=body,
            source_ip="127.0.0.1",
        )
        handler(event, stream, context())
    finally:
        upstream.override = None
    assert stream.status == 200 and stream.cookies == ()
    assert set(stream.headers) == {
        "content-type",
        "cache-control",
        "x-accel-buffering",
        "x-content-type-options",
        "x-request-id",
    }
    events = stream.data_events()
    assert events.count("[DONE]") == 1 and events[-1] == "[DONE]"
    content = "".join(e["choices"][0]["delta"].get("content") or "" for e in events[:-1] if e["choices"])
    assert content == HOSTILE, "the model's text arrives whole, escaped inside its JSON"


# --- cookies ---------------------------------------------------------------------------------------------------


def test_a_clients_cookies_stay_in_the_event_and_go_nowhere_else(relay: tuple[Any, Upstream]) -> None:
    handler, upstream = relay
    secret = "session=cookie-secret-5f1c; theme=dark"
    event = build_event(
        method="POST",
        raw_path=CHAT,
        raw_query="",
        headers=[("Content-Type", "application/json"), ("Cookie", secret)],
        body=json.dumps(BODY).encode(),
        source_ip="127.0.0.1",
    )
    assert event["cookies"] == ["session=cookie-secret-5f1c", "theme=dark"] and "cookie" not in event["headers"]
    before = len(upstream.calls)
    stream = RecordingStream()
    handler(event, stream, context())
    assert stream.status == 200 and stream.cookies == ()
    assert not any("cookie" in k for k in stream.headers)
    (call,) = upstream.calls[before:]
    assert b"cookie-secret" not in call[3] and not any("cookie-secret" in v for v in call[2].values())


def test_cookies_reach_the_client_only_from_the_preludes_cookies(local_function: Any) -> None:
    url = local_function("tests.handlers.echo", size=1)
    resp = request(url.url, "GET", "/", headers={"Cookie": "in=1"})
    assert resp.header_values("set-cookie") == ["a=1; Path=/", "b=2"]
    echoed = resp.json()["event"]
    assert echoed["cookies"] == ["in=1"] and "cookie" not in echoed["headers"]


# --- no key, credential or stack trace in logs or answers ---------------------------------------------------

KEY = "sk-reliability-live-key-7d2e9a"
NEAR_MISS = "sk-reliability-live-key-7d2e9b"
SIM_SECRET = "sagestream-local-not-a-secret"
SIM_ACCESS_KEY = "AKIASAGESTREAMLOCAL0"
SECRETS = [KEY, NEAR_MISS, SIM_SECRET, SIM_ACCESS_KEY, "cookie-secret-91ab"]


@pytest.fixture(scope="module")
def logged(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalStack, Path]]:
    """A stack in api_key mode whose runtime processes' stdout and stderr both go to one file."""
    log = tmp_path_factory.mktemp("logs") / "runtime.log"
    with log.open("wb") as out:
        stack = LocalStack(
            port=0,
            concurrency=1,
            timeout_s=30,
            env={
                "PYTHONPATH": PYTHONPATH,
                "AUTH_MODE": "api_key",
                "API_KEYS": KEY,
                "UPSTREAM_READ_TIMEOUT_S": "1",
                "UPSTREAM_MAX_ATTEMPTS": "1",
                "POWERTOOLS_LOG_LEVEL": "DEBUG",
            },
            scenario=Scenario(ttft_ms=0, cadence_ms=1, tokens=8),
            upstream="simulated",
            command=["sh", "-c", 'exec "$0" -m sagestream.lambda_runtime 2>&1', sys.executable],
            stdout=out,
        )
        with stack:
            yield stack, log


def test_no_key_credential_or_stack_trace_reaches_a_log_or_a_client(logged: tuple[LocalStack, Path]) -> None:
    stack, log = logged
    assert stack.endpoint is not None
    cookie = {"Cookie": "session=cookie-secret-91ab"}
    good = {"Authorization": f"Bearer {KEY}", **cookie}
    answers: list[StreamedResponse] = []

    def call(path: str = CHAT, body: Any = BODY, **headers: str) -> StreamedResponse:
        resp = request(stack.url, "POST", path, body, headers=headers)
        answers.append(resp)
        return resp

    assert call(**good).status == 200
    assert call(**{**good, "Authorization": f"Bearer {NEAR_MISS}"}).status == 401
    assert call(**{"x-api-key": NEAR_MISS}).status == 401
    assert call(**{"Authorization": f"Basic {base64.b64encode(NEAR_MISS.encode()).decode()}"}).status == 401
    assert call(body={**BODY, "api_key": NEAR_MISS}).status == 401
    assert call(f"{CHAT}?api_key={NEAR_MISS}").status == 401
    assert call("/v1/nowhere", **good).status == 404
    assert call(body=b"{broken", **{**good, "Content-Type": "application/json"}).status == 400
    for fault, after in (("http_500", 0), ("http_424", 0), ("reset", 0), ("model_stream_error", 3), ("stall", 2)):
        stack.endpoint.set_scenario(fault=fault, fault_after=after)
        assert call(**good).status in (200, 400, 502, 504)
    stack.endpoint.set_scenario(endpoint_names=("not-this-one",))
    assert call(**good).status == 404
    stack.endpoint.reset_scenario()
    assert call(**good).status == 200
    request(stack.url, "GET", "/health")  # the last invocation's record is written after its stream closes

    text = log.read_text("utf-8", "replace")
    assert '"message":"invocation"' in text, "the runtime's log was not captured"
    for secret in SECRETS:
        assert secret not in text, f"{secret} is in the runtime's log"
    assert "Bearer" not in text and "x-api-key" not in text.lower().replace('"x-api-key"', "")
    for resp in answers:
        whole = resp.body.decode("utf-8", "replace") + "".join(f"{k}: {v}" for k, v in resp.headers)
        for secret in [*SECRETS, "Traceback", 'File "', "botocore", "123456789012"]:
            assert secret not in whole, (secret, whole[:300])


def test_a_handler_that_fails_shows_the_client_no_stack_trace(local_function: Any) -> None:
    url = local_function("tests.handlers.fails", size=1)
    for after in (0, 2):
        resp = request(url.url, "POST", "/", {"after": after})
        text = resp.body.decode() + "".join(v for _, v in resp.headers)
        assert "Traceback" not in text and "failed on purpose" not in text and 'File "' not in text
        assert "ValueError" not in resp.body.decode()  # X-Amzn-ErrorType names the type, as Lambda does
        assert resp.status == (502 if after == 0 else 200)


# --- the template grants no wildcard resource ----------------------------------------------------------------


# X-Ray and CloudWatch PutMetricData have no resource-level permissions: "*" is the only resource they take.
NO_RESOURCE_LEVEL = {"xray:PutTraceSegments", "xray:PutTelemetryRecords", "cloudwatch:PutMetricData"}
MANAGED_ALLOWED = {"AWSLambdaBasicExecutionRole", "AWSXRayDaemonWriteAccess"}


def _strings(value: Any) -> Iterator[str]:
    """Every literal string a resource value can become, through !Sub, !If, !Join and the rest."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            if key == "Fn::Sub":
                yield from _strings(item[0] if isinstance(item, list) else item)
            elif key in ("Ref", "Fn::GetAtt"):
                continue
            elif key == "Fn::If":
                yield from _strings(item[1:])
            else:
                yield from _strings(item)


def _resources(template: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every resource, those an ``Fn::ForEach`` loop (AWS::LanguageExtensions) makes included, as written."""
    for name, resource in (template.get("Resources") or {}).items():
        if name.startswith("Fn::ForEach::"):
            _variable, _collection, made = resource
            for made_name, made_resource in made.items():
                yield f"{name}.{made_name}", made_resource
        else:
            yield name, resource


def _statements(template: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    def walk(value: Any, where: str) -> Iterator[tuple[str, dict[str, Any]]]:
        if isinstance(value, dict):
            if "Effect" in value and ("Action" in value or "NotAction" in value):
                yield where, value
                return
            if set(value) == {"Fn::If"}:
                for branch in value["Fn::If"][1:]:
                    yield from walk(branch, where)
                return
            for key, item in value.items():
                yield from walk(item, f"{where}.{key}")
        elif isinstance(value, list):
            for n, item in enumerate(value):
                yield from walk(item, f"{where}[{n}]")

    for name, resource in _resources(template):
        props = resource.get("Properties") or {}
        for key in ("Policies", "PolicyDocument", "AssumeRolePolicyDocument"):
            if key in props and key != "AssumeRolePolicyDocument":
                yield from walk(props[key], f"{name}.{key}")


def test_the_template_grants_no_wildcard_resource() -> None:
    template = load_template()
    statements = list(_statements(template))
    assert statements, "no IAM statements found: the parser missed the policies"
    grants = []
    for where, statement in statements:
        assert "NotResource" not in statement and "NotAction" not in statement, where
        if statement.get("Effect") != "Allow":
            continue
        actions = statement.get("Action")
        actions = set(actions if isinstance(actions, list) else [actions])
        assert not any(a == "*" or str(a).endswith(":*") for a in actions), (where, actions)
        for resource in _strings(statement.get("Resource")):
            grants.append(resource)
            if actions <= NO_RESOURCE_LEVEL:
                continue
            assert "*" not in resource, f"{where}: wildcard resource {resource!r}"
            if "?" in resource:
                # Only Secrets Manager's own six-character suffix of the one secret's ARN.
                assert ":secretsmanager:" in resource and resource.endswith("-??????"), (where, resource)
                assert resource.count("?") == 6, (where, resource)
    assert any(":endpoint/${EndpointName}" in g for g in grants), grants
    for name, resource in _resources(template):
        for policy in (resource.get("Properties") or {}).get("Policies") or []:
            if isinstance(policy, str):
                assert policy in MANAGED_ALLOWED, f"{name}: managed policy {policy} may grant wildcards"
            elif isinstance(policy, dict) and "Statement" not in policy and "Fn::If" not in policy:
                # SAM policy templates: each names its resource; none of the broad ones is allowed.
                assert not {"AmazonSageMakerFullAccess", "AdministratorAccess"} & set(policy), (name, policy)
