"""Pure functions for the critic target and the exploration noise, so each
can be tested on hand-built tensors.

All actions are in [-1, 1] policy units. ``discount`` is the per-transition
bootstrap factor the n-step aggregator computed, ``gamma^m * (1 - terminated)``
(m <= n steps actually taken), so no γ appears here: there is one source of γ.
"""
from __future__ import annotations

from typing import Optional

import torch

from ...core.qnets import categorical_projection


def smoothed_target_action(mu: torch.Tensor, std: float, clip: float,
                           generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """TD3's target-policy smoothing: clip(μ + clip(N(0, std), -c, c), -1, 1)."""
    noise = torch.randn(mu.shape, device=mu.device, dtype=mu.dtype, generator=generator) * std
    return (mu + noise.clamp(-clip, clip)).clamp(-1.0, 1.0)


def clipped_double_q_target(reward: torch.Tensor, discount: torch.Tensor, q1_next: torch.Tensor,
                            q2_next: torch.Tensor, entropy_bonus: Optional[torch.Tensor] = None) -> torch.Tensor:
    """y = Rⁿ + discount · (min(Q'_1, Q'_2)(s', ã) [- α log π(ã|s')])."""
    v = torch.minimum(q1_next, q2_next)
    if entropy_bonus is not None:
        v = v + entropy_bonus
    return reward + discount * v


def distributional_double_q_target(reward: torch.Tensor, discount: torch.Tensor, logits1: torch.Tensor,
                                   logits2: torch.Tensor, support: torch.Tensor) -> torch.Tensor:
    """PQL-D target distribution: per sample, project the target head whose
    expected value is lower (the distributional form of the clipped double-Q
    min). The reference code takes an element-wise min of the two projected
    distributions, which is not a distribution; we keep the pessimism and a
    proper target."""
    p1, p2 = torch.softmax(logits1, -1), torch.softmax(logits2, -1)
    pick1 = ((p1 * support).sum(-1) <= (p2 * support).sum(-1)).unsqueeze(-1)
    return categorical_projection(torch.where(pick1, p1, p2), reward, discount, support)


def mixed_sigma(num_envs: int, sigma_min: float, sigma_max: float, offset: int = 0,
                total: Optional[int] = None, device=None) -> torch.Tensor:
    """σ_i = σ_min + i/(M-1)·(σ_max - σ_min) over the *global* env index i
    (``offset`` + local index, M = ``total`` envs overall), fixed per env slot."""
    total = num_envs if total is None else total
    i = torch.arange(offset, offset + num_envs, dtype=torch.float32, device=device)
    if total <= 1:
        return torch.full((num_envs,), float(sigma_min), device=device)
    return sigma_min + i / (total - 1) * (sigma_max - sigma_min)


def redrawn_sigma(sigma: torch.Tensor, reset: torch.Tensor, sigma_min: float, sigma_max: float,
                  generator: torch.Generator) -> torch.Tensor:
    """Per-env σ drawn uniformly from [σ_min, σ_max] for the envs whose
    episode just ended (``reset``), kept for the others (FastTD3's mixed
    exploration: every episode explores at its own scale, and over many
    episodes each env slot sees every scale rather than one fixed σ). Draws
    for all envs every call (one fixed-shape draw, no host sync), so the
    generator advances the same whatever ended."""
    u = torch.rand(sigma.shape, device=sigma.device, dtype=sigma.dtype, generator=generator)
    return torch.where(reset, sigma_min + u * (sigma_max - sigma_min), sigma)


def decayed_sigma(sigma0: float, schedule: Optional[str], step: int, rate: float, steps: int,
                  floor: float) -> float:
    """Fixed-σ schedules: None (constant), 'exp' (σ0·rate^step) or 'linear'
    (σ0 → floor over ``steps`` vectorised env steps); never below ``floor``."""
    if schedule is None:
        return float(sigma0)
    if schedule == "exp":
        return max(floor, sigma0 * rate ** step)
    return max(floor, sigma0 + min(1.0, step / steps) * (floor - sigma0))
