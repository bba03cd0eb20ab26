"""Every benchmark script names only what the shared benchmark modules define.

Why: the scripts run rarely (some only on a lent GPU), so a name moved between
``benchmarks/_harness.py`` and ``benchmarks/_report.py`` broke ``hts.py`` and
``sweep.py`` for a day unnoticed, and the GPU kit's HTS part with them. Reading
the scripts (no run) catches it in milliseconds.
"""
import ast
import importlib
import os
import sys

import pytest

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")
SCRIPTS = sorted(f for f in os.listdir(BENCH) if f.endswith(".py"))


@pytest.fixture(scope="module")
def shared_modules():
    sys.path.insert(0, BENCH)
    try:
        yield {name: importlib.import_module(name) for name in ("_harness", "_report")}
    finally:
        sys.path.remove(BENCH)


def _uses(tree: ast.AST):
    """(module, name) pairs: ``from _m import name`` and ``alias.name`` for ``import _m as alias``."""
    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("_"):
            for a in node.names:
                yield node.module, a.name
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("_"):
                    aliases[a.asname or a.name] = a.name
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            yield aliases[node.value.id], node.attr


@pytest.mark.parametrize("script", SCRIPTS)
def test_script_names_exist_in_the_shared_modules(script, shared_modules):
    with open(os.path.join(BENCH, script)) as f:
        tree = ast.parse(f.read(), script)
    missing = sorted({f"{m}.{n}" for m, n in _uses(tree)
                      if m in shared_modules and not hasattr(shared_modules[m], n)})
    assert not missing, f"benchmarks/{script} uses names its modules do not define: {missing}"
