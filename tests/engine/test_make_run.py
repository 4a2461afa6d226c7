"""``make run UPSTREAM=vllm``: ``python -m sagestream_local`` over its own vLLM engine, stopped with it."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time

import openai
import pytest

from sagestream_local.vllm_engine import VllmEngine
from tests.conftest import PYTHONPATH

# The first test pays for the session's engine start (20-60 s on two shared cores) within its own timeout.
pytestmark = pytest.mark.timeout(300)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_make_run_upstream_vllm_serves_the_engines_answer_and_stops_it(engine: VllmEngine) -> None:
    port = _free_port()
    env = {**os.environ, "UPSTREAM": "vllm", "RESPONSES_STORE": "none", "PYTHONPATH": PYTHONPATH}
    command = [sys.executable, "-m", "sagestream_local", "--port", str(port), "--concurrency", "1"]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    try:
        assert process.stdout is not None
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and not any(line.startswith("  try:") for line in lines):
            line = process.stdout.readline()
            assert line, f"python -m sagestream_local ended: {''.join(lines)}"
            lines.append(line)
        serving = next(line for line in lines if line.startswith("sagestream: serving"))
        engine_port = int(re.search(r"vllm serve at http://127\.0\.0\.1:(\d+)", serving)[1])  # type: ignore[index]
        assert f"http://127.0.0.1:{port}" in serving and "'sagestream-tiny'" in serving
        request = {"model": "sagestream-tiny", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 6}
        ours = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0, timeout=60)
        theirs = openai.OpenAI(base_url=engine.url + "/v1", api_key="unused", max_retries=0, timeout=60)
        answers = [
            c.chat.completions.create(**request, temperature=0).choices[0].message.content for c in (ours, theirs)
        ]
        assert answers[0] == answers[1] != ""  # the same tiny model, built the same, on another engine
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
    assert process.returncode == 0
    with socket.socket() as probe:  # the engine went with it
        assert probe.connect_ex(("127.0.0.1", engine_port)) != 0
