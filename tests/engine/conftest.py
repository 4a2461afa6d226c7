"""The real-engine fixtures: one ``vllm serve`` (CPU, the tiny model) for the whole session, the SageMaker
front over it, and the local stack calling that front with ``UPSTREAM_FORMAT=openai``.

Where vLLM is not installed the suite skips with the reason, except in CI (``CI`` set), where it fails with
it: ``make test`` installs vLLM first, so a CI run without it has lost the suite, not chosen to leave it out.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest

from sagestream_local.container_front import ContainerFront
from sagestream_local.stack import LocalStack
from sagestream_local.vllm_engine import VllmEngine
from tests.conftest import PYTHONPATH

ENDPOINT_NAME = "vllm-tiny"


@pytest.fixture(scope="session")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmEngine]:
    """The engine, started once; the time it took to answer /ping is printed (``-s``) and kept on it."""
    vllm = VllmEngine(log=tmp_path_factory.mktemp("vllm") / "serve.log")
    reason = vllm.installed()
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"the real-engine suite cannot run in CI: {reason}", pytrace=False)
        pytest.skip(reason)
    begun = time.monotonic()
    try:
        vllm.start()
    except (RuntimeError, TimeoutError) as exc:
        pytest.fail(f"vllm serve did not start: {exc}", pytrace=False)
    took = time.monotonic() - begun
    print(f"\nvllm serve answered /ping {vllm.start_s:.1f} s after its start ({took:.1f} s with the model build)")
    yield vllm
    vllm.stop()


@pytest.fixture(scope="session")
def front(engine: VllmEngine) -> Iterator[ContainerFront]:
    """SageMaker Runtime over the engine's /invocations."""
    with ContainerFront(engine.url) as running:
        yield running


def engine_env(front: ContainerFront, engine: VllmEngine) -> dict[str, str]:
    """What a local stack needs to call the front as its SageMaker endpoint, with stand-in credentials."""
    return {
        "PYTHONPATH": PYTHONPATH,
        "AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME": front.url,
        "SAGEMAKER_ENDPOINT_NAME": ENDPOINT_NAME,
        "UPSTREAM_FORMAT": "openai",
        "MODEL_ID": engine.model_name,
        "UPSTREAM_MAX_ATTEMPTS": "1",
        "AWS_ACCESS_KEY_ID": "AKIASAGESTREAMLOCAL0",
        "AWS_SECRET_ACCESS_KEY": "sagestream-local-not-a-secret",
        "AWS_REGION": "us-east-1",
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        "AWS_EC2_METADATA_DISABLED": "true",
        "NO_PROXY": "127.0.0.1,localhost",
    }


@pytest.fixture(scope="session")
def engine_stack(front: ContainerFront, engine: VllmEngine) -> Iterator[LocalStack]:
    """The local stack (Function URL, runtime processes) calling the front as its SageMaker endpoint."""
    env = engine_env(front, engine)
    with LocalStack(port=0, concurrency=2, max_concurrency=16, timeout_s=120.0, env=env) as stack:
        yield stack


@pytest.fixture(autouse=True)
def _loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every client here is given a loopback URL; anything that would go elsewhere meets a dead port."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")
        monkeypatch.setenv(name.lower(), "http://127.0.0.1:9")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
