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
import numbers
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Dict, Iterable, Optional, Sequence, Tuple


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
        if self.check is not None and not self.check[0](value):
            return f"`{key}` = {value!r} is not allowed; allowed: {self.allowed()}"
        if isinstance(value, numbers.Real) and not isinstance(value, bool):
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


def unknown_key_message(owner: str, key: str, known: Iterable[str]) -> str:
    known = sorted(known)
    close = difflib.get_close_matches(key, known, n=3, cutoff=0.6)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    return f"{owner}: unknown config key {key!r}.{hint} (see `{owner}.help()` for the allowed keys)"
