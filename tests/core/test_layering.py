"""core/ is what every algorithm builds on; it must not depend on the Tune
tooling in rllib_fast/tune (sweeps, MLflow, reports), so importing an
algorithm never pulls that layer in."""
import ast
from pathlib import Path

import rllib_fast.core

CORE = Path(rllib_fast.core.__file__).parent


def _imported_modules(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against rllib_fast.core
                base = ["rllib_fast", "core"][:max(0, 2 - (node.level - 1))]
                yield ".".join(base + ([node.module] if node.module else []))
            else:
                yield node.module or ""


def test_core_does_not_import_rllib_fast_tune():
    offenders = [f"{p.name}: {m}" for p in sorted(CORE.glob("*.py")) for m in _imported_modules(p)
                 if m == "rllib_fast.tune" or m.startswith("rllib_fast.tune.")]
    assert not offenders, offenders
