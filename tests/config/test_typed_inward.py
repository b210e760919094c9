"""Validated config travels inward typed: every function that takes a config says which model it is.

The config is checked once, at the edge (rlhw/config); a function with a bare ``config`` parameter, or a
``getattr(config, "x", default)``, re-guesses what that check already settled, and hides which section
the function really reads.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("rlhw", "drivers")


def _sources():
    for package in PACKAGES:
        yield from sorted((ROOT / package).rglob("*.py"))


def _config_params(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            for arg in (*a.posonlyargs, *a.args, *a.kwonlyargs):
                if arg.arg == "config" or arg.arg.endswith("_config"):
                    yield node, arg


def test_every_config_parameter_is_annotated_with_its_model():
    bare = [
        f"{p.relative_to(ROOT)}:{node.lineno} {node.name}({arg.arg})"
        for p in _sources()
        for node, arg in _config_params(ast.parse(p.read_text()))
        if arg.annotation is None
    ]
    assert bare == [], "annotate these with Config or its section (EnvConfig, SacConfig, ...):\n" + "\n".join(bare)


def _getattr_on_config(tree: ast.AST):
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr")
            and node.args
            and "config" in ast.unparse(node.args[0]).lower()
        ):
            yield node


def test_validated_config_is_read_directly_not_probed():
    probes = [
        f"{p.relative_to(ROOT)}:{n.lineno} {ast.unparse(n)}"
        for p in _sources()
        for n in _getattr_on_config(ast.parse(p.read_text()))
    ]
    assert probes == [], "read these fields directly (the model declares them):\n" + "\n".join(probes)


@pytest.mark.parametrize(
    "source, found",
    [
        ("def f(config): pass", 1),
        ("def f(config: Config): pass", 0),
        ("def f(env_config, x): pass", 1),
    ],
)
def test_the_scan_sees_a_bare_config_parameter(source, found):
    assert sum(arg.annotation is None for _, arg in _config_params(ast.parse(source))) == found
