"""The layout's rules that no import-time error would catch: no import cycle in src/, the app blind to protocols.

Both read the sources' import statements (``if TYPE_CHECKING:`` ones included: a cycle that only the type
checker sees is still two modules that cannot be read apart).
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"


def _modules() -> dict[str, Path]:
    found = {}
    for path in SRC.rglob("*.py"):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules ``name`` imports (``from pkg import module`` names the module, not the package)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    named: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                above = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*above, base] if base else above)
            named.update(f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names)
        elif isinstance(node, ast.Import):
            named.update(a.name for a in node.names)
    return {m for m in named if m in modules and m != name}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm, iteratively).

    >>> cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}})
    [['a', 'b']]
    >>> cycles({"a": {"b"}, "b": set()})
    []
    """
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return found


def test_no_module_in_src_takes_part_in_an_import_cycle() -> None:
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    assert len(graph) > 40 and graph["sagestream.app"], "the walk found the modules and their imports"
    assert cycles(graph) == []


# The app and the modules it is made of: the walk (app), the request's preparation, the answer, its own routes.
APP_PARTS = ("sagestream.app", "sagestream.prepare", "sagestream.answer", "sagestream.own_routes", "sagestream.call")


def test_the_app_imports_no_protocol_or_dialect_module_by_name() -> None:
    modules = _modules()
    named = set().union(*(_imports(part, modules[part], modules) for part in APP_PARTS))
    assert "sagestream.protocols" in named and "sagestream.dialects" in named  # the registries: allowed
    by_name = sorted(m for m in named if m.startswith(("sagestream.protocols.", "sagestream.dialects.")))
    assert by_name == []


def _sizes(path: Path) -> tuple[int, dict[str, int]]:
    """A module's lines, and each class's in it."""
    tree = ast.parse(path.read_text())
    classes = {
        n.name: n.end_lineno - n.lineno + 1 for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.end_lineno
    }
    return len(path.read_text().splitlines()), classes


def test_no_class_of_the_function_is_over_250_lines() -> None:
    over = {
        f"{name}.{cls}": size
        for name, path in _modules().items()
        if name.startswith("sagestream.")
        for cls, size in _sizes(path)[1].items()
        if size > 250
    }
    assert over == {}
    assert _sizes(_modules()["sagestream.app"])[1]["App"] > 50, "the sizes are read"


def test_each_module_of_the_lambda_runtime_is_at_most_300_lines() -> None:
    sizes = {name: _sizes(path)[0] for name, path in _modules().items() if name.startswith("sagestream.lambda_runtime")}
    assert len(sizes) >= 5
    assert {name: n for name, n in sizes.items() if n > 300} == {}


def _functions(path: Path) -> dict[str, int]:
    tree = ast.parse(path.read_text())
    return {
        n.name: n.end_lineno - n.lineno + 1
        for n in ast.walk(tree)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno
    }


def test_no_module_of_the_function_is_over_600_lines_and_no_function_over_100() -> None:
    modules = {name: path for name, path in _modules().items() if name.startswith("sagestream.")}
    long_modules = {name: n for name, path in modules.items() if (n := _sizes(path)[0]) > 600}
    long_functions = {
        f"{name}.{function}": n for name, path in modules.items() for function, n in _functions(path).items() if n > 100
    }
    assert long_modules == {} and long_functions == {}
    assert max(_sizes(path)[0] for path in modules.values()) > 300, "the sizes are read"
