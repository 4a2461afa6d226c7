from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from sagestream_local.function_url import FunctionURL
from sagestream_local.runtime_api import Pool

ROOT = Path(__file__).resolve().parent.parent
# Runtime processes import the test handlers as `tests.handlers` and the package from src/.
PYTHONPATH = os.pathsep.join([str(ROOT), str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)


@pytest.fixture
def local_function() -> Iterator[Callable[..., FunctionURL]]:
    """Start a pool of real runtime processes behind a local Function URL: ``local_function(handler, ...)``."""
    with ExitStack() as stack:

        def start(
            handler: str, size: int = 2, timeout_s: float = 30.0, env: dict[str, str] | None = None
        ) -> FunctionURL:
            pool = Pool(
                size=size,
                timeout_s=timeout_s,
                env={"_HANDLER": handler, "PYTHONPATH": PYTHONPATH, **(env or {})},
                command=[sys.executable, "-m", "sagestream.lambda_runtime"],
            )
            stack.enter_context(pool)
            return stack.enter_context(FunctionURL(pool, port=0))

        yield start


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """The relay, fault and telemetry suites run twice: one invocation per runtime process, and many."""
    from tests.e2e.conftest import DEFAULT_MAX_CONCURRENCY, MANY_STREAM_SUITES, MANY_STREAMS

    suite = metafunc.module.__name__.rpartition(".")[2]
    if "max_concurrency" in metafunc.fixturenames and suite in MANY_STREAM_SUITES:
        counts = sorted({DEFAULT_MAX_CONCURRENCY, MANY_STREAMS})
        metafunc.parametrize("max_concurrency", counts, indirect=True, scope="module", ids=[f"K{k}" for k in counts])
