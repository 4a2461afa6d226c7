"""Codex CLI (the npm package, pinned in tests/node) against the local stack with a plain custom provider:
``wire_api = "responses"``, the stack's loopback ``/v1`` and a key. It sends ``client_metadata``, a
``namespace`` tool group, the hosted ``web_search`` tool, ``reasoning: {"summary": "auto"}``, ``store: false``
and ``include: ["reasoning.encrypted_content"]`` on every turn; the first three used to be 400s. A turn, a
tool call round trip (Codex runs the model's command in its read-only sandbox, in an empty directory: the
simulated model's command is a word no shell knows) and reasoning sent back through ``encrypted_content``
must complete.

Nothing reaches a public host: the provider's URL is checked to be loopback, proxies point at a dead loopback
port, analytics are off, HOME and CODEX_HOME are temporary; each test checks what the local endpoint served.
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
CODEX = ROOT / "tests" / "node" / "node_modules" / ".bin" / "codex"
KEY = "k-codex"
DEAD_PROXY = "http://127.0.0.1:9"
CONFIG = """model = "{model}"
model_provider = "sagestream"

[model_providers.sagestream]
name = "sagestream"
base_url = "{url}/v1"
env_key = "SAGESTREAM_KEY"
wire_api = "responses"

[analytics]
enabled = false
"""


@pytest.fixture
def keyed(stack_for: GetStack) -> LocalStack:
    return stack_for(API_KEYS=KEY)


def codex(stack: LocalStack, tmp_path: Path, prompt: str) -> str:
    """One ``codex exec`` run in its read-only sandbox; what it printed."""
    assert CODEX.exists(), "make test installs tests/node (npm ci)"
    home, work = tmp_path / "home", tmp_path / "work"
    (home / ".codex").mkdir(parents=True)
    work.mkdir()
    (home / ".codex" / "config.toml").write_text(CONFIG.format(model=SIM_ENDPOINT_NAME, url=loopback(stack)))
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "CODEX_HOME": str(home / ".codex"),
        "SAGESTREAM_KEY": KEY,
        **{name: DEAD_PROXY for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy")},
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }
    command = [str(CODEX), "exec", "--skip-git-repo-check", "--sandbox", "read-only", prompt]
    done = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done.stdout


def served(stack: LocalStack) -> list[dict[str, Any]]:
    assert stack.endpoint is not None
    return [json.loads(record.body) for record in stack.endpoint.records]


def test_a_turn_completes_with_the_models_text(keyed: LocalStack, tmp_path: Path) -> None:
    printed = codex(keyed, tmp_path, "Say hello")
    assert keyed.endpoint is not None and keyed.endpoint.records, "the local endpoint served nothing"
    assert model_text(keyed).strip() in printed
    (sent,) = served(keyed)
    offered = {tool["function"]["name"] for tool in sent["tools"]}
    assert "exec_command" in offered and any(name.startswith("multi_agent_v1__") for name in offered)
    assert "web_search" not in json.dumps(sent["tools"]), "a hosted tool is not offered to the model"


def test_a_tool_call_round_trip_with_reasoning_sent_back_sealed(keyed: LocalStack, tmp_path: Path) -> None:
    assert keyed.endpoint is not None
    keyed.endpoint.set_scenario(reasoning=3)
    printed = codex(keyed, tmp_path, "Use exec_command to run it")
    second = served(keyed)[-1]
    call = next(m for m in second["messages"] if m.get("tool_calls"))["tool_calls"][0]
    assert call["function"]["name"] == "exec_command"
    result = next(m for m in second["messages"] if m["role"] == "tool")
    assert result["tool_call_id"] == call["id"] and "command not found" in result["content"]
    # Codex kept the reasoning as encrypted_content and sent it back; the model sees it again as reasoning.
    assert any(m.get("reasoning_content") for m in second["messages"] if m["role"] == "assistant")
    assert "exec_command returned" in printed
