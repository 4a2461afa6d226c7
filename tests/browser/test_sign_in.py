"""The chat page signs in with its user's own identity (``make run AUTH_MODE=jwt``): in a real Chromium, the
authorization code flow with PKCE against the local OIDC issuer's login form, then a streamed answer sent
with the access token, a refresh when it has expired, and sign-out. Loopback only; nothing may break the
page's CSP (a violation is a console error, and fails the test)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.browser.test_chat_page import CHROMIUM, Chat, Server, browser, start_server, stop_server
from tests.prerequisites import unavailable

__all__ = ["browser"]  # the shared Chromium fixture

sync_api = pytest.importorskip("playwright.sync_api")

pytestmark = [pytest.mark.browser, pytest.mark.timeout(90)]


@pytest.fixture(scope="module", autouse=True)
def _chromium_installed() -> None:
    if not Path(CHROMIUM).exists():
        unavailable("Debian chromium not installed (apt-get install chromium)")


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    s = start_server({"AUTH_MODE": "jwt"})
    yield s
    stop_server(s)


@pytest.fixture
def chat(browser: Any, server: Server) -> Iterator[Chat]:
    server.scenario(tokens=12, cadence_ms=5, ttft_ms=20)
    server.clear()
    context = browser.new_context(viewport={"width": 1100, "height": 760})
    c = Chat(context.new_page(), server)
    yield c.open()
    context.close()
    assert c.problems == []


def sign_in(chat: Chat, username: str = "alice", password: str = "alice-password") -> None:
    chat.page.click("#sign-in")
    chat.page.wait_for_selector("form[action='/authorize']")
    chat.page.fill("#username", username)
    chat.page.fill("#password", password)
    chat.page.click("button#sign-in")


def stored_session(chat: Chat) -> dict[str, Any] | None:
    raw = chat.page.evaluate("sessionStorage.getItem('sagestream.signIn')")
    return json.loads(raw) if raw else None


def test_sign_in_on_the_issuers_form_then_stream_refresh_and_sign_out(chat: Chat, server: Server) -> None:
    page = chat.page
    assert page.is_visible("#sign-in") and not page.is_visible("#sign-out")
    chat.send("Hello before signing in")
    page.wait_for_function("() => !document.getElementById('error').hidden")
    assert "Sign in first" in chat.error() and server.streams() == []

    sign_in(chat)
    page.wait_for_selector("#sign-out", state="visible")
    assert page.text_content("#who") == "signed in as alice"
    # The page names no model before sign-in; signed in, it asks /v1/models with the token.
    page.wait_for_function("() => document.getElementById('model').value === 'sagestream-sim'")
    assert "code=" not in page.url, "the code leaves the address bar once redeemed"
    session = stored_session(chat)
    assert session is not None and session["access"].count(".") == 2 and session["refresh"]

    chat.send("Hello as alice")
    assert chat.wait_final() == "done", chat.error()
    record = server.last_stream()
    assert chat.answer() == "".join(t["text"] for t in record["tokens"])
    assert str(record["request"]["user"]).startswith("local-"), "the caller's sub is the upstream user"

    # An access token past its time: the page refreshes it before sending, and the answer still streams.
    page.evaluate(
        "() => { const s = JSON.parse(sessionStorage.getItem('sagestream.signIn')); s.expires = 0;"
        " sessionStorage.setItem('sagestream.signIn', JSON.stringify(s)); }"
    )
    page.reload()
    chat.send("Hello again")
    assert chat.wait_final() == "done", chat.error()
    refreshed = stored_session(chat)
    assert refreshed is not None and refreshed["access"] != session["access"]
    assert refreshed["refresh"] != session["refresh"], "the issuer rotates refresh tokens"

    page.click("#sign-out")
    page.wait_for_selector("#sign-in", state="visible")
    assert stored_session(chat) is None


def test_a_wrong_password_stays_on_the_issuers_form(chat: Chat) -> None:
    sign_in(chat, password="not-the-password")
    chat.page.wait_for_selector("[role=alert]")
    assert "Wrong user name or password" in str(chat.page.text_content("[role=alert]"))
    chat.page.go_back()


def test_an_answer_with_a_state_it_did_not_ask_for_is_refused(chat: Chat, server: Server) -> None:
    """A code that arrives with a forged state (login CSRF) is never redeemed."""
    chat.page.goto(server.url + "/?code=forged&state=forged")
    chat.page.wait_for_function("() => !document.getElementById('error').hidden")
    assert "state" in chat.error()
    assert stored_session(chat) is None and chat.page.is_visible("#sign-in")
