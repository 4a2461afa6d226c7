"""Claude Code (the npm package, pinned in tests/node) against the local stack with its plainest configuration:
``ANTHROPIC_BASE_URL`` and an API key. It sends eight betas, ``context_management``, ``output_config.effort``,
adaptive thinking with ``display: "omitted"``, deferred tools, ``cache_control`` hints, a system turn after the
user's and ``max_tokens: 32000``; every one of them used to be a 400. A turn, a tool call round trip (with
the file and shell tools disallowed, in an empty directory: the tool it calls lists its agents) and a
reasoning model's turn must complete.

Nothing reaches a public host: the base URL is checked to be loopback, proxies point at a dead loopback port,
telemetry, error reporting, updates and other non-essential traffic are off, and HOME and the config
directory are temporary; each test checks that the local endpoint served the requests.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from sagestream_local.stack import SIM_ENDPOINT_NAME, LocalStack
from tests.e2e.conftest import GetStack
from tests.e2e.test_anthropic_clients import loopback
from tests.e2e.test_relay import model_text

ROOT = Path(__file__).resolve().parents[2]
CLAUDE = ROOT / "tests" / "node" / "node_modules" / ".bin" / "claude"
KEY = "k-claude-code"
DEAD_PROXY = "http://127.0.0.1:9"
# Everything that writes or runs something on this machine, and everything that would reach out.
DISALLOWED = "Bash,Edit,Write,Read,Glob,Grep,NotebookEdit,WebFetch,WebSearch"


@pytest.fixture
def keyed(stack_for: GetStack) -> LocalStack:
    return stack_for(API_KEYS=KEY)


def claude(stack: LocalStack, tmp_path: Path, prompt: str) -> dict[str, Any]:
    """One ``claude -p`` run; its JSON result."""
    assert CLAUDE.exists(), "make test installs tests/node (npm ci)"
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "CLAUDE_CONFIG_DIR": str(home / ".claude"),
        "ANTHROPIC_BASE_URL": loopback(stack),
        "ANTHROPIC_API_KEY": KEY,
        **{name: DEAD_PROXY for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy")},
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }
    command = [str(CLAUDE), "-p", prompt, "--model", SIM_ENDPOINT_NAME, "--disallowedTools", DISALLOWED]
    done = subprocess.run(
        [*command, "--output-format", "json"], cwd=work, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def served(stack: LocalStack) -> list[dict[str, Any]]:
    assert stack.endpoint is not None
    return [json.loads(record.body) for record in stack.endpoint.records]


def test_a_turn_completes_with_the_models_text(keyed: LocalStack, tmp_path: Path) -> None:
    result = claude(keyed, tmp_path, "Say hello")
    assert result["is_error"] is False and result["subtype"] == "success", result
    assert keyed.endpoint is not None and keyed.endpoint.records, "the local endpoint served nothing"
    assert result["result"] == model_text(keyed)


def test_a_tool_call_round_trip(keyed: LocalStack, tmp_path: Path) -> None:
    result = claude(keyed, tmp_path, "List the agents")
    assert result["is_error"] is False and result["num_turns"] == 2, result
    first, second = served(keyed)[-2:]
    assert "ListAgents" in {tool["function"]["name"] for tool in first["tools"]}
    assert not {name for name in DISALLOWED.split(",")} & {tool["function"]["name"] for tool in first["tools"]}
    calls = [m for m in second["messages"] if m.get("tool_calls")]
    results = [m for m in second["messages"] if m["role"] == "tool"]
    assert calls[-1]["tool_calls"][0]["function"]["name"] == "ListAgents"
    assert results and results[-1]["tool_call_id"] == calls[-1]["tool_calls"][0]["id"]
    assert result["result"].startswith("ListAgents returned")  # the simulated model answers from the result


def test_a_reasoning_models_turn_completes_with_its_thoughts_left_out_as_asked(
    keyed: LocalStack, tmp_path: Path
) -> None:
    assert keyed.endpoint is not None
    keyed.endpoint.set_scenario(reasoning=5)
    result = claude(keyed, tmp_path, "Say hello")
    assert result["is_error"] is False, result
    record = keyed.endpoint.records[-1]
    thoughts = "".join(t.text for t in record.tokens[:5])
    assert thoughts and thoughts not in result["result"]  # display "omitted": the answer's text only
