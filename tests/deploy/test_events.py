"""events/: real Function URL events (payload 2.0), shaped as the local front shapes them, a REST API proxy
event (payload 1.0, `rest-*.json`), and `make invoke`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from aws_lambda_powertools.utilities.parser.models import APIGatewayProxyEventModel, LambdaFunctionUrlModel

from sagestream.function_url import build_event, event_body
from sagestream_local.function_url import FunctionURL
from tests.client import request
from tests.conftest import PYTHONPATH
from tests.deploy.conftest import ROOT

ALL_EVENTS = sorted((ROOT / "events").glob("*.json"))
REST_EVENTS = [p for p in ALL_EVENTS if p.stem.startswith("rest-")]
EVENTS = [p for p in ALL_EVENTS if p not in REST_EVENTS]  # the Function URL's
# What each event answers through `make invoke` (the simulated endpoint speaking the dialect it needs).
EXPECTED: dict[str, tuple[int, dict[str, str]]] = {
    "chat-stream": (200, {}),
    "chat": (200, {}),
    "completion-native": (200, {"UPSTREAM_FORMAT": "tgi"}),
    "models": (200, {}),
    "malformed-body": (400, {}),
    "unknown-route": (404, {}),
    "rest-chat": (200, {}),
}
# Lambda adds requestContext.authorizer only for an AWS_IAM-authenticated caller; the local front, like a
# URL with AuthType NONE, authenticates nobody.
IAM_ONLY = {"authorizer"}


def load(path: Path) -> dict[str, Any]:
    event: dict[str, Any] = json.loads(path.read_text())
    return event


def shape(event: dict[str, Any]) -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
    """The key sets of the event, its requestContext and requestContext.http."""
    context = event["requestContext"]
    return frozenset(event), frozenset(context) - IAM_ONLY, frozenset(context["http"])


def test_there_is_an_event_for_every_case() -> None:
    assert {p.stem for p in ALL_EVENTS} == set(EXPECTED) and REST_EVENTS


@pytest.mark.parametrize("path", REST_EVENTS, ids=lambda p: p.stem)
def test_each_rest_event_is_an_api_gateway_proxy_event(path: Path) -> None:
    event = load(path)
    parsed = APIGatewayProxyEventModel.model_validate(event)
    assert parsed.resource == "/{proxy+}" and parsed.pathParameters is not None
    assert parsed.path == "/" + parsed.pathParameters["proxy"]
    assert parsed.requestContext.path == f"/{parsed.requestContext.stage}{parsed.path}"
    assert parsed.multiValueHeaders is not None and set(parsed.multiValueHeaders) == set(parsed.headers)


@pytest.mark.parametrize("path", EVENTS, ids=lambda p: p.stem)
def test_each_event_is_a_function_url_event(path: Path) -> None:
    event = load(path)
    parsed = LambdaFunctionUrlModel.model_validate(event)
    assert parsed.version == "2.0" and parsed.routeKey == "$default" and parsed.requestContext.stage == "$default"
    assert parsed.rawPath == parsed.requestContext.http.path
    assert parsed.requestContext.domainName.endswith(".on.aws")
    assert all(name == name.lower() for name in event["headers"])
    if "authorizer" in event["requestContext"]:
        assert parsed.requestContext.authorizer is not None and parsed.requestContext.authorizer.iam is not None


@pytest.mark.parametrize("path", EVENTS, ids=lambda p: p.stem)
def test_build_event_shapes_the_same_request_the_same_way(path: Path) -> None:
    event = load(path)
    http = event["requestContext"]["http"]
    local = build_event(
        method=http["method"],
        raw_path=event["rawPath"],
        raw_query=event["rawQueryString"],
        headers=list(event["headers"].items()),
        body=event_body(event),
        source_ip=http["sourceIp"],
        domain=event["requestContext"]["domainName"],
    )
    LambdaFunctionUrlModel.model_validate(local)
    assert shape(local) == shape(event)
    assert local["headers"] == event["headers"] and local.get("body") == event.get("body")


def test_the_local_front_sends_events_of_the_same_shape(local_function: Callable[..., FunctionURL]) -> None:
    front = local_function("tests.handlers.echo", size=1)
    for path in EVENTS:
        event = load(path)
        query = f"?{event['rawQueryString']}" if event["rawQueryString"] else ""
        sent = {k: v for k, v in event["headers"].items() if k not in ("host", "content-length")}
        response = request(
            front.url,
            event["requestContext"]["http"]["method"],
            event["rawPath"] + query,
            event_body(event) or None,
            headers=sent,
        )
        assert response.status == 200, path.stem
        received = response.json()["event"]
        LambdaFunctionUrlModel.model_validate(received)
        assert shape(received) == shape(event), path.stem


# --- make invoke -------------------------------------------------------------------------------------


def _invoke(event: Path, **env: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "sagestream_local.invoke", str(event), "--timeout", "30"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": PYTHONPATH, "UPSTREAM_MAX_ATTEMPTS": "1", **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


@pytest.fixture(scope="module")
def invoked() -> dict[str, tuple[int, bytes, str]]:
    """Every event through `python -m sagestream_local.invoke`, all at once (each starts its own stack)."""
    running = {path.stem: _invoke(path, **EXPECTED[path.stem][1]) for path in ALL_EVENTS}
    running["handler-fails"] = _invoke(ROOT / "events" / "models.json", _HANDLER="tests.handlers.fails")
    results = {}
    for name, process in running.items():
        out, err = process.communicate(timeout=90)
        results[name] = (process.returncode, out, err.decode())
    return results


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_make_invoke_prints_the_body_to_stdout_and_the_status_to_stderr(
    name: str, invoked: dict[str, tuple[int, bytes, str]]
) -> None:
    code, body, log = invoked[name]
    status = EXPECTED[name][0]
    assert code == 0, log
    assert f"HTTP {status}\n" in log
    if name in ("chat-stream", "completion-native", "rest-chat"):
        assert body.startswith(b"data: {") and body.endswith(b"data: [DONE]\n\n"), body[-200:]
    else:
        payload = json.loads(body)  # nothing but the body: the function's own log records went to stderr
        assert ("error" in payload) == (status >= 400)


def test_make_invoke_exits_non_zero_on_a_function_error(invoked: dict[str, tuple[int, bytes, str]]) -> None:
    code, body, log = invoked["handler-fails"]
    assert code == 1
    assert body == b""
    assert "HTTP 502" in log and "ValueError" in log


def test_make_invoke_sam_says_plainly_that_it_needs_docker() -> None:
    docker = shutil.which("docker")
    if docker and subprocess.run([docker, "info"], capture_output=True, check=False).returncode == 0:
        pytest.skip("a Docker engine answers here, so make invoke-sam would really run sam local invoke")
    result = subprocess.run(["make", "-s", "invoke-sam"], cwd=ROOT, capture_output=True, text=True, check=False)
    assert result.returncode != 0
    assert "no Docker engine" in result.stderr and "make invoke EVENT=events/chat-stream.json" in result.stderr
