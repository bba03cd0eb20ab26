"""How PopPPO steps its members: clip, Adam, adaptive-KL lr.

Two implementations of one small interface (``step(grads)``, ``adapt(kl)``,
``lr`` as a ``[K]`` tensor, ``copy_members``/``reset_members`` for PBT,
``state_dict``):

* :class:`StackedAdam` (K >= 2): ``core.stacked.VectorAdam`` with each
  member's lr as one entry of a ``[K]`` tensor, gradients clipped per member
  (``core.stacked.clip_grads_per_member``), the lr adapted on the device by
  FastPPO's rule (``ppo.loss.kl_adapted_lr`` on ``[K]`` tensors: no host sync,
  one update for all members);
* :class:`SingleAdam` (K = 1): FastPPO's own steps, ``torch.optim.Adam``
  (fused) with torch's gradient-norm clip and the lr adapted on the host once
  per epoch by the same rule. Why a second path: VectorAdam's arithmetic (float32 bias
  corrections and lr) differs from the fused kernel's (double) in the last bit
  of a step, so a population of one would drift
  from the FastPPO run of the same seed; with this path it is that run,
  bit for bit (tests/algorithms/test_pop_ppo.py).
"""
from __future__ import annotations

from typing import Dict, Optional, Sequence

import torch

from ...core.stacked import VectorAdam, clip_grads_per_member
from ..ppo.loss import kl_adapted_lr

ADAM_EPS = 1e-5   # FastPPO's (rsl_rl's) Adam epsilon


class StackedAdam:
    """K members' Adam in one :class:`VectorAdam` (``lr`` is its ``[K]`` lr tensor)."""

    def __init__(self, params: Sequence[torch.Tensor], K: int, lr: torch.Tensor, grad_clip, bounds):
        self.params = list(params)
        self.adam = VectorAdam(self.params, K, lr=lr.clone(), eps=ADAM_EPS)
        self.lr = self.adam.lr
        self.grad_clip, self.bounds = grad_clip, tuple(bounds)

    def step(self, grads: Sequence[torch.Tensor]) -> None:
        if self.grad_clip is not None:
            grads = clip_grads_per_member(grads, self.grad_clip)
        self.adam.step(grads)

    @torch.no_grad()
    def adapt(self, kl_sum: torch.Tensor, count: int, target: torch.Tensor, target_value=None) -> None:
        """Adapt each member's lr to its epoch KL (``kl_sum / count``, ``[K]``) and its ``target``."""
        self.lr.copy_(kl_adapted_lr(self.lr, kl_sum / count, target, *self.bounds))

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

    def __init__(self, params: Sequence[torch.Tensor], lr: float, grad_clip, bounds,
                 transposed: Optional[Sequence[bool]] = None):
        self.params = list(params)
        #: which parameters are stored transposed w.r.t. FastPPO's (``StackedLinear`` weights ``[1, in, out]``);
        #: default: every 3-D one (a stacked MLP's weights and biases)
        self.transposed = [p.dim() == 3 for p in self.params] if transposed is None else list(transposed)
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
        """torch's ``clip_grad_norm_(foreach=True)`` in its two halves, the total norm
        taken over the gradients in FastPPO's layout (``nn.Linear``'s ``[out, in]``,
        not the stack's ``[1, in, out]``): a norm sums in memory order, and a sum in
        another order differs in the last bit, which is enough to part the two runs
        once clipping engages."""
        flat = [g[0].t().contiguous() if t else g for g, t in zip(grads, self.transposed)]
        total = torch.nn.utils.get_total_norm(flat, foreach=True)
        torch.nn.utils.clip_grads_with_norm_(self.params, self.grad_clip, total, foreach=True)

    def adapt(self, kl_sum: torch.Tensor, count: int, target: torch.Tensor, target_value=None) -> None:
        """FastPPO's host rule (``target_value``: the config's float, as FastPPO reads it)."""
        k = float(kl_sum[0]) / count
        t = float(target[0]) if target_value is None else float(target_value)
        for group in self.opt.param_groups:
            group["lr"] = kl_adapted_lr(group["lr"], k, t, *self.bounds)

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
