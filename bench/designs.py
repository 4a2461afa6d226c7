"""The designs a user would pick instead of sagestream (issue 55), run in the same bench as it.

- ``node-streamify``: AWS's own design, a Node.js handler in ``awslambda.streamifyResponse`` calling
  ``InvokeEndpointWithResponseStreamCommand`` (bench/node/handler.mjs), run by ``aws-lambda-ric`` from npm
  (bench/node/package-lock.json) under the same local Runtime API and Function URL as sagestream's runtime.
- ``fastapi-aiobotocore``: the usual Python design, FastAPI on uvicorn with aiobotocore
  (bench/fastapi_peer/app.py), in a venv of its own (``.venv-bench-fastapi``, bench/fastapi_peer/requirements.txt),
  measured over HTTP: on Lambda it runs behind the Lambda Web Adapter, whose own process (it polls the Runtime
  API and forwards each invocation as an HTTP request) is not run here, so its figures are a lower bound.

Each does the same work as sagestream's chat route: the endpoint's OpenAI-style lines decoded and re-encoded
as ``chat.completion.chunk`` events, written on as they arrive. ``make bench`` installs both (npm ci, pip).

Cold figures (:func:`bench.cold.lambda_cold` for node-streamify, :func:`fastapi_cold`, alternated with
sagestream's by :func:`bench.cold.cold_init`): the process's CPU (all threads) and wall time from its start to its first
``/next`` (Lambda designs) or to uvicorn's "Application startup complete" (FastAPI), its RSS then, and one
streamed chat request: the process's CPU from the end of init to the first body byte of the answer, and from
its start to the end of that first answer.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.cold import Cold, cpu_ns
from bench.peers import reset_peak_rss, status_kb

ROOT = Path(__file__).resolve().parent.parent
NODE_DIR = ROOT / "bench" / "node"
FASTAPI_DIR = ROOT / "bench" / "fastapi_peer"
FASTAPI_VENV = ROOT / ".venv-bench-fastapi"
DESIGNS = ("node-streamify", "fastapi-aiobotocore")
_STARTED = "Application startup complete"


def node_command() -> list[str]:
    """How the node-streamify peer starts: node on aws-lambda-ric's ``run`` (bench/node/bootstrap.mjs)."""
    node = shutil.which("node")
    ric = NODE_DIR / "node_modules" / "aws-lambda-ric"
    if node is None or not ric.is_dir():
        raise RuntimeError("the node-streamify peer is not installed: `make bench` installs it (npm ci in bench/node)")
    if not (ric / "dist" / "rapid-client.node").exists():  # built by its install script, not shipped
        raise RuntimeError(f"aws-lambda-ric's native client was not built in {ric}: did npm run its install scripts?")
    return [node, str(NODE_DIR / "bootstrap.mjs")]


def fastapi_python() -> str:
    python = FASTAPI_VENV / "bin" / "python"
    if not python.exists():
        raise RuntimeError(f"the fastapi-aiobotocore peer is not installed: `make bench` installs it in {FASTAPI_VENV}")
    return str(python)


class FastAPIServer:
    """uvicorn serving bench/fastapi_peer/app.py on a socket this process bound (loopback), until stopped."""

    def __init__(self, env: dict[str, str]) -> None:
        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.socket.listen(128)
        self.url = f"http://127.0.0.1:{self.socket.getsockname()[1]}"
        fd = self.socket.fileno()
        command = [fastapi_python(), "-m", "uvicorn", "app:app", "--app-dir", str(FASTAPI_DIR), "--fd", str(fd)]
        started = time.monotonic()
        self.process = subprocess.Popen(
            [*command, "--no-access-log", "--log-level", "info"],
            env={**os.environ, **env, "PYTHONPATH": "", "PYTHONNOUSERSITE": "1"},
            pass_fds=[fd],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        assert self.process.stderr is not None
        said: list[bytes] = []
        for line in self.process.stderr:
            said.append(line)
            if _STARTED.encode() in line:
                break
        else:
            self.stop()
            raise RuntimeError(f"uvicorn never started: {b''.join(said[-20:]).decode(errors='replace')}")
        self.init_wall_ms = (time.monotonic() - started) * 1000
        self.init_cpu_ns = cpu_ns(self.process.pid)
        self.rss_after_init_kb = status_kb("VmRSS", self.process.pid)
        self.pid = self.process.pid
        # What uvicorn says after start-up goes nowhere, but must be read: a full pipe would block it.
        threading.Thread(target=self.process.stderr.read, daemon=True).start()

    def stop(self) -> None:
        # SIGTERM: uvicorn ends its lifespan, which closes aiobotocore's connections to the endpoint.
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
        self.socket.close()

    def __enter__(self) -> FastAPIServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def _connection(url: str) -> Iterator[socket.socket]:
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        yield sock


def first_request_cpu(url: str, body: bytes, pid: int) -> tuple[int, int]:
    """One streamed chat request over HTTP: the server's CPU ns at the answer's first content delta and at its end."""
    from sagestream_local.measure import StreamReader

    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {url.removeprefix('http://')}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    first: int | None = None
    with _connection(url) as sock:
        sock.sendall(head + body)
        reader = StreamReader()
        while not reader.complete:
            data = sock.recv(65536)
            if not data:
                break
            if reader.feed(data) and first is None:
                first = cpu_ns(pid)
    if reader.status != 200 or not reader.complete or first is None:
        raise RuntimeError(f"fastapi-aiobotocore: the cold request failed: HTTP {reader.status} {reader.errors}")
    return first, cpu_ns(pid)


def fastapi_cold(env: dict[str, str], body: bytes) -> Cold:
    """A new uvicorn process to its start-up's end, then one streamed request over HTTP."""
    with FastAPIServer(env) as server:
        first, total = first_request_cpu(server.url, body, server.pid)
        init = server.init_cpu_ns
        return Cold(init / 1e6, server.init_wall_ms, server.rss_after_init_kb / 1024, (first - init) / 1e6, total / 1e6)


def fastapi_rss_per_stream(server: FastAPIServer, sim: Any, k: int = 16, tokens: int = 40) -> float:
    """MB of RSS per extra concurrent stream in the one uvicorn process: ``k`` streams at once, 40 tokens/s each
    (bench.many's shape), its peak RSS less its idle RSS, over ``k``."""
    from concurrent.futures import ThreadPoolExecutor

    from sagestream_local.measure import chat_body, stream_chat

    sim.set_scenario(tokens=tokens, cadence_ms=25, ttft_ms=0)
    try:
        reset_peak_rss(server.pid)
        idle = status_kb("VmRSS", server.pid)
        with ThreadPoolExecutor(k) as pool:
            bodies = [chat_body(f"stream {i}", tokens, None) for i in range(k)]
            runs = list(pool.map(lambda body: stream_chat(server.url, body, timeout_s=60), bodies))
        peak = status_kb("VmHWM", server.pid)
    finally:
        sim.reset_scenario()
    failed = [(run.status, run.error) for run in runs if run.status != 200 or run.deltas != tokens]
    if failed:
        raise RuntimeError(f"fastapi-aiobotocore: {len(failed)} of {k} concurrent streams failed: {failed[:3]}")
    return round((peak - idle) / 1024 / k, 3)
