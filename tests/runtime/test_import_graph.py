"""The runtime layer's modules import one another one way only: no cycle, not even a lazy one.

Every import counts, at module level or inside a function (a lazy import is still a dependency,
only hidden), so a cycle cannot come back behind a function-level ``import``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import rlhw.runtime

PACKAGE = "rlhw.runtime"
ROOT = Path(rlhw.runtime.__file__).parent


def _module_name(path: Path) -> str:
    return PACKAGE if path.name == "__init__.py" else f"{PACKAGE}.{path.stem}"


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The rlhw.runtime modules that ``path`` imports anywhere in its body."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # ``from rlhw.runtime import payload`` names a module; ``from rlhw.runtime.x import y`` names x
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        else:
            continue
        found |= {n for n in names if n in modules}
    return found - {_module_name(path)}


def runtime_import_graph() -> dict[str, set[str]]:
    files = sorted(ROOT.glob("*.py"))
    modules = {_module_name(p) for p in files}
    return {_module_name(p): _imports(p, modules) - {PACKAGE} for p in files}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path that ends where it starts, or None."""
    state: dict[str, str] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)) is not None:
                return cycle
        state[node] = "done"
        stack.pop()
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)) is not None:
            return cycle
    return None


def test_runtime_modules_import_each_other_without_a_cycle():
    cycle = find_cycle(runtime_import_graph())
    assert cycle is None, "import cycle in rlhw.runtime: " + " -> ".join(cycle)


def test_worker_and_group_share_the_address_module_instead_of_each_other():
    graph = runtime_import_graph()
    assert "rlhw.runtime.worker" not in graph["rlhw.runtime.group"]
    assert "rlhw.runtime.address" in graph["rlhw.runtime.group"]
    assert "rlhw.runtime.group" in graph["rlhw.runtime.worker"]


def test_the_cycle_finder_finds_a_lazy_two_module_cycle():
    assert find_cycle({"a": {"b"}, "b": {"a"}}) == ["a", "b", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
