"""vLLM on CPU as a local model container: ``vllm serve`` on loopback, from the venv ``make`` installs it into.

``make run UPSTREAM=vllm``, ``tests/engine`` and the benchmark start it the same way: the model is a folder
on disk (by default the tiny random-weight model :mod:`sagestream_local.tiny_model` builds into
``.tiny-model/``, cached), the engine runs in a process group of its own, and :meth:`VllmEngine.start`
returns once its SageMaker route ``/ping`` answers 200. It serves vLLM's own SageMaker routes (``/ping``,
``/invocations``) and its OpenAI and Anthropic ones (``/v1/chat/completions``, ``/v1/messages``...), which
the engine tests call directly to compare with what comes through sagestream.

Environment variables read: ``VLLM_ARGS`` (extra ``vllm serve`` arguments, split as a shell would), and
what ``vllm`` itself reads; the engine's environment is this process's with vLLM's CPU settings, loopback
only, telemetry off and Hugging Face offline (nothing downloads weights).

Example::

    >>> with VllmEngine() as engine:  # doctest: +SKIP
    ...     print(engine.url, engine.model_name)
"""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv-vllm"
TINY_MODEL = ROOT / ".tiny-model"
TINY_MODEL_NAME = "sagestream-tiny"
START_TIMEOUT_S = 300.0
# The tiny model's engine: float32 as built, its whole context, no torch.compile warm-up (about 30 s of a
# 2-core start for a model that runs in microseconds), and a tool parser so that tool_choice required,
# named and auto are served (vLLM refuses tool_choice required without one; pythonic needs no special tokens).
# Compact JSON under guided decoding: a random model left free to pick whitespace spends every token on it.
TINY_ARGS = [
    "--structured-outputs-config",
    '{"backend": "xgrammar", "disable_any_whitespace": true}',
    "--dtype",
    "float32",
    "--max-model-len",
    "512",
    "--enforce-eager",
    "--enable-auto-tool-choice",
    "--tool-call-parser",
    "pythonic",
]
_DEAD_PROXY = "http://127.0.0.1:9"


class VllmEngine:
    """``vllm serve MODEL`` on 127.0.0.1 (a free port), in its own process group; ``stop()`` ends the group."""

    def __init__(self, model: Path | None = None, *, venv: Path = VENV, log: Path | None = None) -> None:
        self.venv = venv
        self.model = model
        self.model_name = TINY_MODEL_NAME if model is None else model.name
        self.log = log or Path(tempfile.mkstemp(prefix="vllm-", suffix=".log")[1])
        self.port = _free_port()
        self.start_s: float | None = None  # how long the engine took to answer /ping
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def installed(self) -> str | None:
        """None when the engine can be started; else why not (for a test run's failure or skip)."""
        if not (self.venv / "bin" / "vllm").exists():
            return f"vLLM is not installed in {self.venv}: `make {self.venv.name}/.installed` installs it"
        return None

    def build_model(self) -> Path:
        """The model folder: the one given, or the tiny model, built (once) by the engine's own Python."""
        if self.model is not None:
            return self.model
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "HF_HUB_OFFLINE": "1"}
        command = [str(self.venv / "bin" / "python"), "-m", "sagestream_local.tiny_model", str(TINY_MODEL)]
        subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL)
        return TINY_MODEL

    def start(self) -> VllmEngine:
        reason = self.installed()
        if reason:
            raise RuntimeError(reason)
        model = self.build_model()
        args = [*(TINY_ARGS if self.model is None else []), *shlex.split(os.environ.get("VLLM_ARGS", ""))]
        command = [str(self.venv / "bin" / "vllm"), "serve", str(model), "--host", "127.0.0.1"]
        command += ["--port", str(self.port), "--served-model-name", self.model_name, "--seed", "0", *args]
        begun = time.monotonic()
        with self.log.open("wb") as log:
            self._process = subprocess.Popen(
                command, env=_engine_env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        try:
            self._wait_for_ping(begun + START_TIMEOUT_S)
        except BaseException:
            self.stop()
            raise
        self.start_s = time.monotonic() - begun
        return self

    def _wait_for_ping(self, deadline: float) -> None:
        assert self._process is not None
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"vllm serve exited with {self._process.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.url + "/ping", timeout=2) as response:  # noqa: S310 (http, loopback)
                    if response.status == 200:
                        return
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(0.5)
        raise TimeoutError(f"vllm serve did not answer /ping within {START_TIMEOUT_S:g} s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        # The API server forks an engine core and workers: the whole group goes, not only the process started.
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    def __enter__(self) -> VllmEngine:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def _engine_env() -> dict[str, str]:
    env = dict(os.environ)
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        env[name] = env[name.lower()] = _DEAD_PROXY  # loopback only: anything reaching out meets a dead port
    env.update(
        NO_PROXY="127.0.0.1,localhost",
        no_proxy="127.0.0.1,localhost",
        VLLM_TARGET_DEVICE="cpu",
        VLLM_HOST_IP="127.0.0.1",  # its engine core's sockets too, not the machine's first address
        VLLM_CPU_KVCACHE_SPACE=env.get("VLLM_CPU_KVCACHE_SPACE", "1"),  # GiB: the default takes 4
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
    )
    return env


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
