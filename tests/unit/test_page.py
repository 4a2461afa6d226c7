"""The chat page: told the model only when anyone may call, under a CSP that lets it reach only its own origin."""

from __future__ import annotations

import json

from sagestream import page
from tests.unit.test_app import make, run


def test_with_keys_nothing_unauthenticated_names_the_model_or_the_endpoint() -> None:
    keyed, _ = make(AUTH_MODE="api_key", API_KEYS="sk-unit", SERVE_UI="true", MODEL_ID="secret-model-7")
    for path in ("/health", "/", "/index.html"):
        answer = run(keyed, "GET", path)
        assert answer.status == 200
        assert b"secret-model-7" not in answer.body and b"unit-llm" not in answer.body, path
    assert run(keyed, "GET", "/v1/models").status == 401
    models = run(keyed, "GET", "/v1/models", headers={"authorization": "Bearer sk-unit"})
    assert json.loads(models.body)["data"][0]["id"] == "secret-model-7"


def test_without_keys_the_page_is_told_the_model() -> None:
    open_app, _ = make(AUTH_MODE="none", SERVE_UI="true")
    assert b'data-model="unit-llm"' in run(open_app, "GET", "/").body


def test_the_pages_policy_lets_it_reach_its_issuers_endpoints_and_nothing_else() -> None:
    sign_in = {
        "token_endpoint": "https://auth.example/oauth2/token",
        "authorization_endpoint": "https://login.example/authorize",
        "end_session_endpoint": "javascript:alert(1)",
    }
    policy = dict(part.split(" ", 1) for part in page.page_policy(sign_in).split("; "))
    assert policy["connect-src"] == "'self' https://auth.example"
    assert policy["form-action"] == "'self' https://login.example"
    assert page.page_policy(None).split("; ")[3] == "connect-src 'self'"
