"""Number formats and markdown tables for the reports of the GPU kit (``gpu.py``)
and the GPU-readiness counts (``gpu_proxy.py``)."""
from __future__ import annotations

import math
from typing import Any, Optional, Sequence


def not_a_number(x: Any) -> bool:
    """True for NaN and for anything that is not a number (a missing value)."""
    try:
        return math.isnan(float(x))
    except (TypeError, ValueError):
        return True


def fmt_num(x: Any, nd: int = 1) -> str:
    if x is None or not_a_number(x):
        return "–"
    return f"{x:,.{nd}f}"


def _short(x: Any, tenths_below: float) -> str:
    """1.23M / 45k / 4.5k (one decimal for thousands below ``tenths_below``) / 123."""
    if x is None or not_a_number(x):
        return "–"
    x = float(x)
    if x >= 1e6:
        return f"{x / 1e6:.2f}M"
    if x >= 1e3:
        return f"{x / 1e3:.1f}k" if x < tenths_below else f"{x / 1e3:.0f}k"
    return f"{x:.0f}"


def fmt_steps(x: Any) -> str:
    return _short(x, tenths_below=1e3)


def fmt_sps(x: Any) -> str:
    return _short(x, tenths_below=1e4)


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], align: Optional[str] = None) -> str:
    align = align or ("l" + "r" * (len(headers) - 1))
    sep = ["---:" if a == "r" else ":---" if a == "l" else ":---:" for a in align]
    lines = ["| " + " | ".join(str(h) for h in headers) + " |", "| " + " | ".join(sep) + " |"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
    if a is None or b is None or not_a_number(a) or not_a_number(b) or b == 0:
        return None
    return a / b


def fmt_ratio(x: Optional[float]) -> str:
    return "–" if x is None else f"{x:.2f}x"
