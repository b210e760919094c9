"""No package and no module of rlhw is on an import cycle; the config, hardware and placement layers, the SAC
package and the pipeline import one way.

Layers, bottom up: ``rlhw.placement`` (the placement grammar and planner, reading a cluster through its own
`rlhw.placement.view` protocols) <- ``rlhw.hardware`` (the hardware registry, its types, the live-node
inventory) <- ``rlhw.config`` (which validates ``hardware`` sections through the registry). Inside
``rlhw.rl.sac``: ``obs_layout`` <- ``networks`` <- ``algorithm``. ``rlhw.rl`` (what eval, the local runner and
the pipeline share: the env transport, the acting policy, the loop timer, the UTD rule) <- ``rlhw.rl.pipeline``.

Every import counts: at module level, inside a function (a lazy import is still a dependency, only hidden)
and under ``if TYPE_CHECKING:`` (a type-only import still couples the two). Importing ``a.b.c`` runs the
package ``a.b`` first, so at the package level an import of any module of a package is an edge to it.

A plugin that a core module must reach is named, not imported: a registry holds its module name and imports it on
first use (`rlhw.drivers_registry`, the tasks in `rlhw.robot.task_registry`, the demo sources in
`rlhw.rl.demos.DEMO_SOURCES`), and the plugin imports the core. That is the one way across a layer this file does
not count as an edge.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

import rlhw

ROOT = Path(rlhw.__file__).parent
#: The packages whose modules must sit on no import cycle, in the full module graph of rlhw.
CHECKED = ("rlhw.config", "rlhw.hardware", "rlhw.placement", "rlhw.rl.sac", "rlhw.schema", "rlhw.drivers_registry")


def _module_name(path: Path) -> str:
    parts = ("rlhw", *path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _package(module: str, packages: set[str]) -> str:
    """The package a module belongs to (a package's ``__init__`` belongs to the package itself)."""
    return module if module in packages else module.rsplit(".", 1)[0]


def _imports(source: str, here: str, is_package: bool, modules: set[str]) -> set[str]:
    """The rlhw modules that module ``here`` (its ``source``) imports anywhere in its body, relative imports
    resolved."""
    base = here if is_package else here.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = ".".join(base.split(".")[: len(base.split(".")) - node.level + 1])
                module = f"{anchor}.{node.module}" if node.module else anchor
            else:
                module = node.module or ""
            # ``from rlhw.config import cluster`` names a module; ``from rlhw.config.cluster import X`` names cluster
            names = [module, *(f"{module}.{a.name}" for a in node.names)]
        else:
            continue
        found |= {n for n in names if n in modules}
    return found - {here}


@functools.cache
def module_graph() -> dict[str, set[str]]:
    """Module -> the rlhw modules it imports (read once per session; callers do not change it)."""
    files = sorted(ROOT.rglob("*.py"))
    modules = {_module_name(p) for p in files}
    return {_module_name(p): _imports(p.read_text(), _module_name(p), p.name == "__init__.py", modules) for p in files}


def package_graph(modules: dict[str, set[str]]) -> dict[str, set[str]]:
    packages = {m for m in modules if (ROOT.parent / m.replace(".", "/") / "__init__.py").is_file()}
    graph: dict[str, set[str]] = {p: set() for p in packages}
    for src, targets in modules.items():
        a = _package(src, packages)
        graph[a] |= {_package(t, packages) for t in targets} - {a}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one member (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _in_checked(name: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in CHECKED)


def test_no_package_of_rlhw_is_on_an_import_cycle():
    """Anywhere in rlhw, not only through the layers below: a package importing a subpackage that imports it back
    (``rlhw.robot`` and its task plugins, ``rlhw.rl`` and its LeRobot reader were) is two layers in one."""
    found = cycles(package_graph(module_graph()))
    assert found == [], "package cycles: " + "; ".join(" <-> ".join(c) for c in found)


def test_no_module_of_rlhw_is_on_an_import_cycle():
    found = cycles(module_graph())
    assert found == [], "module cycles: " + "; ".join(" <-> ".join(c) for c in found)


def test_no_module_of_config_hardware_placement_or_sac_is_on_an_import_cycle():
    found = [c for c in cycles(module_graph()) if any(_in_checked(m) for m in c)]
    assert found == [], "import cycles through the checked layers: " + "; ".join(" <-> ".join(c) for c in found)


def test_the_config_hardware_and_placement_packages_depend_one_way():
    graph = package_graph(module_graph())
    found = [c for c in cycles(graph) if any(p in CHECKED for p in c)]
    assert found == [], "package cycles through the checked layers: " + "; ".join(" <-> ".join(c) for c in found)
    assert "rlhw.config" not in graph["rlhw.hardware"] and "rlhw.config" not in graph["rlhw.placement"]
    assert "rlhw.hardware" not in graph["rlhw.placement"]


def test_the_sac_package_reads_bottom_up_layout_networks_algorithm():
    graph = module_graph()
    assert graph["rlhw.rl.sac.obs_layout"] & {"rlhw.rl.sac.networks", "rlhw.rl.sac.algorithm"} == set()
    assert "rlhw.rl.sac.algorithm" not in graph["rlhw.rl.sac.networks"]
    assert not any(m.startswith("rlhw.rl.") and not m.startswith("rlhw.rl.sac") for m in graph["rlhw.rl.sac.algorithm"])


def test_the_pipeline_builds_on_the_rl_package_which_never_imports_it():
    """What eval, the local runner and the pipeline share lives in ``rlhw.rl``; nothing there reaches into
    ``rlhw.rl.pipeline``, not lazily (the runner is picked above both, in `rlhw.cli.trainer`), and no package
    cycle runs through the pipeline by way of a third package."""
    graph = package_graph(module_graph())
    assert "rlhw.rl" in graph["rlhw.rl.pipeline"]
    assert "rlhw.rl.pipeline" not in graph["rlhw.rl"], [
        m
        for m, targets in module_graph().items()
        if _package(m, set(graph)) == "rlhw.rl" and any(t.startswith("rlhw.rl.pipeline") for t in targets)
    ]
    found = [c for c in cycles(graph) if "rlhw.rl.pipeline" in c]
    assert found == [], "package cycles through rlhw.rl.pipeline: " + "; ".join(" <-> ".join(c) for c in found)


def test_the_config_reads_the_driver_registry_not_the_robot_package():
    graph = package_graph(module_graph())
    assert "rlhw.robot" not in graph["rlhw.config"]


@pytest.mark.parametrize(
    "graph, expected",
    [
        ({"a": {"b"}, "b": {"a"}}, [["a", "b"]]),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
        ({"a": {"b"}, "b": set()}, []),
    ],
)
def test_the_cycle_finder_finds_every_cycle_and_nothing_else(graph, expected):
    assert cycles(graph) == expected


def test_a_type_only_import_and_a_lazy_import_are_edges():
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from rlhw.config.cluster import ClusterConfig\n"
        "def f():\n"
        "    from . import grammar\n"
    )
    modules = {"rlhw.config.cluster", "rlhw.placement.grammar", "rlhw.placement.planner"}
    assert _imports(source, "rlhw.placement.planner", False, modules) == {
        "rlhw.config.cluster",
        "rlhw.placement.grammar",
    }
