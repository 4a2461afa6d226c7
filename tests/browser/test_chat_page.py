"""The chat page in a real Chromium, against ``make run``'s server on the simulated endpoint.

Debian's ``chromium`` through Playwright's ``executable_path`` (no browser download); ``.ci/run`` installs
it. The page may reach 127.0.0.1 only: every other request is aborted and fails the test.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from tests.prerequisites import unavailable

sync_api = pytest.importorskip("playwright.sync_api")

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-proxy-server",
]
ARTIFACTS = Path(__file__).resolve().parent.parent / "artifacts"
FINAL_STATES = "['done', 'error', 'stopped']"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.timeout(60),
]


@pytest.fixture(scope="module", autouse=True)
def _chromium_installed() -> None:
    # Module scope: checked before the module-scoped fixtures that launch it.
    if not Path(CHROMIUM).exists():
        unavailable("Debian chromium not installed (apt-get install chromium)")


# Loopback only, whatever proxy the environment names.
_local = urllib.request.build_opener(urllib.request.ProxyHandler({}))


# ------------------------------------------------------------------------------------------------ server


@dataclass
class Server:
    """``python -m sagestream_local`` (what ``make run`` runs) in a subprocess, and its simulated endpoint."""

    url: str
    sim: str
    process: subprocess.Popen[str]

    def _sim(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.sim + path, data=data, method=method)
        req.add_header("content-type", "application/json")
        with _local.open(req, timeout=5) as resp:
            return json.loads(resp.read())

    def scenario(self, **changes: Any) -> dict[str, Any]:
        self._sim("DELETE", "/_sim/scenario")
        return self._sim("POST", "/_sim/scenario", changes) if changes else {}

    def clear(self) -> None:
        self._sim("DELETE", "/_sim/records")

    def streams(self) -> list[dict[str, Any]]:
        return [r for r in self._sim("GET", "/_sim/records") if r["operation"] == "InvokeEndpointWithResponseStream"]

    def last_stream(self, *, ended: bool = True, timeout: float = 5.0) -> dict[str, Any]:
        """The newest streaming request the endpoint saw; by default once its connection has ended."""
        deadline = time.monotonic() + timeout
        while True:
            streams = self.streams()
            if streams and (not ended or streams[-1]["outcome"] != "streaming"):
                return streams[-1]
            if time.monotonic() > deadline:
                raise AssertionError(f"no finished stream on the simulated endpoint: {streams}")
            time.sleep(0.05)


def start_server(env: dict[str, str] | None = None) -> Server:
    clean = {
        k: v
        for k, v in os.environ.items()
        if k not in ("UPSTREAM", "AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME", "AUTH_MODE", "API_KEYS", "MODEL_ID")
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "sagestream_local", "--port", "0", "--concurrency", "2"],
        env={**clean, **(env or {})},
        stdout=subprocess.PIPE,
        text=True,
    )
    first_line: list[str] = []
    reader = threading.Thread(target=lambda: first_line.append(process.stdout.readline()), daemon=True)  # type: ignore[union-attr]
    reader.start()
    reader.join(30)
    line = first_line[0] if first_line else ""
    match = re.search(r"serving (http://127\.0\.0\.1:\d+).*simulated endpoint at (http://127\.0\.0\.1:\d+)", line)
    if match is None:
        process.kill()
        raise RuntimeError(f"python -m sagestream_local did not start: {line!r}")
    # keep draining stdout so the server never blocks on a full pipe
    threading.Thread(target=process.stdout.read, daemon=True).start()  # type: ignore[union-attr]
    return Server(match[1], match[2], process)


def stop_server(server: Server) -> None:
    server.process.terminate()  # SIGTERM: the stack stops its runtime processes and endpoint
    try:
        server.process.wait(10)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait()


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    s = start_server()
    yield s
    stop_server(s)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


# ------------------------------------------------------------------------------------------------ page


# Records when the answer's text changes, and its length then, by the page's own clock.
OBSERVE = """() => {
  window.__changes = [];
  new MutationObserver(() => {
    const answers = document.querySelectorAll('.turn.assistant .text');
    const last = answers[answers.length - 1];
    window.__changes.push({t: performance.now(), len: last ? last.textContent.length : 0});
  }).observe(document.getElementById('transcript'), {subtree: true, childList: true, characterData: true});
}"""


class Chat:
    """The page, and what it must never do (load from elsewhere, log errors, break its CSP)."""

    def __init__(self, page: Any, server: Server) -> None:
        self.page = page
        self.server = server
        self.problems: list[str] = []
        page.on("pageerror", lambda exc: self.problems.append(f"page error: {exc}"))
        page.on(
            "console",
            lambda msg: (
                msg.type == "error"
                and "status of 40" not in msg.text  # Chromium logs every failed fetch; the 401 test makes one
                and "status of 50" not in msg.text
                and self.problems.append(f"console: {msg.text}")
            ),
        )

        def guard(route: Any) -> None:
            if urlsplit(route.request.url).hostname == "127.0.0.1":
                route.continue_()
            else:
                self.problems.append(f"request off loopback: {route.request.url}")
                route.abort()

        page.route("**/*", guard)

    def open(self) -> Chat:
        self.page.goto(self.server.url + "/")
        self.page.evaluate(OBSERVE)
        return self

    def stat(self, name: str) -> str:
        return str(self.page.get_attribute("#stats", f"data-{name}"))

    def send(self, prompt: str) -> None:
        self.page.fill("#prompt", prompt)
        self.page.click("#send")

    def wait_final(self, timeout_ms: float = 15_000) -> str:
        self.page.wait_for_function(
            f"() => {FINAL_STATES}.includes(document.getElementById('stats').dataset.state)", timeout=timeout_ms
        )
        return self.stat("state")

    def answer(self) -> str:
        return str(self.page.locator(".turn.assistant .text").last.text_content())

    def error(self) -> str:
        box = self.page.locator("#error")
        return str(box.text_content()) if box.is_visible() else ""


@pytest.fixture
def chat(browser: Any, server: Server) -> Iterator[Chat]:
    server.scenario()
    server.clear()
    context = browser.new_context(viewport={"width": 1100, "height": 760})
    c = Chat(context.new_page(), server)
    yield c.open()
    context.close()
    assert c.problems == []


def tokens_text(record: dict[str, Any]) -> str:
    return "".join(t["text"] for t in record["tokens"])


# ----------------------------------------------------------------------------------------------- tests


def test_text_appears_progressively_over_the_stream(chat: Chat, server: Server) -> None:
    server.scenario(tokens=40, cadence_ms=40, ttft_ms=100)
    chat.send("Tell me about rivers")
    assert chat.wait_final() == "done"
    record = server.last_stream()
    sends = [t["wall_ns"] / 1e6 for t in record["tokens"]]
    stream_ms = sends[-1] - sends[0]
    assert len(sends) == 40 and stream_ms > 1000

    changes = chat.page.evaluate("window.__changes")
    growth = [c for prev, c in zip([{"len": 0}, *changes], changes, strict=False) if c["len"] > prev["len"]]
    spread_ms = growth[-1]["t"] - growth[0]["t"]
    print(f"DOM text grew {len(growth)} times over {spread_ms:.0f} ms; tokens sent over {stream_ms:.0f} ms")
    assert spread_ms >= 0.8 * stream_ms, "the text arrived in a burst, not as the tokens were sent"
    assert len(growth) >= 32, f"only {len(growth)} text updates for 40 tokens"
    assert chat.answer() == tokens_text(record)


def test_figures_agree_with_the_stream_and_history_is_sent(chat: Chat, server: Server) -> None:
    server.scenario(tokens=30, cadence_ms=20, ttft_ms=400)
    chat.send("How fast are you?")
    assert chat.wait_final() == "done"
    record = server.last_stream()
    sends = [t["wall_ns"] / 1e6 for t in record["tokens"]]
    sim_ttft = sends[0] - record["received_wall_ns"] / 1e6
    sim_tps = (len(sends) - 1) / ((sends[-1] - sends[0]) / 1000)
    shown_ttft, shown_tps = float(chat.stat("ttft-ms")), float(chat.stat("tps"))
    print(f"ttft shown {shown_ttft:.0f} ms vs endpoint {sim_ttft:.0f} ms; tok/s shown {shown_tps:.1f} vs {sim_tps:.1f}")

    assert int(chat.stat("tokens")) == len(record["tokens"]) == 30
    assert chat.page.text_content("#tokens") == "30"
    # the page's clock starts before the request leaves, so it sees at least the endpoint's wait
    assert sim_ttft - 5 <= shown_ttft <= sim_ttft + 1500
    assert 0.65 * sim_tps <= shown_tps <= 1.35 * sim_tps
    # 0 on a quiet machine; a busy one can delay a read until two deltas wait in it. A relay holding
    # tokens back until a block fills shows most of the 29 gaps as bursts.
    assert int(chat.stat("bursts")) <= 29 // 3, "an even 20 ms cadence showed burst gaps"
    first_answer = chat.answer()
    assert first_answer == tokens_text(record)

    # second turn: the conversation so far goes with it; coalesced PayloadParts show up as bursts
    server.scenario(tokens=24, cadence_ms=20, ttft_ms=50, split="coalesce", coalesce=4)
    chat.send("And in bursts?")
    assert chat.wait_final() == "done"
    record = server.last_stream()
    assert [(m["role"], m["content"]) for m in record["request"]["messages"]] == [
        ("user", "How fast are you?"),
        ("assistant", first_answer),
        ("user", "And in bursts?"),
    ]
    assert int(chat.stat("tokens")) == 24
    bursts = int(chat.stat("bursts"))
    # The relay writes each of a PayloadPart's 4 deltas as its own chunk; most reach the page in one read
    # (14 of 23 gaps here, 17 at most). The exact counting is pinned on a stubbed body below.
    print(f"burst gaps shown with 4 tokens per PayloadPart: {bursts} of 23 gaps")
    assert bursts >= 6, "tokens released together were not counted as burst gaps"
    ARTIFACTS.mkdir(exist_ok=True)
    chat.page.screenshot(path=str(ARTIFACTS / "chat.png"))


def chunk(content: str) -> str:
    return json.dumps({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": content}}]})


def test_the_sse_parser_takes_any_line_ending_and_renders_text_not_markup(chat: Chat) -> None:
    # One body read at once: every delta after the first arrives within 1 ms of the one before.
    body = (
        ": a comment, then an event of nothing but comments\r\n\r\n"
        'data: {"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}'
        "\r\n\r\n"
        f"data:{chunk('Hel')}\n\n"
        f"data: {chunk('lo')}\r\r"
        f"event: message\nid: 3\ndata: {chunk(' wörld 🙂')}\n\n"
        ": padding\n"
        f"data: {chunk(' <b>bold</b> &amp;')}\r\n\r\n"
        "data: [DONE]\r\n\r\n"
    )
    chat.page.route(
        "**/v1/chat/completions",
        lambda route: route.fulfill(status=200, headers={"content-type": "text/event-stream"}, body=body),
    )
    chat.send("Parse this")
    assert chat.wait_final() == "done"
    assert chat.answer() == "Hello wörld 🙂 <b>bold</b> &amp;"
    assert chat.page.locator(".turn.assistant b").count() == 0
    assert chat.stat("tokens") == "4"
    assert int(chat.stat("bursts")) >= 2


def test_stop_aborts_the_fetch_and_the_endpoint_sees_the_client_leave(chat: Chat, server: Server) -> None:
    server.scenario(tokens=400, cadence_ms=30, ttft_ms=50)
    chat.send("Talk for a long time")
    chat.page.wait_for_function("() => Number(document.getElementById('stats').dataset.tokens) >= 5", timeout=10_000)
    chat.page.click("#stop")
    assert chat.wait_final(5_000) == "stopped"
    shown = chat.answer()
    record = server.last_stream(timeout=5)
    assert record["outcome"] == "client_closed"
    assert 5 <= len(record["tokens"]) < 400
    ended_after_ms = (record["ended_wall_ns"] - record["tokens"][0]["wall_ns"]) / 1e6
    assert ended_after_ms < 400 * 30 / 2, "the endpoint kept generating long after stop"
    time.sleep(0.3)
    assert chat.answer() == shown, "text kept arriving after stop"
    assert tokens_text(record).startswith(shown)
    assert chat.page.is_disabled("#stop") and chat.page.is_enabled("#send")
    assert chat.error() == ""


def test_model_stream_error_mid_stream_shows_its_message(chat: Chat, server: Server) -> None:
    server.scenario(tokens=40, cadence_ms=10, ttft_ms=50, fault="model_stream_error", fault_after=5)
    chat.send("Fail halfway")
    assert chat.wait_final() == "error"
    error = chat.error()
    assert "The model failed while streaming" in error
    assert "Model invocation time exceeded (simulated)" in error
    record = server.last_stream()
    assert len(record["tokens"]) == 5 and chat.stat("tokens") == "5"
    assert chat.answer() == tokens_text(record)


def test_http_error_before_the_stream_shows_the_json_message(chat: Chat, server: Server) -> None:
    server.scenario(fault="http_424")
    chat.send("Fail at once")
    assert chat.wait_final() == "error"
    error = chat.error()
    assert error.startswith("HTTP 400")  # the container's own 4xx (behind SageMaker's 424) stays a 4xx
    assert "simulated container failure" in error
    assert chat.page.locator(".turn").count() == 0, "a question that got no answer stays in the transcript"
    assert chat.page.input_value("#prompt") == "Fail at once", "the failed prompt is given back to edit"


# ------------------------------------------------------------------------------------------ api_key mode


def auth_enforced(server: Server) -> bool:
    """Whether the relay refuses a request that carries no key."""
    req = urllib.request.Request(server.url + "/v1/models")
    try:
        with _local.open(req, timeout=5):
            return False
    except urllib.error.HTTPError as err:
        return err.code == 401


@pytest.fixture(scope="module")
def key_server() -> Iterator[Server]:
    s = start_server({"AUTH_MODE": "api_key", "API_KEYS": "k1,k2"})
    yield s
    stop_server(s)


@pytest.fixture
def key_chat(browser: Any, key_server: Server) -> Iterator[Chat]:
    key_server.scenario(tokens=8, cadence_ms=5, ttft_ms=20)
    key_server.clear()
    context = browser.new_context(viewport={"width": 1100, "height": 760})
    c = Chat(context.new_page(), key_server)
    yield c.open()
    context.close()
    assert c.problems == []


def test_api_key_mode_shows_the_key_field_and_sends_it_as_a_bearer_token(key_chat: Chat) -> None:
    page = key_chat.page
    assert page.is_visible("#api-key")
    assert page.text_content("#auth-mode") == "api_key"
    page.fill("#api-key", "k2")
    with page.expect_request("**/v1/chat/completions") as request:
        key_chat.send("Hello")
    assert request.value.headers.get("authorization") == "Bearer k2"
    assert "k2" not in page.url
    assert page.evaluate("sessionStorage.getItem('sagestream.apiKey')") == "k2"
    assert key_chat.wait_final() == "done"


def test_a_wrong_api_key_shows_the_401_message(key_chat: Chat, key_server: Server) -> None:
    assert auth_enforced(key_server), "the relay must refuse a request without a key in api_key mode"
    key_chat.page.fill("#api-key", "not-a-key")
    key_chat.send("Hello")
    assert key_chat.wait_final() == "error"
    assert re.match(r"HTTP 401[^:]*: \S", key_chat.error()), key_chat.error()
    assert key_server.streams() == [], "a request with a wrong key reached the endpoint"


def test_the_page_serves_without_iam_auth_field(chat: Chat) -> None:
    assert not chat.page.is_visible("#api-key")
    assert chat.page.input_value("#model") == "sagestream-sim"


# ------------------------------------------------------------------------------------------------ guardrail


@pytest.fixture(scope="module")
def guarded_server() -> Iterator[Server]:
    s = start_server({"GUARDRAIL": "zorp"})  # make run GUARDRAIL=zorp: the ApplyGuardrail stand-in denies it
    yield s
    stop_server(s)


def test_a_guardrail_intervention_shows_as_one(browser: Any, guarded_server: Server) -> None:
    guarded_server.scenario(tokens=8, cadence_ms=5, ttft_ms=20)
    guarded_server.clear()
    context = browser.new_context(viewport={"width": 1100, "height": 760})
    chat = Chat(context.new_page(), guarded_server).open()
    chat.send("Tell me about zorp")
    assert chat.wait_final() == "done"
    assert chat.answer() == "Sorry, the model cannot answer this question."  # the guardrail's blocked message
    filtered = chat.page.locator(".turn.assistant.filtered")
    assert filtered.count() == 1
    assert filtered.locator(".note").text_content() == "stopped by the guardrail (content_filter)"
    assert guarded_server.streams() == [], "the refused prompt never reached the endpoint"
    context.close()
    assert chat.problems == []
