"""User functions named in configs: ``"package.module:function"`` strings (so
they survive YAML, Tune's config copies and checkpoints) or callables."""
from __future__ import annotations

import importlib
from typing import Any, Callable


def resolve_callable(spec: Any, key: str) -> Callable:
    """The function ``spec`` names (``"module:function"`` or ``"module.function"``),
    or ``spec`` itself when it is callable; one-line ValueError naming ``key`` otherwise."""
    if callable(spec):
        return spec
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"`{key}` = {spec!r}; allowed: a callable or an importable 'module:function' string")
    mod, sep, attr = spec.partition(":")
    if not sep:
        mod, _, attr = spec.rpartition(".")
    try:
        fn = getattr(importlib.import_module(mod), attr)
    except (ImportError, AttributeError, ValueError) as err:
        raise ValueError(f"`{key}` = {spec!r} cannot be imported ({type(err).__name__}: {err}); allowed: a "
                         "callable or an importable 'module:function' string") from None
    if not callable(fn):
        raise ValueError(f"`{key}` = {spec!r} names a {type(fn).__name__}, not a function")
    return fn
