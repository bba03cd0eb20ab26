"""Declarative hyperparameter specs: defaults, types, ranges, allowed values.

Each algorithm config declares its own hyperparameters once as :class:`Param`
entries, and its own defaults of inherited keys with :func:`with_defaults`.
From that one table we get the defaults (top-level config attributes, so Tune,
PBT and Optuna see and mutate them), ``.training(key=...)`` support,
one-line validation errors that name the key and what is allowed, the list of
params MLflow records, and which keys may change live under PBT.
"""
from __future__ import annotations

import copy
import difflib
import math
import numbers
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Dict, Iterable, Mapping, Optional, Sequence, Tuple


@dataclass(frozen=True)
class Param:
    """One hyperparameter.

    ``types``: accepted Python types (ints are accepted where floats are).
    ``low``/``high``: inclusive bounds unless ``low_open``/``high_open``.
    ``choices``: the allowed values (for strings/enums).
    ``optional``: None is allowed (means "off").
    ``live``: may change between iterations without rebuilding the algorithm
    (a restore under a PBT-mutated config applies it in place).
    ``check``: extra predicate with its description, e.g. (``is_pos_list``, "a list of positive ints").
    """

    default: Any
    doc: str
    types: Tuple[type, ...] = (float,)
    low: Optional[float] = None
    high: Optional[float] = None
    low_open: bool = False
    high_open: bool = False
    choices: Optional[Sequence[Any]] = None
    optional: bool = False
    live: bool = False
    check: Optional[Tuple[Callable[[Any], bool], str]] = field(default=None)

    def allowed(self) -> str:
        """Human description of the allowed values, for error messages."""
        if self.choices is not None:
            text = "one of " + ", ".join(repr(c) for c in self.choices)
        elif self.check is not None:
            text = self.check[1]
        else:
            names = "/".join(t.__name__ for t in self.types)
            lo = "" if self.low is None else ("(" if self.low_open else "[") + f"{self.low}"
            hi = "" if self.high is None else f"{self.high}" + (")" if self.high_open else "]")
            if lo or hi:
                lo = lo or "(-inf"
                hi = hi or "inf)"
                text = f"{names} in {lo}, {hi}"
            else:
                text = names
        return text + (" or None" if self.optional else "")

    def error(self, key: str, value: Any) -> Optional[str]:
        """Why ``value`` is not allowed for ``key``, or None if it is."""
        if value is None:
            return None if self.optional else f"`{key}` = None is not allowed; allowed: {self.allowed()}"
        if self.choices is not None:
            return None if value in self.choices else f"`{key}` = {value!r} is not allowed; allowed: {self.allowed()}"
        if not _type_ok(value, self.types):
            return (f"`{key}` = {value!r} has type {type(value).__name__}; allowed: {self.allowed()}")
        if self.check is not None:
            try:
                ok = bool(self.check[0](value))
            except Exception:  # e.g. a YAML '1e-6' read as a string inside a list of numbers
                ok = False
            if not ok:
                return f"`{key}` = {value!r} is not allowed; allowed: {self.allowed()}"
        if isinstance(value, numbers.Real) and not isinstance(value, bool):
            # NaN passes every comparison below and inf every open upper bound: neither
            # is a hyperparameter (a run would fail at build or at its first update)
            if not math.isfinite(value):
                return f"`{key}` = {value!r} is not a finite number; allowed: {self.allowed()}"
            if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
                return f"`{key}` = {value!r} is out of range; allowed: {self.allowed()}"
            if self.high is not None and (value > self.high or (self.high_open and value == self.high)):
                return f"`{key}` = {value!r} is out of range; allowed: {self.allowed()}"
        return None


def _type_ok(value: Any, types: Tuple[type, ...]) -> bool:
    if isinstance(value, bool):
        return bool in types
    if float in types and isinstance(value, numbers.Real):
        return True
    if int in types and isinstance(value, numbers.Integral):
        return True
    return isinstance(value, tuple(t for t in types if t not in (int, float)))


def positive_int_list(value: Any) -> bool:
    return (isinstance(value, (list, tuple)) and len(value) > 0
            and all(isinstance(v, numbers.Integral) and not isinstance(v, bool) and v > 0 for v in value))


def real_pair(value: Any) -> bool:
    """Two finite real numbers (bounds, betas): YAML reads `1e-6` without a dot as a string."""
    return (isinstance(value, (list, tuple)) and len(value) == 2
            and all(isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v) for v in value))


POSITIVE_INT_LIST = (positive_int_list, "a non-empty list of positive ints")
#: ``hidden_sizes`` that may be 'auto' (see :func:`rllib_fast.core.nets.auto_hidden_sizes`).
AUTO_OR_INT_LIST = (lambda v: v == "auto" or positive_int_list(v), "'auto' or a non-empty list of positive ints")


def with_defaults(*bases: Any, **defaults: Any) -> Dict[str, Param]:
    """Entries for a config's ``HYPERPARAMETERS`` that keep the inherited
    ``Param`` of each key (type, range, doc, live) and change only its default.
    ``bases``: where the config gets the keys, first wins: config classes, or
    dicts of ``Param`` (a key set several configs include, such as HTS-RL's).

    Why: an algorithm's own defaults (FastA2C's lr 7e-4, 16 envs) must live in
    the spec, not in assignments in ``__init__``, or ``help()``, the MLflow
    params and validation would describe the base class's defaults instead.
    """
    spec: Dict[str, Param] = {}
    for base in reversed(bases):
        spec.update(base if isinstance(base, dict) else base.hyperparameter_spec())
    unknown = [k for k in defaults if k not in spec]
    if unknown:
        names = ", ".join(getattr(b, "__name__", "a key set") for b in bases)
        raise KeyError(f"with_defaults: {names} declare(s) no {', '.join(map(repr, unknown))}")
    return {k: replace(spec[k], default=v) for k, v in defaults.items()}


def apply_defaults(obj: Any, spec: Dict[str, Param]) -> None:
    """Set every declared default as a top-level attribute of ``obj``."""
    for key, p in spec.items():
        setattr(obj, key, copy.deepcopy(p.default))


def space_probes(space: Any) -> Tuple[list, str]:
    """(values that stand for ``space`` in validation, its description).

    Why: a sweep's search spaces and PBT mutations are sampled inside the trials,
    so an out-of-range bound (``gamma: uniform(1.5, 2)``) failed every trial with a
    traceback. Validation checks these values instead: each choice of a list or
    categorical, and for a numeric range the points 1% inside each end (on a log
    scale for log samplers; an open bound at an end is fine, a range reaching
    more than 1% beyond the allowed one is not), or a few seeded draws where a
    distribution has no bounds. A callable has nothing to probe: ``([], ...)``.
    """
    if isinstance(space, (list, tuple)):
        return list(space), repr(list(space))
    if isinstance(space, Mapping) and set(space) == {"grid_search"}:
        return list(space["grid_search"]), f"grid_search {list(space['grid_search'])!r}"
    from ray.tune.search.sample import Categorical, Domain, Float, Integer

    if isinstance(space, Categorical):
        return list(space.categories), f"choice {list(space.categories)!r}"
    if isinstance(space, (Float, Integer)):
        lo, hi = space.lower, space.upper
        sampler = space.get_sampler()
        inner = getattr(sampler, "sampler", sampler)          # quantized samplers wrap another
        log = "LogUniform" in type(inner).__name__
        if lo is not None and hi is not None and math.isfinite(lo) and math.isfinite(hi):
            kind = ("log" if log else "") + ("randint" if isinstance(space, Integer) else "uniform")
            if isinstance(space, Integer):
                return [int(lo), int(hi) - 1], f"{kind}({lo}, {hi})"   # Tune's randint excludes its upper end
            if log and lo > 0:
                a, b = math.log(lo), math.log(hi)
                return [math.exp(a + 0.01 * (b - a)), math.exp(b - 0.01 * (b - a))], f"{kind}({lo}, {hi})"
            return [lo + 0.01 * (hi - lo), hi - 0.01 * (hi - lo)], f"{kind}({lo}, {hi})"
    if isinstance(space, Domain):
        import numpy as np

        draws = space.sample(size=8, random_state=np.random.RandomState(0))
        return list(draws), f"{type(space).__name__} with {type(space.get_sampler()).__name__.strip('_')} sampler"
    return [], repr(space)


def space_error(key: str, param: "Param", space: Any) -> Optional[str]:
    """Why the search space or mutation ``space`` of ``key`` would produce values
    ``param`` rejects, or None (see :func:`space_probes`)."""
    values, text = space_probes(space)
    for v in values:
        err = param.error(key, v.item() if hasattr(v, "item") else v)
        if err:
            return f"{err} (a value of `{key}`'s search space {text})"
    return None


def learning_starts_error(owner: str, learning_starts: int, buffer_size: int, rows: int,
                          shown: Optional[str] = None) -> Optional[str]:
    """Why a replay run would never learn, or None. Updates wait until the replay
    holds ``learning_starts`` transitions, and a replay written ``rows`` at a time
    holds at most ``buffer_size`` rounded down to a multiple of ``rows``: a larger
    ``learning_starts`` validated, then trained nothing, silently."""
    holds = (int(buffer_size) // max(1, rows)) * max(1, rows)
    if learning_starts <= holds:
        return None
    return (f"{owner}: `learning_starts` = {shown or learning_starts} is never reached: the replay holds at most "
            f"{holds} transitions (`buffer_size` = {buffer_size} in writes of {rows}); allowed: learning_starts "
            f"<= {holds} or a larger buffer_size")


def unknown_key_message(owner: str, key: str, known: Iterable[str]) -> str:
    known = sorted(known)
    close = difflib.get_close_matches(key, known, n=3, cutoff=0.6)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    return f"{owner}: unknown config key {key!r}.{hint} (see `{owner}.help()` for the allowed keys)"
