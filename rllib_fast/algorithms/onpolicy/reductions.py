"""Reductions over a batch's valid transitions, shared by the on-policy losses.

``masked_mean`` is every mean of FastPPO's, FastA2C's and the distillation
losses; ``standardize`` is advantage standardisation. Both take an optional
``dim``, so a population's ``[K, B]`` batch (PopPPO) reduces per member with
the same code that reduces FastPPO's ``[B]`` batch.
"""
from __future__ import annotations

import torch


def masked_mean(x: torch.Tensor, w: torch.Tensor | None, denom: torch.Tensor | None,
                dim: int | None = None) -> torch.Tensor:
    """Mean of ``x`` over the transitions ``w`` marks valid, as ``sum / denom``
    (plain mean when neither weights nor denominator are given). ``dim``: reduce
    only that axis (a population's ``[K, B]`` batch: one mean per member, ``denom``
    then ``[K]``); None: over everything."""
    if w is None and denom is None:
        return x.mean() if dim is None else x.mean(dim)
    x = x if w is None else x * w
    return (x.sum() if dim is None else x.sum(dim)) / denom


def standardize(a: torch.Tensor, w: torch.Tensor | None, reduce=None, unbiased: bool = False,
                dim: int | None = None) -> torch.Tensor:
    """Standardise advantages with (optionally masked) statistics; ``reduce``
    sums the moments over data-parallel learners so all use the global ones;
    ``unbiased``: Bessel's n / (n - 1) on the variance (rsl_rl's whole-batch form);
    ``dim``: moments along that axis only (each member of a ``[K, B]`` batch its own)."""
    w = torch.ones_like(a) if w is None else w
    total = (lambda x: x.sum()) if dim is None else (lambda x: x.sum(dim))  # noqa: E731
    m = torch.stack([total(w), total(a * w), total(a * a * w)])
    if reduce is not None:
        reduce(m)
    n = m[0].clamp_min(1.0)
    mean = m[1] / n
    var = (m[2] / n - mean ** 2).clamp_min(0.0)
    if unbiased:
        var = var * n / (n - 1.0).clamp_min(1.0)
    std = var.sqrt()
    if dim is not None:
        mean, std = mean.unsqueeze(dim), std.unsqueeze(dim)
    return (a - mean) / (std + 1e-8)
