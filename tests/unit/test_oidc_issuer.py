"""The local OIDC issuer's authorization code flow, called as the page calls it but without a socket: PKCE is
required and checked, a code is redeemed once and only at its redirect URI, nothing redirects to an
unregistered URI, refresh tokens rotate."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterator
from urllib.parse import parse_qs, urlsplit

import jwt
import pytest

from sagestream_local.oidc import LocalIssuer

PAGE = "http://127.0.0.1:3000/"
VERIFIER = "a-code-verifier-of-enough-length-0123456789abcdefghijkl"
CHALLENGE = base64.urlsafe_b64encode(hashlib.sha256(VERIFIER.encode()).digest()).rstrip(b"=").decode()


@pytest.fixture
def issuer() -> Iterator[LocalIssuer]:
    made = LocalIssuer()  # bound for its URL, never started
    made.allow_redirect(PAGE)
    yield made
    made.stop()


def authorize(issuer: LocalIssuer, **changes: str) -> tuple[int, str | None, str]:
    params = {
        "response_type": "code",
        "client_id": issuer.client_id,
        "redirect_uri": PAGE,
        "scope": f"openid {issuer.scope} admin",
        "state": "s1",
        "nonce": "n1",
        "code_challenge": CHALLENGE,
        "code_challenge_method": "S256",
        "username": "alice",
        "password": "alice-password",
        **changes,
    }
    return issuer.authorize({k: v for k, v in params.items() if v != ""})


def code_of(location: str | None) -> str:
    assert location is not None and location.startswith(PAGE)
    query = parse_qs(urlsplit(location).query)
    assert query["state"] == ["s1"]
    return query["code"][0]


def redeem(issuer: LocalIssuer, code: str, verifier: str = VERIFIER, redirect_uri: str = PAGE) -> tuple[int, dict]:
    return issuer.token(
        {
            "grant_type": "authorization_code",
            "client_id": issuer.client_id,
            "code": code,
            "redirect_uri": redirect_uri,
            "code_verifier": verifier,
        }
    )


def test_the_login_form_comes_first_then_a_code_redeemed_with_the_verifier(issuer: LocalIssuer) -> None:
    status, location, page = authorize(issuer, username="", password="")
    assert (status, location) == (200, None) and 'name="password"' in page and CHALLENGE in page
    status, tokens = redeem(issuer, code_of(authorize(issuer)[1]))
    assert status == 200 and tokens["token_type"] == "Bearer"
    access = jwt.decode(tokens["access_token"], options={"verify_signature": False})
    assert access["scope"] == f"openid {issuer.scope}", "a scope the client may not have is left out"
    assert jwt.decode(tokens["id_token"], options={"verify_signature": False})["nonce"] == "n1"


def test_a_wrong_password_shows_the_form_again(issuer: LocalIssuer) -> None:
    status, location, page = authorize(issuer, password="nope")
    assert (status, location) == (401, None) and "Wrong user name or password" in page


def test_a_wrong_verifier_or_redirect_uri_or_a_second_use_is_invalid_grant(issuer: LocalIssuer) -> None:
    assert redeem(issuer, code_of(authorize(issuer)[1]), verifier="x" * 50) == (
        400,
        {"error": "invalid_grant", "error_description": "code_verifier does not match"},
    )
    assert redeem(issuer, code_of(authorize(issuer)[1]), redirect_uri="http://127.0.0.1:3000/other")[0] == 400
    code = code_of(authorize(issuer)[1])
    assert redeem(issuer, code)[0] == 200
    assert redeem(issuer, code) == (400, {"error": "invalid_grant"})


def test_without_pkce_the_answer_is_an_error_and_an_unknown_redirect_is_never_followed(issuer: LocalIssuer) -> None:
    status, location, _ = authorize(issuer, code_challenge_method="plain")
    assert status == 302 and location is not None and "error=invalid_request" in location
    status, location, _ = authorize(issuer, redirect_uri="https://attacker.example/")
    assert (status, location) == (400, None)


def test_a_refresh_token_works_once_and_is_replaced(issuer: LocalIssuer) -> None:
    _, tokens = redeem(issuer, code_of(authorize(issuer)[1]))
    form = {"grant_type": "refresh_token", "client_id": issuer.client_id, "refresh_token": tokens["refresh_token"]}
    status, fresh = issuer.token(form)
    assert status == 200 and fresh["refresh_token"] != tokens["refresh_token"]
    assert issuer.token(form) == (400, {"error": "invalid_grant"})
