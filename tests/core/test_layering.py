"""Which part of rllib_fast may import which, read from the source with ``ast``.

The units are the top-level packages and modules of ``rllib_fast/`` (``core``,
``envs``, ``tune``, ``export``, ``cli``, ...) and, inside ``algorithms/``, each
family folder or shared module (``algorithms.ppo``, ``algorithms.onpolicy``,
``algorithms.actor_critic``, ...). Every import counts, also the ones inside
functions: an import deferred to call time is still a dependency.

- ``core/`` is what every algorithm builds on: it imports no algorithm, no
  Tune tooling, no command line and not the public ``rllib_fast.export`` module
  (policy export itself is ``core/export.py``, which the checkpoints use).
- An algorithm family imports ``core``, ``envs``, the shared layers of
  ``algorithms/`` (``SHARED``) and only the families it is built on
  (``BUILT_ON``, each with its reason); a shared layer imports no family.
- No import cycle among rllib_fast's modules at module level, and none that
  crosses a unit even through function-level imports.

Importing the package root ``rllib_fast`` (its ``__version__``) is not counted:
Python runs it before any module of the package anyway.
"""
import ast
from pathlib import Path
from typing import Dict, Iterator, List, Set

PACKAGE = Path(__file__).resolve().parents[2] / "rllib_fast"
ROOT = "rllib_fast"

#: what each top-level unit may import besides itself (``algorithms``: every family and shared layer)
ALLOWED: Dict[str, Set[str]] = {
    "core": {"envs"},
    "envs": {"core"},
    "algorithms": {"core", "envs"},
    "tune": {"core", "envs", "algorithms"},
    "export": {"core"},
    "presets": set(),
    "demo": {"core", "envs", "algorithms", "tune"},
    "cli": {"core", "envs", "algorithms", "tune", "export", "demo", "presets"},
}

#: the layers of algorithms/ that several families share (a shared layer imports no family)
SHARED = {
    "algorithms.onpolicy",         # the batched on-policy loop, its update protocol, batch, config
    "algorithms.actor_critic",     # the on-policy actor-critic RLModule
    "algorithms.recurrent_module",  # its recurrent variant
    "algorithms.asymmetric",       # the asymmetric critic's states (on- and off-policy)
    "algorithms.extensions",       # FastPPO's components (symmetry, RND) as parts others can hold
    "algorithms.population",       # populations: PBT, stacked members, the members' policy module
}

#: families built on other families' update rules and configs
BUILT_ON = {
    "algorithms.appo": {"algorithms.ppo", "algorithms.a2c"},   # asynchronous learners run FastPPO's/FastA2C's update
    "algorithms.hts": {"algorithms.ppo", "algorithms.a2c"},    # HTS-RL's rounds over PPO's and A2C's update
    "algorithms.pop_ppo": {"algorithms.ppo"},                  # FastPPO's loss, lr rule and update per member
    "algorithms.distillation": {"algorithms.ppo"},             # a recurrent student acts as recurrent FastPPO does
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES: Dict[str, Path] = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _known(name: str) -> str:
    """The rllib_fast module ``name`` is or lies in ('' outside rllib_fast)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name


def _run_at_import(node: ast.AST) -> Iterator[ast.AST]:
    """The nodes executed when the module is imported: everything but function bodies."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        yield child
        yield from _run_at_import(child)


def _imports(module: str, module_level: bool) -> Iterator[str]:
    """The rllib_fast modules ``module`` imports (only the ones run at import time
    when ``module_level``: not inside functions or classes)."""
    path = MODULES[module]
    tree = ast.parse(path.read_text())
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in (_run_at_import(tree) if module_level else ast.walk(tree)):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            # `from pkg import name`: the submodule pkg.name where there is one
            targets = [f"{source}.{a.name}" if f"{source}.{a.name}" in MODULES else source for a in node.names]
        else:
            continue
        for target in targets:
            known = _known(target)
            if known and known != ROOT and known != module:
                yield known


def _graph(module_level: bool) -> Dict[str, Set[str]]:
    return {m: set(_imports(m, module_level)) for m in MODULES}


def _unit(module: str) -> str:
    """``core``, ``envs``, ``export``, ... or ``algorithms.<family or shared layer>``
    (``algorithms`` alone: the registry, ``algorithms/__init__.py``)."""
    parts = module.split(".")[1:] or [ROOT]
    if parts[0] == "algorithms" and len(parts) > 1:
        return f"algorithms.{parts[1]}"
    return parts[0]


def _may_import(unit: str, other: str) -> bool:
    if unit == other:
        return True
    top, other_top = unit.partition(".")[0], other.partition(".")[0]
    if top != "algorithms" or other_top != "algorithms":
        return other_top in ALLOWED[top]
    if unit == "algorithms":           # the registry imports every family
        return True
    if other == "algorithms":          # nothing in a family imports the registry
        return False
    if unit in SHARED:
        return other in SHARED
    return other in SHARED or other in BUILT_ON.get(unit, set())


def _cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    found: List[List[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            nxt = next(edges, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    component.append(m)
                    if m == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_every_unit_has_a_rule():
    tops = {_unit(m).partition(".")[0] for m in MODULES if m != ROOT}
    assert tops <= set(ALLOWED), sorted(tops - set(ALLOWED))
    stale = (SHARED | set(BUILT_ON) | set().union(*BUILT_ON.values())) - {_unit(m) for m in MODULES}
    assert not stale, f"layer names without a module: {sorted(stale)}"


def test_units_import_only_what_their_layer_allows():
    offenders = sorted(f"{m} imports {t}" for m, targets in _graph(module_level=False).items() if m != ROOT
                       for t in targets if not _may_import(_unit(m), _unit(t)))
    assert not offenders, "\n".join(offenders)


def test_core_imports_no_algorithm_tune_cli_or_export():
    """The rule the table states for core, spelled out (the failure names the import)."""
    forbidden = ("rllib_fast.algorithms", "rllib_fast.tune", "rllib_fast.cli", "rllib_fast.export",
                 "rllib_fast.demo", "rllib_fast.presets")
    offenders = sorted(f"{m} imports {t}" for m, targets in _graph(module_level=False).items()
                       if m != ROOT and _unit(m) == "core" for t in targets if t.startswith(forbidden))
    assert not offenders, offenders


def test_no_import_cycle_at_module_level():
    cycles = _cycles(_graph(module_level=True))
    assert not cycles, cycles


def test_no_import_cycle_crosses_a_unit():
    """Function-level imports included, a cycle stays inside one unit (e.g. a config
    naming its algorithm class, which imports the config)."""
    crossing = [c for c in _cycles(_graph(module_level=False)) if len({_unit(m) for m in c}) > 1]
    assert not crossing, crossing


def test_the_rules_catch_what_they_forbid():
    """The checker itself: a cycle is found, and the forbidden directions are refused."""
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert not _may_import("core", "algorithms.ppo")
    assert not _may_import("core", "export")
    assert not _may_import("core", "tune")
    assert not _may_import("algorithms.dqn", "algorithms.ppo")
    assert not _may_import("algorithms.onpolicy", "algorithms.ppo")
    assert _may_import("algorithms.hts", "algorithms.a2c")
    assert _may_import("algorithms.ppo", "algorithms.onpolicy")
    imports = set(_imports("rllib_fast.algorithms.ppo.loss", module_level=True))
    assert "rllib_fast.algorithms.onpolicy.reductions" in imports
