"""Request validation per request, in instructions: the msgspec validation against the pydantic one it replaced.

``python -m bench.validation``: three bodies (a typical chat, a 50-message conversation with tool calls, a
Responses request with 20 input items) each read and validated by the function's parse (``parse_chat``,
``parse_responses``: the body's bytes to the request model, its checks and limits) and by the pydantic
validation kept as the test oracle (tests/oracle), in one process under callgrind: a mark (``getppid``)
before and after ``ROUNDS`` parses of each, so a dump holds exactly those parses' instructions. Without
valgrind the same intervals are timed in process CPU instead (noisy: only a side-by-side figure).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PYTHONPATH = os.pathsep.join([str(ROOT), str(ROOT / "src")])
ROUNDS = 20


def bodies() -> dict[str, bytes]:
    """The three bodies, as a client sends them."""
    tools = [
        {
            "type": "function",
            "function": {
                "name": f"tool_{n}",
                "description": "Looks something up.",
                "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
            },
        }
        for n in range(3)
    ]
    turns: list[dict[str, Any]] = [{"role": "system", "content": "You are a careful assistant."}]
    for n in range(16):
        call = {"id": f"call_{n}", "type": "function", "function": {"name": "tool_0", "arguments": '{"q": "x"}'}}
        turns += [
            {"role": "user", "content": f"Question {n}: what is the weather in city {n}?"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"call_{n}", "content": "Sunny, 21 degrees."},
        ]
    turns.append({"role": "user", "content": "Thanks."})
    items: list[dict[str, Any]] = []
    for n in range(10):
        items += [
            {"role": "user", "content": [{"type": "input_text", "text": f"Turn {n}: tell me more."}]},
            {"role": "assistant", "content": [{"type": "output_text", "text": "Here is more.", "annotations": []}]},
        ]
    return {
        "chat": json.dumps(
            {"model": "m", "messages": [{"role": "user", "content": "Hello, how are you?"}], "stream": True}
        ).encode(),
        "chat, 50 messages with tool calls": json.dumps(
            {"model": "m", "messages": turns[:50], "tools": tools, "stream": True}
        ).encode(),
        "responses, 20 items": json.dumps({"model": "m", "input": items, "stream": True}).encode(),
    }


def _parsers() -> dict[str, tuple[Callable[[bytes], Any], Callable[[bytes], Any]]]:
    """Per body: (msgspec's parse, pydantic's), called as the function calls them."""
    from tests.oracle import openai_request as old_chat
    from tests.oracle import responses_request as old_responses

    from sagestream.protocols.openai import request as new_chat
    from sagestream.protocols.responses import request as new_responses

    def chat(module: Any) -> Callable[[bytes], Any]:
        return lambda raw: module.parse_chat(raw, max_tokens_limit=4096)

    def responses(module: Any) -> Callable[[bytes], Any]:
        return lambda raw: module.parse_responses(raw, max_tokens_limit=4096)

    return {
        "chat": (chat(new_chat), chat(old_chat)),
        "chat, 50 messages with tool calls": (chat(new_chat), chat(old_chat)),
        "responses, 20 items": (responses(new_responses), responses(old_responses)),
    }


def _child() -> None:
    """In the measured process: each parser on each body, ROUNDS times between two marks."""
    from bench import counted

    parsers = _parsers()
    for name, raw in bodies().items():
        for parse in parsers[name]:
            for _ in range(3):
                parse(raw)  # warm: imports, caches, models built
            counted.mark("start")
            for _ in range(ROUNDS):
                parse(raw)
            counted.mark("end")


def measure() -> dict[str, Any]:
    """Per body: instructions (or CPU ns) per parse, msgspec and pydantic, and their ratio."""
    from bench import counted, instructions

    counting = instructions.valgrind() is not None
    with tempfile.TemporaryDirectory(prefix="sagestream-validation-") as tmp:
        out_dir = Path(tmp)
        command = instructions._command([sys.executable, "-m", "bench.validation", "--child"], out_dir, counting)
        env = {**os.environ, "PYTHONPATH": PYTHONPATH, "COUNTED_MARKS": str(out_dir / "marks")}
        subprocess.run(command, env=env, check=True, timeout=900, capture_output=True)
        marks = (
            instructions._intervals(out_dir, counting)
            if counting
            else counted.intervals((out_dir / "marks").read_text())
        )
    spans = [n for label, n in marks if label == "end"]
    out: dict[str, Any] = {"unit": "instructions" if counting else "CPU ns", "rounds": ROUNDS, "bodies": {}}
    for (name, _), (new, old) in zip(bodies().items(), zip(spans[0::2], spans[1::2], strict=True), strict=True):
        out["bodies"][name] = {
            "msgspec": round(new / ROUNDS),
            "pydantic": round(old / ROUNDS),
            "ratio": round(new / old, 3),
        }
    out["worst_ratio"] = max(b["ratio"] for b in out["bodies"].values())
    return out


if __name__ == "__main__":
    if sys.argv[1:] == ["--child"]:
        _child()
    else:
        started = time.monotonic()
        print(json.dumps(measure(), indent=2))
        print(f"({time.monotonic() - started:.0f} s)", file=sys.stderr)
