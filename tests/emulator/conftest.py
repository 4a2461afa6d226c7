"""The function under cargo-lambda's emulator: an independent Runtime API and streaming Function URL.

``cargo lambda watch --only-lambda-apis`` serves the Runtime API under ``/.rt/<function>`` and a Function
URL per function at ``/lambda-url/<function>/…``, and starts no function itself: the fixture starts our
runtime processes, as a developer starts a function in an IDE. (Without ``--only-lambda-apis`` it runs
``cargo run --bin <function>``, which builds a Rust binary; a Python function cannot be started that way.)
Its functions are the binary targets of a Cargo project, read with ``cargo metadata``: the fixture writes a
minimal ``Cargo.toml`` naming one per handler, in a temporary directory. Nothing is compiled.

The pinned cargo-lambda wheel lives in ``.venv-cargo-lambda`` (``make test`` installs it, without its
``ziglang`` dependency: zig is for cross-compiling, which ``watch --only-lambda-apis`` never does); ``cargo``
must be on PATH (``.ci/run`` installs Debian's when it is missing).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from sagestream_local.endpoint import Scenario, SimulatedEndpoint
from sagestream_local.stack import _SIM_CREDENTIALS, SIM_ENDPOINT_NAME
from tests.conftest import PYTHONPATH, ROOT
from tests.prerequisites import unavailable

CARGO_LAMBDA = ROOT / ".venv-cargo-lambda" / "bin" / "cargo-lambda"
# One function per handler, each a binary target of the throwaway Cargo project.
FUNCTIONS = {"sagestream": "sagestream.app.handler", "fails": "tests.handlers.fails"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cargo_project(where: Path) -> Path:
    bins = "".join(f'\n[[bin]]\nname = "{name}"\npath = "src/main.rs"\n' for name in FUNCTIONS)
    (where / "src").mkdir()
    (where / "src" / "main.rs").write_text("fn main() {}\n")
    (where / "Cargo.toml").write_text(
        f'[package]\nname = "sagestream-emulated"\nversion = "0.0.0"\nedition = "2021"\n{bins}'
    )
    return where / "Cargo.toml"


@dataclass
class Emulated:
    url: str  # cargo-lambda's address; a function's Function URL is under /lambda-url/<name>
    endpoint: SimulatedEndpoint
    logs: dict[str, Path] = field(default_factory=dict)  # each runtime process's stdout and stderr

    @staticmethod
    def path(name: str, path: str) -> str:
        """The request path that reaches ``path`` of function ``name`` through its Function URL."""
        return f"/lambda-url/{name}{path}"

    def log_lines(self, name: str) -> list[str]:
        return self.logs[name].read_text().splitlines()


@pytest.fixture(scope="session")
def cargo_lambda(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulated]:
    if not CARGO_LAMBDA.exists():
        unavailable(f"{CARGO_LAMBDA} is missing: `make test` installs it (make .venv-cargo-lambda/.installed)")
    if shutil.which("cargo") is None:
        unavailable("no cargo on PATH: cargo-lambda runs `cargo metadata` (.ci/run installs Debian's cargo)")
    where = tmp_path_factory.mktemp("cargo-lambda")
    manifest = _cargo_project(where)
    port = _free_port()
    emulator_log = (where / "cargo-lambda.log").open("w")
    emulator = subprocess.Popen(
        [str(CARGO_LAMBDA), "lambda", "watch", "--only-lambda-apis", "--ignore-changes",
         "--invoke-address", "127.0.0.1", "--invoke-port", str(port),
         "--manifest-path", str(manifest)],
        cwd=where, stdin=subprocess.DEVNULL, stdout=emulator_log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    endpoint = SimulatedEndpoint(Scenario(dialect="openai", ttft_ms=5, cadence_ms=1, tokens=12)).start()
    runtimes: list[subprocess.Popen[bytes]] = []
    emulated = Emulated(f"http://127.0.0.1:{port}", endpoint)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError as e:
                if emulator.poll() is not None or time.monotonic() > deadline:
                    emulator_log.flush()
                    raise RuntimeError(f"cargo-lambda did not start: {(where / 'cargo-lambda.log').read_text()}") from e
                time.sleep(0.1)
        for name, handler in FUNCTIONS.items():
            env = {
                **os.environ,
                **_SIM_CREDENTIALS,
                "PYTHONPATH": PYTHONPATH,
                "_HANDLER": handler,
                # What cargo-lambda gives a function it starts itself: its Runtime API as a URL with a path.
                "AWS_LAMBDA_RUNTIME_API": f"http://127.0.0.1:{port}/.rt/{name}",
                "AWS_LAMBDA_FUNCTION_NAME": name,
                "SAGEMAKER_ENDPOINT_NAME": SIM_ENDPOINT_NAME,
                "AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME": endpoint.url,
                "UPSTREAM_READ_TIMEOUT_S": "2",
                "UPSTREAM_MAX_ATTEMPTS": "1",
                "NO_PROXY": "127.0.0.1,localhost",
                "PYTHONUNBUFFERED": "1",
            }
            emulated.logs[name] = where / f"{name}.log"
            out = emulated.logs[name].open("w")
            runtimes.append(
                subprocess.Popen(
                    [sys.executable, "-m", "sagestream.lambda_runtime"],
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            )
        yield emulated
    finally:
        for process in [*runtimes, emulator]:
            process.terminate()
        for process in [*runtimes, emulator]:
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
        endpoint.stop()
        emulator_log.close()
