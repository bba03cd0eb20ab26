"""RMSProp in the form the A2C reference implementations use.

A2C's published results (Mnih et al. 2016; OpenAI baselines, which Stooke &
Abbeel compare against) were produced with TensorFlow 1's
``RMSPropOptimizer``, which differs from ``torch.optim.RMSprop`` in two ways
that matter with A2C's eps = 1e-5:

* eps sits inside the square root: ``p -= lr * g / sqrt(v + eps)`` (torch:
  ``g / (sqrt(v) + eps)``). For small gradients the step is bounded by
  ``lr * g / sqrt(eps)`` instead of ``lr * g / eps``: 316x less.
* the mean square starts at 1, not 0, so the first updates are close to plain
  SGD instead of sign-like steps of ``lr / sqrt(1 - alpha)`` = 10 x lr.

Everything is a handful of ``torch._foreach_*`` kernels per step on the
parameters' device (no host synchronisation), like torch's foreach RMSprop.
"""
from __future__ import annotations

from typing import Iterable

import torch


class ReferenceRMSprop(torch.optim.Optimizer):
    """``v = alpha * v + (1 - alpha) * g**2``; ``p -= lr * g / sqrt(v + eps)``,
    with ``v`` starting at ``initial_mean_square`` (1.0, as TF1)."""

    def __init__(self, params: Iterable, lr: float, alpha: float = 0.99, eps: float = 1e-5,
                 initial_mean_square: float = 1.0):
        if lr < 0 or not 0.0 <= alpha <= 1.0 or eps < 0 or initial_mean_square < 0:
            raise ValueError(f"ReferenceRMSprop: invalid lr={lr}, alpha={alpha}, eps={eps} or "
                             f"initial_mean_square={initial_mean_square}; allowed: lr >= 0, 0 <= alpha <= 1, "
                             "eps >= 0, initial_mean_square >= 0")
        super().__init__(params, dict(lr=lr, alpha=alpha, eps=eps, initial_mean_square=initial_mean_square))

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            grads = [p.grad for p in params]
            squares = []
            for p in params:
                state = self.state[p]
                if "square_avg" not in state:
                    state["square_avg"] = torch.full_like(p, group.get("initial_mean_square", 1.0),
                                                          memory_format=torch.preserve_format)
                squares.append(state["square_avg"])
            alpha = group["alpha"]
            torch._foreach_mul_(squares, alpha)
            torch._foreach_addcmul_(squares, grads, grads, value=1.0 - alpha)
            denom = torch._foreach_add(squares, group["eps"])
            torch._foreach_sqrt_(denom)
            torch._foreach_addcdiv_(params, grads, denom, value=-group["lr"])
        return loss
