"""Every path (issue 53 item 7): bursts and first delta on each route a client streams from, with and without
``QUOTAS``, over the local stack on the simulated endpoint.

``python -m bench.paths [--quick] [--out bench/results/paths.json]``; ``make bench`` runs it too (``--workloads
paths``), its figures in ``latest.json`` under ``paths``. Two stacks, one after the other, the same but for
``QUOTAS`` (``RESPONSES_STORE=dynamodb``, so moto's DynamoDB holds the store, the runs' event logs and the
quotas' counts; ``AUTH_MODE=api_key``; two execution environments, so that a follower is served while its run
streams), and on each, the same token schedule (:data:`SCENARIO`):

- ``chat``: ``POST /v1/chat/completions``; ``messages``: ``POST /v1/messages``;
- ``responses-fresh``: a stored ``POST /v1/responses`` (``store`` defaults to true) as the first request of a
  fresh environment (both runtime processes killed and started again, their init awaited, before each run);
- ``responses-warm``: the same once each environment has served one;
- ``background-creator``: ``POST /v1/responses`` with ``background`` and ``stream``, the client that created it;
- ``background-follower``: ``GET /v1/responses/{id}?stream=true`` sent as soon as the creator has the id (its
  ``response.created``), read in the same process as the creator, while the run streams: it reads the run's event
  log, so its added delay is bounded by design (:data:`FOLLOWER_BOUND_MS`: a batch is written
  ``FLUSH_S`` after its first event and the log read every ``POLL_S``) and its deltas come in batches: its bursts
  are its design, reported apart, and not a target.

Each path's requests go from a process of its own (``python -m bench.paths read ...``, as ``bench.peers`` runs a
peer), through the bench's own Function URL reader (:func:`bench.peers.read_function_url`, measure's
``StreamReader``) stamping :class:`bench.peers.Arrivals`; each figure is :func:`bench.report.metrics` of those
arrivals against the endpoint's send times: a burst is a delta < 1 ms after the one before although the endpoint
sent their tokens >= 2 ms apart, as on every other table of the bench. Every socket is on loopback.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from bench import report
from bench.cold import InitClock
from bench.peers import Arrivals, read_function_url, reset_peak_rss, status_kb
from sagestream.protocols.responses.eventlog import FLUSH_S, POLL_S
from sagestream_local.endpoint import Record, Scenario
from sagestream_local.measure import StreamReader
from sagestream_local.stack import SIM_ENDPOINT_NAME, LocalStack

ROOT = Path(__file__).resolve().parent.parent
PYTHONPATH = os.pathsep.join([str(ROOT), str(ROOT / "src")])
KEY = "sk-bench-paths"
# Limits no request of the bench reaches (bench.quotas' one window): every reserve applied, none refused.
QUOTAS = "tokens_per_minute=100000000 requests_per_minute=1000000"
PATHS = (
    "chat",
    "messages",
    "responses-fresh",
    "responses-warm",
    "background-creator",
    "background-follower",
)
# The issue's own schedule for the background creator (40 tokens 15 ms apart), after a first token at the
# simulated endpoint's usual 150 ms, the same for every request (no prefix-cache shortcut).
SCENARIO = Scenario(dialect="openai", tokens=40, cadence_ms=15.0, ttft_ms=150.0, prefix_hit_ttft_ms=None)
FOLLOWER_BOUND_MS = round((FLUSH_S + POLL_S) * 1000)
PROMPT = "Tell me a story about a river."
# Where each figure came from before (issue 53, measured on main ac84e1a by its author, not by this bench).
BEFORE = {
    "responses-fresh": "stopped mid-stream 48 ms (idle machine) to 75-280 ms (busy), then released the held deltas "
    "together: 3 of 40 < 1 ms apart",
    "responses-warm": "clean after the environment's first; first delta 115-228 ms (the background request below, "
    "sent in the foreground)",
    "background-creator": "first delta 726-756 ms; 36-37 of 40 deltas < 1 ms apart, gaps up to 270 ms (through the "
    "event log and a poller)",
}


# ------------------------------------------------------------------------------------------- the reader side


class PathStream(StreamReader):
    """measure's reader, counting the text deltas of the Messages API (``content_block_delta``) and of the
    Responses API (``response.output_text.delta``) as it counts chat's, and noting a response's id."""

    def __init__(self, on_id: Callable[[str], None] | None = None) -> None:
        super().__init__()
        self.response_id: str | None = None
        self._on_id = on_id

    def _data(self, payload: bytes) -> int:
        try:
            event = json.loads(payload)
        except ValueError:
            return 0
        kind = event.get("type") if isinstance(event, dict) else None
        if kind is None:
            return super()._data(payload)
        if kind == "content_block_delta" and event["delta"].get("type") == "text_delta" and event["delta"]["text"]:
            self.text.append(event["delta"]["text"])
            return 1
        if kind == "response.output_text.delta" and event["delta"]:
            self.text.append(event["delta"])
            return 1
        if kind == "response.created" and self.response_id is None:
            self.response_id = event["response"]["id"]
            if self._on_id is not None:
                self._on_id(self.response_id)
        elif kind in ("error", "response.failed"):
            self.errors.append(event)
        return 0


def request(path: str, max_tokens: int | None = None) -> tuple[str, bytes]:
    """The route and body of a path's request (the follower's is a GET made from its creator's id)."""
    body: dict[str, Any]
    if path == "chat":
        route, body = "/v1/chat/completions", {"messages": [{"role": "user", "content": PROMPT}], "stream": True}
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
    elif path == "messages":
        messages = [{"role": "user", "content": PROMPT}]
        route = "/v1/messages"
        body = {"model": SIM_ENDPOINT_NAME, "max_tokens": max_tokens or 4096, "messages": messages, "stream": True}
    else:
        route, body = "/v1/responses", {"model": SIM_ENDPOINT_NAME, "input": PROMPT, "stream": True}
        if path == "background-creator":
            body["background"] = True
        if max_tokens is not None:
            body["max_output_tokens"] = max_tokens
    return route, json.dumps(body, separators=(",", ":")).encode()


def read_path(target: str, path: str, max_tokens: int | None) -> dict[str, Arrivals]:
    """One request of ``path`` (with ``background-creator``, its follower's too), each path's arrivals."""
    auth = {"Authorization": f"Bearer {KEY}"}
    route, body = request(path, max_tokens)
    if path != "background-creator":
        out = Arrivals(time.monotonic_ns(), keep=True)
        read_function_url(target, body, out, path=route, headers=auth, reader=PathStream())
        return {path: out}
    created = threading.Event()
    ids: list[str] = []
    followed: dict[str, Arrivals] = {}
    failed: list[BaseException] = []

    def noted(response_id: str) -> None:
        ids.append(response_id)
        created.set()

    def follow() -> None:
        try:
            if not created.wait(60):
                raise RuntimeError("the creator's stream named no response")
            followed["background-follower"] = out = Arrivals(time.monotonic_ns(), keep=True)
            where = f"/v1/responses/{ids[0]}?stream=true"
            read_function_url(target, b"", out, method="GET", path=where, headers=auth, reader=PathStream())
        except BaseException as exc:  # raised again in the creator's thread
            failed.append(exc)

    follower = threading.Thread(target=follow, name="follower", daemon=True)
    follower.start()
    creator = Arrivals(time.monotonic_ns(), keep=True)
    try:
        read_function_url(target, body, creator, path=route, headers=auth, reader=PathStream(on_id=noted))
    finally:
        created.set()
        follower.join(120)
    if failed:
        raise failed[0]
    return {path: creator, **followed}


def reader_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.paths read")
    parser.add_argument("path", choices=[p for p in PATHS if p != "background-follower"])
    parser.add_argument("--target", required=True)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--warm", type=int, default=0, help="short requests first (one per environment)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    for _ in range(args.warm):
        read_path(args.target, args.path, 2)
    reset_peak_rss()
    rss_before, cpu_before = status_kb("VmRSS"), time.process_time_ns()
    runs: dict[str, list[dict[str, Any]]] = {}
    for _ in range(args.runs):
        for name, arrivals in read_path(args.target, args.path, None).items():
            runs.setdefault(name, []).append(arrivals.to_json())
    common = {"cpu_ns": time.process_time_ns() - cpu_before, "rss_before_kb": rss_before}
    doc = {name: {"peer": name, "runs": r, **common, "peak_rss_kb": status_kb("VmHWM")} for name, r in runs.items()}
    Path(args.out).write_text(json.dumps(doc))
    return 0


# ------------------------------------------------------------------------------------------- the bench side


def _read(stack: LocalStack, path: str, runs: int, warm: int) -> dict[str, dict[str, Any]]:
    """``runs`` requests of ``path`` from a reader process, after ``warm`` short ones; what it wrote."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as tmp:
        out = Path(tmp.name)
    command = [sys.executable, "-m", "bench.paths", "read", path, "--target", stack.url, "--runs", str(runs)]
    command += ["--warm", str(warm), "--out", str(out)]
    try:
        env = {**os.environ, "PYTHONPATH": PYTHONPATH, "NO_PROXY": "127.0.0.1,localhost"}
        subprocess.run(command, check=True, timeout=120 + 30 * (runs + warm), env=env)
        result: dict[str, dict[str, Any]] = json.loads(out.read_text())
    finally:
        out.unlink(missing_ok=True)
    return result


def _fresh(stack: LocalStack, clock: InitClock) -> None:
    """Every runtime process of ``stack`` killed and started again, its init over: fresh environments."""
    assert stack.pool is not None
    for environment in stack.pool.environments:
        killed = time.monotonic()
        environment.kill()
        deadline = killed + 60
        while clock.spawned.get(id(environment), 0.0) < killed:  # the watcher starts the next process
            if time.monotonic() > deadline:
                raise TimeoutError("the runtime process was not started again")
            time.sleep(0.005)
        clock.wait(environment)


def _measured(
    stack: LocalStack, path: str, runs: int, warm: int, fresh: InitClock | None
) -> dict[str, tuple[dict[str, Any], list[Record]]]:
    """Per path read (the creator brings its follower): the reader's result and the endpoint's records of its runs,
    one record per run (a follower reads its creator's run: the same record)."""
    assert stack.endpoint is not None
    results: dict[str, dict[str, Any]] = {}
    records: list[Record] = []
    for _ in range(runs if fresh is not None else 1):
        if fresh is not None:
            _fresh(stack, fresh)
        stack.endpoint.clear_records()
        got = _read(stack, path, 1 if fresh is not None else runs, warm)
        records += list(stack.endpoint.records)[-len(got[path]["runs"]) :]
        for name, result in got.items():
            if name in results:
                results[name]["runs"] += result["runs"]
            else:
                results[name] = result
    return {name: (result, records) for name, result in results.items()}


def _stack(quotas: bool) -> LocalStack:
    env = {"PYTHONPATH": PYTHONPATH, "AUTH_MODE": "api_key", "API_KEYS": KEY, "RESPONSES_STORE": "dynamodb"}
    if quotas:
        env["QUOTAS"] = QUOTAS
    return LocalStack(port=0, concurrency=2, env=env, scenario=SCENARIO, stdout=subprocess.DEVNULL)


def measure(
    runs: int, fresh_runs: int, clock: InitClock | None = None, sides: tuple[bool, ...] = (False, True)
) -> dict[str, Any]:
    """Every path's figures, without ``QUOTAS`` and with (``sides``), ``runs`` measured requests each after a short
    one per environment (the fresh path: ``fresh_runs``, each after a restart and no other request)."""
    clock = clock or InitClock()
    began = time.monotonic()
    rows: dict[str, dict[str, dict[str, Any]]] = {}
    for quotas in sides:
        side = "with QUOTAS" if quotas else "without QUOTAS"
        rows[side] = {}
        with _stack(quotas) as stack:
            assert stack.pool is not None
            for environment in stack.pool.environments:
                clock.wait(environment)
            for path in ("chat", "messages", "responses-fresh", "responses-warm", "background-creator"):
                fresh = clock if path == "responses-fresh" else None
                count = fresh_runs if fresh is not None else runs
                warm = 0 if fresh is not None else len(stack.pool.environments)
                measured = _measured(stack, path, count, warm, fresh)
                for name, (result, records) in measured.items():
                    rows[side][name] = _row(report.metrics(result, records))
                    print(line(side, name, rows[side][name]), flush=True)
        chat = rows[side]["chat"]["ttft_ms_median"]
        for path, row in rows[side].items():
            ttft = None if path == "background-follower" else row["ttft_ms_median"]  # from its own GET
            row["ttft_vs_chat_ms"] = None if ttft is None or chat is None else round(ttft - chat, 1)
    return {
        "scenario": {"tokens": SCENARIO.tokens, "cadence_ms": SCENARIO.cadence_ms, "ttft_ms": SCENARIO.ttft_ms},
        "runs": runs,
        "fresh_runs": fresh_runs,
        "follower_bound_ms": FOLLOWER_BOUND_MS,
        "rows": rows,
        "before": BEFORE,
        "elapsed_s": round(time.monotonic() - began, 1),
    }


# What of report.metrics a path's row keeps (the reader process's CPU and RSS are not the function's).
ROW_KEYS = (
    "runs",
    "deltas",
    "tokens_sent",
    "ttft_ms_median",
    "ttft_over_endpoint_ms",
    "burst_gaps",
    "cadence_ms_median",
    "added_ms_p50",
    "added_ms_p99",
    "added_ms_max",
)


def _row(figures: Mapping[str, Any]) -> dict[str, Any]:
    return {key: figures.get(key) for key in ROW_KEYS}


def line(side: str, path: str, row: Mapping[str, Any]) -> str:
    return (
        f"{side:15} {path:20} first delta {row['ttft_ms_median']} ms  bursts {row['burst_gaps']}/{row['deltas']}"
        f"  added p50 {row['added_ms_p50']} p99 {row['added_ms_p99']} max {row['added_ms_max']} ms"
    )


def _code() -> dict[str, Any] | None:
    """The commit measured, and whether src/ had edits not in it (None outside a git work tree)."""
    try:
        commit = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, check=True
        )
        changed = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "src"], capture_output=True, check=True
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return {"commit": commit.stdout.decode().strip(), "src_modified": bool(changed.stdout.strip())}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["read"]:
        return reader_main(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m bench.paths", description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="two runs a path, two fresh environments")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "paths.json")
    args = parser.parse_args(argv)
    doc: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "loadavg_before": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "cores": os.cpu_count(),
        "quick": args.quick,
        "code": _code(),
    }
    doc |= measure(*((2, 2) if args.quick else (5, 5)))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print("\n".join(report.paths_section(doc)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
