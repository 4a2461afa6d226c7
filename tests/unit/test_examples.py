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
    return load_app() if name == "sagestream.app" else importlib.import_module(name)


# Every module of the package and of its subpackages (dialects, protocols), packages' faces included; not an
# entry point (``__main__``), which runs its program when imported.
MODULES = [
    _module(m.name)
    for m in pkgutil.walk_packages(sagestream.__path__, "sagestream.")
    if not m.name.endswith(".__main__")
]


def unit_test_file(module: str) -> Path:
    """Where a module's own tests are: the tree of ``src/sagestream`` mirrored under ``tests/unit``, each
    module's file named ``test_<module>.py`` beside its package's (``sagestream.dialects.tgi`` ->
    ``tests/unit/dialects/test_tgi.py``, the package ``sagestream.dialects`` -> ``tests/unit/test_dialects.py``).
    A private module (``_read``, ``_wire``) is its package's own helper and tested through it."""
    *folders, name = module.split(".")[1:]
    while name.startswith("_") and folders:
        *folders, name = folders
    return Path(__file__).parent.joinpath(*folders, f"test_{name}.py")


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
    assert result.attempted > 0, f"{module.__name__} has no runnable example"


def test_every_module_has_its_own_unit_test_file() -> None:
    missing = [m.__name__ for m in MODULES if not unit_test_file(m.__name__).exists()]
    assert missing == []


def test_every_test_folder_is_in_the_development_page_with_what_it_holds() -> None:
    root = Path(__file__).parents[2]
    page = (root / "docs" / "development.md").read_text("utf-8")
    # tests/artifacts holds what a run leaves behind (the browser test's screenshot; gitignored), no tests.
    folders = sorted(
        p.name
        for p in (root / "tests").iterdir()
        if p.is_dir() and not p.name.startswith("__") and p.name != "artifacts"
    )
    assert folders, "no test folders found"
    assert [f for f in folders if f"| `tests/{f}` |" not in page] == []


def test_the_invariants_the_docstrings_cite_are_in_the_architecture_page() -> None:
    page = (Path(__file__).parents[2] / "docs" / "architecture.md").read_text("utf-8")
    section = page.split("## Modules and invariants", 1)[1].split("\n## ", 1)[0]
    assert [n for n in range(1, 10) if f"\n{n}. **" not in section] == []
    # The repository has no DESIGN document: a docstring that cites one points nowhere.
    sources = {m.__name__: Path(m.__file__ or "").read_text("utf-8").lower() for m in MODULES}
    assert [name for name, text in sources.items() if "design invariant" in text] == []
