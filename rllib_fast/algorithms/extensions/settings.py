"""The shape check every extension's config dict shares (``symmetry``, ``rnd``)."""
from __future__ import annotations

from typing import Any, Mapping, Optional


def dict_key_error(key: str, value: Any, allowed: Mapping[str, Any], owner: str) -> Optional[str]:
    """Why ``value`` is not a dict of ``allowed``'s keys (one line), or None."""
    if not isinstance(value, Mapping):
        return f"{owner}: `{key}` = {value!r}; allowed: None or a dict with keys {sorted(allowed)}"
    unknown = sorted(set(value) - set(allowed))
    if unknown:
        return f"{owner}: `{key}.{unknown[0]}` is not a key; allowed: {', '.join(sorted(allowed))}"
    return None
