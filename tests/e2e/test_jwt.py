"""AUTH_MODE=jwt through the whole local chain, against the local OIDC issuer over real sockets: who called is
logged and sent upstream, every bad token is refused before anything goes upstream, a rotated key is
taken after one refetch, and the openai SDKs (Python, and Node for a tool call) stream with a bearer token."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest

from sagestream_local.oidc import LocalIssuer, SigningKey
from sagestream_local.stack import SIM_ENDPOINT_NAME
from tests.client import request
from tests.e2e.test_node_client import NODE_DIR
from tests.e2e.test_telemetry import CHAT, Captured, _captured, finished, logs
from tests.unit.test_identity import REFUSALS

BODY = {"messages": [{"role": "user", "content": "Hello"}], "stream": True}
REFETCH_S = 1  # the least time between two key fetches of the function, short for these tests


@pytest.fixture(scope="module")
def _jwt() -> Iterator[Captured]:
    yield from _captured({"AUTH_MODE": "jwt", "JWT_JWKS_REFETCH_S": str(REFETCH_S)})


@pytest.fixture
def jwt_stack(_jwt: Captured) -> Captured:
    assert _jwt.stack.endpoint is not None and _jwt.stack.issuer is not None
    _jwt.stack.endpoint.reset_scenario()
    _jwt.stack.endpoint.clear_records()
    return _jwt


def issuer_of(captured: Captured) -> LocalIssuer:
    assert captured.stack.issuer is not None
    return captured.stack.issuer


def upstream_requests(captured: Captured) -> list[Any]:
    assert captured.stack.endpoint is not None
    return [r.request for r in captured.stack.endpoint.records]


def jwks_fetches(issuer: LocalIssuer) -> int:
    return issuer.requests.count("/jwks")


def test_a_signed_in_caller_streams_is_logged_and_is_the_upstream_user(jwt_stack: Captured) -> None:
    issuer = issuer_of(jwt_stack)
    token = issuer.access_token("alice")
    resp, lines = jwt_stack.call(
        CHAT,
        {**BODY, "user": "pretending-to-be-bob", "safety_identifier": "also-bob"},
        headers={"authorization": f"Bearer {token}"},
    )
    assert resp.status == 200 and resp.data_events()[-1] == "[DONE]"
    (log,) = [line.data for line in logs(lines)]
    sub = issuer.access_claims("alice")["sub"]
    assert (log["caller"], log["caller_client_id"], log["caller_username"]) == (sub, issuer.client_id, "alice")
    (sent,) = upstream_requests(jwt_stack)
    assert sent["user"] == sub, "the verified caller replaces the client's own `user`"
    assert sent["safety_identifier"] == sub, "and its safety_identifier, OpenAI's newer name for the same"
    assert not any(token in str(line.data) for line in lines), "a token is never logged"


REFUSED_STATUS = {name: 401 for name in REFUSALS} | {"missing scope": 403}


@pytest.mark.parametrize("case", [*REFUSALS, "missing scope", "unknown kid", "another issuer, same kid", "empty"])
def test_each_bad_token_is_refused_in_openais_shape_and_nothing_goes_upstream(jwt_stack: Captured, case: str) -> None:
    issuer = issuer_of(jwt_stack)
    if case in REFUSALS:
        token = REFUSALS[case](issuer)
    elif case == "missing scope":
        token = issuer.access_token(scope="openid")
    elif case == "unknown kid":
        token = issuer.sign(issuer.access_claims("alice"), key=SigningKey.new())
    elif case == "another issuer, same kid":
        token = issuer.sign(issuer.access_claims("alice"), key=SigningKey(issuer.keys[0].kid, SigningKey.new().private))
    else:
        token = ""
    time.sleep(REFETCH_S + 0.1)  # a refetch may happen: an unknown kid must show that it does, once
    fetches = jwks_fetches(issuer)
    resp, lines = jwt_stack.call(CHAT, BODY, headers={"authorization": f"Bearer {token}".strip()})
    assert resp.status == REFUSED_STATUS.get(case, 401), resp.body
    error = resp.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == ("insufficient_scope" if resp.status == 403 else "invalid_token")
    assert (resp.header("www-authenticate") or "").startswith("Bearer")
    assert upstream_requests(jwt_stack) == []
    assert jwks_fetches(issuer) - fetches == (1 if case == "unknown kid" else 0)
    assert not token or not any(token in str(line.data) for line in lines)


def test_a_key_rotated_at_the_issuer_is_taken_after_one_refetch_with_no_restart(jwt_stack: Captured) -> None:
    issuer = issuer_of(jwt_stack)
    assert jwt_stack.call(CHAT, BODY, headers={"authorization": f"Bearer {issuer.access_token()}"})[0].status == 200
    time.sleep(REFETCH_S + 0.1)
    issuer.rotate()
    fetches = jwks_fetches(issuer)
    for username in ("alice", "bob"):
        resp, _ = jwt_stack.call(CHAT, BODY, headers={"authorization": f"Bearer {issuer.access_token(username)}"})
        assert resp.status == 200, resp.body
    assert jwks_fetches(issuer) - fetches == 1


def test_every_v1_route_needs_the_token_and_the_page_may_reach_exactly_the_issuer(jwt_stack: Captured) -> None:
    issuer = issuer_of(jwt_stack)
    url = jwt_stack.stack.url
    assert request(url, "GET", "/v1/models").status == 401
    token = issuer.access_token()
    assert request(url, "GET", "/v1/models", headers={"authorization": f"Bearer {token}"}).status == 200
    page = request(url, "GET", "/")
    policy = page.header("content-security-policy") or ""
    assert f"connect-src 'self' {issuer.url};" in policy
    assert policy.endswith(f"form-action 'self' {issuer.url}")
    assert b"sagestream-local-page" in page.body and b"/token" in page.body
    assert b"sagestream-sim" not in page.body, "nothing unauthenticated names the model"


def test_the_openai_sdk_streams_with_a_bearer_token(jwt_stack: Captured) -> None:
    from openai import OpenAI

    base_url = jwt_stack.stack.url + "/v1"
    assert base_url.startswith("http://127.0.0.1:"), "an SDK without a loopback base URL calls its public host"
    token = issuer_of(jwt_stack).access_token("alice")
    client = OpenAI(base_url=base_url, api_key=token, max_retries=0)
    stream = client.chat.completions.create(
        model="sagestream-sim", messages=[{"role": "user", "content": "Hi"}], stream=True
    )
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text
    mark = jwt_stack.out.mark()
    refused = OpenAI(base_url=base_url, api_key="not-a-token", max_retries=0)
    with pytest.raises(Exception) as caught:
        refused.chat.completions.create(model="sagestream-sim", messages=[{"role": "user", "content": "Hi"}])
    assert getattr(caught.value, "status_code", None) == 401
    jwt_stack.out.wait(mark, finished)


def test_the_node_sdk_streams_a_tool_call_with_a_bearer_token(jwt_stack: Captured) -> None:
    node = shutil.which("node")
    if node is None or not (NODE_DIR / "node_modules" / "openai").is_dir():
        pytest.fail("Node and the openai npm package are needed: run `make test` (it runs npm ci --prefix tests/node)")
    issuer = issuer_of(jwt_stack)
    env = {
        **os.environ,
        "SAGESTREAM_BASE_URL": jwt_stack.stack.url + "/v1",
        "SAGESTREAM_MODEL": SIM_ENDPOINT_NAME,
        "SAGESTREAM_API_KEY": issuer.access_token("bob"),
    }
    done = subprocess.run(
        [node, str(NODE_DIR / "stream_tool_call.mjs")], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["finishReason"] == "tool_calls"
    assert {r["user"] for r in upstream_requests(jwt_stack)} == {issuer.access_claims("bob")["sub"]}
