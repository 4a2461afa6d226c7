"""The runnable examples in every module's docstrings run and show what they claim."""

from __future__ import annotations

import doctest
import importlib
import pkgutil
from pathlib import Path
from types import ModuleType

import pytest

import sagestream
from tests.fakes import load_app


def _module(name: str) -> ModuleType:
    # app builds its handler at import, from the environment: imported the way the in-process tests do.
    return load_app() if name == "app" else importlib.import_module(f"sagestream.{name}")


# Modules whose only examples need a live Runtime API; the protocol tests run them for real.
SOCKET_ONLY = {"sagestream.runtime": "tests/protocol/test_runtime.py"}

MODULES = [_module(m.name) for m in pkgutil.iter_modules(sagestream.__path__)]


def test_every_module_is_here() -> None:
    assert {m.__name__ for m in MODULES} >= {
        "sagestream.app",
        "sagestream.relay",
        "sagestream.record",
        "sagestream.telemetry",
        "sagestream.upstream",
    }


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_docstring_examples_hold(module: ModuleType) -> None:
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
    # Every module shows how it is used; the ones whose examples need AWS or a socket mark them +SKIP,
    # and each has at least one that runs.
    if module.__name__ not in SOCKET_ONLY:
        assert result.attempted > 0, f"{module.__name__} has no runnable example"


def test_every_module_has_its_own_unit_test_file() -> None:
    here = Path(__file__).parent
    missing = [m.__name__ for m in MODULES if not (here / f"test_{m.__name__.rsplit('.', 1)[1]}.py").exists()]
    assert missing == []
