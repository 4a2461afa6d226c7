"""The Responses encoder's CPU per delta beside the chat encoder's, on the same stream, in one run.

``python -m bench.responses_encoder [--deltas N] [--repeats R]``; ``make bench`` prints the same line. Both encoders get
the same :class:`~sagestream.delta.Delta` list (a role delta, text deltas a tenth of them non-ASCII, the
finish and the usage), each run builds its encoder, encodes every delta and ends the stream, and the runs
alternate (chat, responses, chat, ...) so that both see the same machine; the figure is each one's median
run. The issue's target: the Responses encoder at most 1.10x the chat encoder.

With ``--function`` the function's own CPU per delta is measured on both routes too (same simulated stream,
local stack, alternating requests): the encoder's share of a whole invocation (``make bench`` always does).
With ``--instructions`` each encoder's instructions are counted too (valgrind's callgrind): CPU time on a
shared machine is noisy, instruction counts are not.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from sagestream.delta import Delta, Usage
from sagestream.protocols.openai.encoder import ChunkEncoder
from sagestream.protocols.responses.encoder import ResponsesEncoder
from sagestream.protocols.responses.request import parse_responses

TARGET_RATIO = 1.10


def stream(n: int) -> list[Delta]:
    """A chat answer of ``n`` text deltas as a decoder yields it."""
    words = ["The", " river", " runs", " to", " the", " sea", ",", " où", " l'eau", " 😀"]
    texts = [words[i % len(words)] for i in range(n)]
    return [
        Delta(role="assistant"),
        *(Delta(t) for t in texts),
        Delta(finish_reason="stop"),
        Delta(usage=Usage(12, n, 12 + n)),
    ]


def _chat(deltas: list[Delta]) -> int:
    encoder = ChunkEncoder(model="m", kind="chat", include_usage=True)
    return sum(len(encoder.encode(d)) for d in deltas) + len(encoder.done())


_REQUEST = parse_responses(b'{"input": "Tell me about rivers", "stream": true}', max_tokens_limit=None)[0]


def _responses(deltas: list[Delta]) -> int:
    encoder = ResponsesEncoder(_REQUEST, model="m")
    return sum(len(encoder.encode(d)) for d in deltas) + len(encoder.done())


ENCODERS = {"chat": _chat, "responses": _responses}


def compare(deltas: int = 1000, repeats: int = 31, *, count_instructions: bool = False) -> dict[str, Any]:
    """Each encoder's median CPU per delta (ns) over alternating runs, and their ratio."""
    items = stream(deltas)
    runs: dict[str, list[int]] = {name: [] for name in ENCODERS}
    wrote: dict[str, int] = {}
    for _ in range(repeats):
        for name, encode in ENCODERS.items():
            began = time.process_time_ns()
            wrote[name] = encode(items)
            runs[name].append(time.process_time_ns() - began)
    per_delta = {name: statistics.median(values) / len(items) for name, values in runs.items()}
    ratio = per_delta["responses"] / per_delta["chat"]
    return {
        "deltas": len(items),
        "repeats": repeats,
        "chat_ns_per_delta": round(per_delta["chat"]),
        "responses_ns_per_delta": round(per_delta["responses"]),
        "ratio": round(ratio, 3),
        "met": ratio <= TARGET_RATIO,
        "bytes": wrote,
        "instructions": instructions(deltas) if count_instructions else None,
    }


_PROGRAM = """
from bench.responses_encoder import ENCODERS, stream
items = stream({n})
for _ in range({runs}):
    ENCODERS[{name!r}](items)
"""


def instructions(deltas: int, repeats: int = 4) -> dict[str, Any] | None:
    """Instructions per delta of each encoder, counted by valgrind's callgrind (this machine's perf has no
    hardware counters): a process that runs the encoder ``1 + repeats`` times less one that runs it once, so
    that imports and first-call costs cancel out; hash seed fixed. Some minutes of CPU; None without valgrind."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        return None
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    per_delta: dict[str, float] = {}
    for name in ENCODERS:
        counts = []
        for runs in (1, 1 + repeats):
            program = _PROGRAM.format(n=deltas, runs=runs, name=name)
            done = subprocess.run(
                [valgrind, "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, "-c", program],
                capture_output=True,
                text=True,
                check=False,
                env=env,
            )
            found = re.search(r"Collected : (\d+)", done.stderr)
            if done.returncode != 0 or found is None:
                return None
            counts.append(int(found.group(1)))
        per_delta[name] = (counts[1] - counts[0]) / (len(stream(deltas)) * repeats)
    return {
        **{f"{name}_per_delta": round(value) for name, value in per_delta.items()},
        "ratio": round(per_delta["responses"] / per_delta["chat"], 3),
    }


def function_cpu(runs: int = 15, tokens: int = 1000) -> dict[str, Any]:
    """The function's own CPU per delta (its invocation records' ``cpu_ms`` over ``output_tokens``) for the same
    simulated stream asked through ``/v1/chat/completions`` and ``/v1/responses``, alternating, in one local
    stack: the encoder's share of the whole invocation."""
    from tests.client import request

    from bench.function import InvocationLog
    from bench.run import PYTHONPATH
    from sagestream_local.endpoint import Scenario
    from sagestream_local.stack import LocalStack

    asks = {
        "chat": ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "stream": True}),
        "responses": ("/v1/responses", {"input": "Hi", "stream": True}),
    }
    cpu_us: dict[str, list[float]] = {name: [] for name in asks}
    with tempfile.NamedTemporaryFile(prefix="sagestream-encoders-", suffix=".log") as out:
        log = InvocationLog(Path(out.name))
        scenario = Scenario(tokens=tokens, ttft_ms=0, cadence_ms=0, non_ascii=0.1)
        with LocalStack(port=0, concurrency=1, env={"PYTHONPATH": PYTHONPATH}, scenario=scenario, stdout=out) as stack:
            for path, body in asks.values():  # warm: the first request of each route imports its modules
                request(stack.url, "POST", path, body)
            for turn in range(runs + 1):
                for name, (path, body) in asks.items():
                    if request(stack.url, "POST", path, body).status != 200:
                        raise RuntimeError(f"{path} failed")
                    records = _records_after(log, expected=1 if turn else 0)
                    if turn:
                        cpu_us[name] += [r["cpu_ms"] * 1000 / r["output_tokens"] for r in records]
    per_delta = {name: statistics.median(values) for name, values in cpu_us.items()}
    return {
        "runs": runs,
        "tokens": tokens,
        **{f"{name}_us_per_delta": round(value, 2) for name, value in per_delta.items()},
        "ratio": round(per_delta["responses"] / per_delta["chat"], 3),
    }


def _records_after(log: Any, expected: int, timeout_s: float = 5.0) -> list[dict[str, Any]]:
    """The invocation records written since the last call: the runtime writes its record after the response."""
    records: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout_s
    while True:
        records += log.new_records()
        if len(records) >= expected or time.monotonic() > deadline:
            return records
        time.sleep(0.02)


def line(result: dict[str, Any]) -> str:
    counted = result.get("instructions")
    extra = (
        f"; instructions/delta chat {counted['chat_per_delta']} responses {counted['responses_per_delta']} "
        f"({counted['ratio']}x)"
        if counted
        else ""
    )
    function = result.get("function")
    if function:
        extra += (
            f"; the function's cpu/delta chat {function['chat_us_per_delta']} us responses "
            f"{function['responses_us_per_delta']} us ({function['ratio']}x)"
        )
    return (
        f"responses encoder: {result['deltas']} deltas, cpu/delta chat {result['chat_ns_per_delta']} ns, responses "
        f"{result['responses_ns_per_delta']} ns: {result['ratio']}x (target <= {TARGET_RATIO}x){extra}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.responses_encoder", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("--deltas", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=31)
    parser.add_argument("--instructions", action="store_true", help="count instructions too (valgrind, ~1 min CPU)")
    parser.add_argument("--function", action="store_true", help="the function's CPU per delta on both routes too")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = compare(args.deltas, args.repeats, count_instructions=args.instructions)
    if args.function:
        result["function"] = function_cpu()
    print(json.dumps(result) if args.json else line(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
