"""A browser page on another origin streams a chat with the OpenAI JS SDK, and the chat page picks a model.

The page is served from a second loopback port (a different origin from ``make run``'s), and imports the
SDK from the npm package ``make test`` installs in ``tests/node/node_modules`` (its ESM build imports only
relative modules, so a static server is all it needs). The Function URL's CORS answers are the local
front's, from ``sagestream_local.cors`` (the template's are checked to be the same in ``tests/deploy``).
A third origin, not allowed, must fail: that is what shows the browser did enforce CORS.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from tests.browser.test_chat_page import CHROMIUM, Server, browser, start_server, stop_server
from tests.prerequisites import unavailable

__all__ = ["browser"]  # the shared Chromium fixture

SDK = Path(__file__).resolve().parents[1] / "node" / "node_modules" / "openai"
KEY = "sk-browser-sdk"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.timeout(90),
]


@pytest.fixture(scope="module", autouse=True)
def _prerequisites() -> None:
    # Module scope: checked before the module-scoped fixtures that launch the browser.
    if not Path(CHROMIUM).exists():
        unavailable("Debian chromium not installed (apt-get install chromium)")
    if not (SDK / "index.mjs").exists():
        unavailable("tests/node/node_modules is missing: `make test` installs it (npm ci)")


# The page: the SDK from /openai/, a streamed chat against the function's URL (given in the page's query).
PAGE = """<!doctype html><meta charset="utf-8"><title>sdk page</title>
<script type="module">
import OpenAI from "/openai/index.mjs";
const baseURL = new URLSearchParams(location.search).get("api");
const client = new OpenAI({ baseURL, apiKey: "__KEY__", dangerouslyAllowBrowser: true, maxRetries: 0 });
try {
  const { data: stream, response, request_id } = await client.chat.completions
    .create({ model: "sagestream-sim", messages: [{ role: "user", content: "Hello from a page" }], stream: true })
    .withResponse();
  const deltas = [];
  for await (const chunk of stream) {
    const text = chunk.choices[0]?.delta?.content;
    if (text) deltas.push(text);
  }
  window.__result = { deltas, requestId: request_id, status: response.status };
} catch (e) {
  window.__result = { error: String(e && e.constructor && e.constructor.name) + ": " + String(e && e.message) };
}
</script>""".replace("__KEY__", KEY)


class _PageHandler(SimpleHTTPRequestHandler):
    """``/`` is the page; ``/openai/...`` the npm package's files (``.mjs`` as JavaScript, as a browser needs)."""

    extensions_map = {**SimpleHTTPRequestHandler.extensions_map, ".mjs": "text/javascript", ".js": "text/javascript"}

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        if path == "/":
            body = PAGE.encode()
            self.send_response(200)
            self.send_header("content-type", "text/html; charset=utf-8")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if not path.startswith("/openai/"):
            self.send_error(404)
            return
        self.path = path.removeprefix("/openai")
        super().do_GET()


def _page_server() -> tuple[ThreadingHTTPServer, str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), partial(_PageHandler, directory=str(SDK)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, f"http://127.0.0.1:{httpd.server_address[1]}"


@pytest.fixture(scope="module")
def origins() -> Iterator[tuple[str, str]]:
    """Two page origins: the first allowed by the function's CORS, the second not."""
    allowed, allowed_url = _page_server()
    other, other_url = _page_server()
    yield allowed_url, other_url
    for httpd in (allowed, other):
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture(scope="module")
def api(origins: tuple[str, str]) -> Iterator[Server]:
    s = start_server({"ALLOWED_ORIGINS": origins[0], "AUTH_MODE": "api_key", "API_KEYS": KEY})
    yield s
    stop_server(s)


def run_page(browser: Any, origin: str, api: Server) -> dict[str, Any]:
    context = browser.new_context()
    page = context.new_page()
    off_loopback: list[str] = []
    page.on("request", lambda r: urlsplit(r.url).hostname != "127.0.0.1" and off_loopback.append(r.url))
    try:
        page.goto(f"{origin}/?api={api.url}/v1")
        page.wait_for_function("() => window.__result !== undefined", timeout=30_000)
        result: dict[str, Any] = page.evaluate("window.__result")
    finally:
        context.close()
    assert off_loopback == []
    return result


def test_the_openai_js_sdk_streams_from_an_allowed_origin_and_reads_the_request_id(
    browser: Any, origins: tuple[str, str], api: Server
) -> None:
    api.scenario(tokens=12, cadence_ms=5, ttft_ms=20)
    api.clear()
    result = run_page(browser, origins[0], api)
    assert "error" not in result, result.get("error", "")
    record = api.last_stream()
    assert "".join(result["deltas"]) == "".join(t["text"] for t in record["tokens"])
    assert len(result["deltas"]) == 12
    assert result["requestId"], "x-request-id must be readable by the page's script (Access-Control-Expose-Headers)"
    assert record["request"]["messages"][0]["content"] == "Hello from a page"


def test_another_origin_is_refused_by_the_browser(browser: Any, origins: tuple[str, str], api: Server) -> None:
    api.clear()
    result = run_page(browser, origins[1], api)
    assert "APIConnectionError" in result.get("error", ""), result
    assert api.streams() == [], "a refused preflight sends nothing on"


# --- the chat page's model picker --------------------------------------------------------------------------

MODELS = {"alpha": {"endpoint": "sim-alpha"}, "beta": {"endpoint": "sim-beta"}}


@pytest.fixture(scope="module")
def several() -> Iterator[Server]:
    s = start_server({"MODELS": json.dumps(MODELS)})
    yield s
    stop_server(s)


def test_the_chat_page_offers_every_model_and_asks_the_one_picked(browser: Any, several: Server) -> None:
    several.scenario(tokens=6, cadence_ms=5, ttft_ms=20)
    several.clear()
    context = browser.new_context()
    page = context.new_page()
    try:
        page.goto(several.url + "/")
        page.wait_for_function("() => document.querySelectorAll('#model option').length === 2", timeout=10_000)
        assert page.eval_on_selector_all("#model option", "os => os.map(o => o.value)") == ["alpha", "beta"]
        assert page.input_value("#model") == "alpha", "the first model is the default"
        page.select_option("#model", "beta")
        page.fill("#prompt", "Which one are you?")
        page.click("#send")
        page.wait_for_function("() => document.getElementById('stats').dataset.state === 'done'", timeout=15_000)
    finally:
        context.close()
    record = several.last_stream()
    assert record["endpoint"] == "sim-beta"
