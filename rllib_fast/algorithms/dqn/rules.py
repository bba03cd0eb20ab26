"""Stooke & Abbeel's large-batch rules for Q-learning (§5.3-5.4 and
the paper's Table 2): learning rate and Adam epsilon as functions of the batch size.

* DQN: lr from the paper's table {32: 2.5e-4, 512: 7.5e-4, 1024: 1.5e-3},
  interpolated linearly in log(batch) between those points and clamped outside.
* Categorical DQN: lr 4.2e-4 for batch >= 256 (the configured lr below that),
  Adam epsilon 0.01 / batch.
* epsilon-Rainbow: the configured (published) lr, unscaled; Adam epsilon 0.005 / batch.
"""
from __future__ import annotations

import math
from typing import Optional, Tuple

DQN_LR_TABLE = ((32, 2.5e-4), (512, 7.5e-4), (1024, 1.5e-3))
RULES = ("none", "auto", "dqn", "categorical", "eps_rainbow")


def dqn_lr(batch_size: int) -> float:
    pts = DQN_LR_TABLE
    if batch_size <= pts[0][0]:
        return pts[0][1]
    for (b0, l0), (b1, l1) in zip(pts, pts[1:]):
        if batch_size <= b1:
            f = (math.log(batch_size) - math.log(b0)) / (math.log(b1) - math.log(b0))
            return l0 + f * (l1 - l0)
    return pts[-1][1]


def resolve_rule(rule: str, num_atoms: int, noisy: bool, prioritized: bool) -> str:
    if rule != "auto":
        return rule
    if num_atoms == 1:
        return "dqn"
    return "eps_rainbow" if prioritized and not noisy else "categorical"


def apply_rule(rule: str, batch_size: int, lr: float, adam_eps: Optional[float]) -> Tuple[float, float]:
    """(lr, adam_eps) under ``rule``. An ``adam_eps`` the user set wins over
    the rule's; ``None`` means the rule's epsilon, or Adam's default 1e-8."""
    def eps(rule_eps: float) -> float:
        return rule_eps if adam_eps is None else adam_eps

    if rule == "dqn":
        return dqn_lr(batch_size), eps(1e-8)
    if rule == "categorical":
        return (4.2e-4 if batch_size >= 256 else lr), eps(0.01 / batch_size)
    if rule == "eps_rainbow":
        return lr, eps(0.005 / batch_size)
    return lr, eps(1e-8)
