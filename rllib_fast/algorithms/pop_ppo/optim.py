"""How PopPPO steps its members: clip, Adam, adaptive-KL lr.

Two implementations of one small interface (``step(grads)``, ``adapt(kl)``,
``lr`` as a ``[K]`` tensor, ``copy_members``/``reset_members`` for PBT,
``state_dict``):

* :class:`StackedAdam` (K >= 2): ``core.stacked.VectorAdam`` with each
  member's lr as one entry of a ``[K]`` tensor, gradients clipped per member,
  the lr adapted on the device (no host sync, one update for all members);
* :class:`SingleAdam` (K = 1): FastPPO's own steps, ``torch.optim.Adam``
  (fused) with ``clip_grad_norm_`` and the lr adapted on the host once per
  epoch. Why a second path: VectorAdam's arithmetic (float32 bias
  corrections and lr) differs from the fused kernel's (double) by one ulp per
  step (measured 1.2e-7 after one step), so a population of one would drift
  from the FastPPO run of the same seed; with this path it is that run,
  bit for bit (tests/algorithms/test_pop_ppo.py).
"""
from __future__ import annotations

from typing import Dict, List, Sequence

import torch

from ...core.stacked import VectorAdam

ADAM_EPS = 1e-5   # FastPPO's (rsl_rl's) Adam epsilon


def member_grad_clip(grads: Sequence[torch.Tensor], max_norm: float) -> List[torch.Tensor]:
    """Clip each member's global gradient norm (over all its tensors) to
    ``max_norm`` as ``torch.nn.utils.clip_grad_norm_`` clips one agent's: the
    norm of the per-tensor norms, coefficient ``max_norm / (norm + 1e-6)``
    capped at 1. No host sync."""
    norms = torch.stack([torch.linalg.vector_norm(g.reshape(g.shape[0], -1), dim=1) for g in grads])
    total = torch.linalg.vector_norm(norms, dim=0)
    coef = (max_norm / (total + 1e-6)).clamp(max=1.0)
    return [g * coef.view(-1, *([1] * (g.dim() - 1))) for g in grads]


def adapted_lr(lr: torch.Tensor, kl: torch.Tensor, target: torch.Tensor, low: float, high: float) -> torch.Tensor:
    """FastPPO's adaptive-KL rule per member: /1.5 (not below ``low``) above
    twice the member's KL target, x1.5 (not above ``high``) below half of it."""
    return torch.where(kl > 2.0 * target, (lr / 1.5).clamp_min(low),
                       torch.where(kl < 0.5 * target, (lr * 1.5).clamp_max(high), lr))


class StackedAdam:
    """K members' Adam in one :class:`VectorAdam` (``lr`` is its ``[K]`` lr tensor)."""

    def __init__(self, params: Sequence[torch.Tensor], K: int, lr: torch.Tensor, grad_clip, bounds):
        self.params = list(params)
        self.adam = VectorAdam(self.params, K, lr=lr.clone(), eps=ADAM_EPS)
        self.lr = self.adam.lr
        self.grad_clip, self.bounds = grad_clip, tuple(bounds)

    def step(self, grads: Sequence[torch.Tensor]) -> None:
        if self.grad_clip is not None:
            grads = member_grad_clip(grads, self.grad_clip)
        self.adam.step(grads)

    @torch.no_grad()
    def adapt(self, kl_sum: torch.Tensor, count: int, target: torch.Tensor, target_value=None) -> None:
        """Adapt each member's lr to its epoch KL (``kl_sum / count``, ``[K]``) and its ``target``."""
        self.lr.copy_(adapted_lr(self.lr, kl_sum / count, target, *self.bounds))

    @torch.no_grad()
    def set_lr(self, lr: torch.Tensor) -> None:
        self.lr.copy_(lr)

    def copy_members(self, src: torch.Tensor, dst: torch.Tensor) -> None:
        self.adam.copy_members(src, dst)

    def reset_members(self, dst: torch.Tensor) -> None:
        self.adam.reset_members(dst)

    def state_dict(self) -> Dict[str, object]:
        return self.adam.state_dict()

    def load_state_dict(self, state) -> None:
        self.adam.load_state_dict(state)


class SingleAdam:
    """One member: FastPPO's fused ``torch.optim.Adam``, ``clip_grad_norm_`` and
    host-side adaptive lr (one host sync per epoch, as FastPPO)."""

    def __init__(self, params: Sequence[torch.Tensor], lr: float, grad_clip, bounds):
        self.params = list(params)
        self.opt = torch.optim.Adam(self.params, lr=float(lr), eps=ADAM_EPS, fused=True)
        self.grad_clip, self.bounds = grad_clip, tuple(bounds)

    @property
    def lr(self) -> torch.Tensor:
        """The lr in effect as a ``[1]`` tensor (for reports)."""
        return torch.tensor([self.opt.param_groups[0]["lr"]])

    def step(self, grads: Sequence[torch.Tensor]) -> None:
        for p, g in zip(self.params, grads):
            p.grad = g
        if self.grad_clip is not None:
            self._clip(grads)
        self.opt.step()
        for p in self.params:
            p.grad = None

    def _clip(self, grads: Sequence[torch.Tensor]) -> None:
        """``clip_grad_norm_(foreach=True)``'s arithmetic with each norm taken over
        the gradient in FastPPO's layout (``nn.Linear``'s ``[out, in]``, not the
        stack's ``[1, in, out]``): a norm sums in memory order, and a sum in another
        order differs in the last bit, which is enough to part the two runs once
        clipping engages."""
        flat = [g[0].t().contiguous() if g.dim() == 3 else g for g in grads]
        total = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(flat)))
        torch._foreach_mul_(list(grads), (self.grad_clip / (total + 1e-6)).clamp(max=1.0))

    def adapt(self, kl_sum: torch.Tensor, count: int, target: torch.Tensor, target_value=None) -> None:
        """FastPPO's host rule (``target_value``: the config's float, as FastPPO reads it)."""
        k = float(kl_sum[0]) / count
        t = float(target[0]) if target_value is None else float(target_value)
        lo, hi = self.bounds
        for group in self.opt.param_groups:
            if k > 2.0 * t:
                group["lr"] = max(lo, group["lr"] / 1.5)
            elif k < 0.5 * t:
                group["lr"] = min(hi, group["lr"] * 1.5)

    def set_lr(self, lr) -> None:
        for group in self.opt.param_groups:
            group["lr"] = float(lr)

    def copy_members(self, src, dst) -> None:   # one member is never exploited
        raise RuntimeError("SingleAdam: a population of one has no other member to copy")

    reset_members = copy_members

    def state_dict(self):
        return self.opt.state_dict()

    def load_state_dict(self, state) -> None:
        from ...core.state import load_optimizer_state

        load_optimizer_state(self.opt, state)   # the adapted lr comes with the moments, as FastPPO's
