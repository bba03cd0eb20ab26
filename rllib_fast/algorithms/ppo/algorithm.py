"""FastPPO: synchronous batched-inference PPO on a tensor vector env.

Reads top to bottom like a single-file PPO: rollout (one batched forward for
all N envs per step, written into preallocated ``[T, N]`` storage), targets
(one batched critic pass over observations and ``final_obs``, then GAE with
time-out bootstrapping), and minibatch epochs of the clipped surrogate with
value clipping. Rollout and targets are the on-policy loop
(``OnPolicyAlgorithm.training_step`` in :mod:`..onpolicy`); this file is the
update, :class:`PPOUpdate`, which HTSPPO and every FastAPPO learner compose in
too; its loss terms are the plain functions of :mod:`.loss`. Everything stays on the env's device; the only host syncs are the
adaptive-KL lr step (once per epoch, when enabled) and RLlib's metric
reduction at the end of an iteration.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Dict, Optional, Tuple

import torch

from ..onpolicy import OnPolicyAlgorithm, OnPolicyBatch, UpdateRule, standardize
from .config import FastPPOConfig
from .loss import kl_adapted_lr, ppo_loss



@dataclass(frozen=True)
class PPOSettings:
    """The config keys PPO's update reads (rebuilt when live keys change)."""

    num_epochs: int
    num_minibatches: int
    clip_param: float
    vf_clip_param: Optional[float]
    vf_loss_coeff: float
    entropy_coeff: float
    normalize_advantages: bool
    grad_clip: Optional[float]
    adaptive_lr_kl_target: Optional[float]
    adaptive_lr_bounds: Tuple[float, float]

    @classmethod
    def from_config(cls, config) -> "PPOSettings":
        return cls(**{f.name: getattr(config, f.name) for f in fields(cls)})


class PPOUpdate(UpdateRule):
    """PPO's learning phase: ``num_epochs`` passes of ``num_minibatches``
    clipped-surrogate steps (value loss optionally clipped), the lr adapted
    to the epoch's KL when ``adaptive_lr_kl_target`` is set. Composed into
    FastPPO, HTSPPO and every FastAPPO learner."""

    STATS = ("policy_loss", "vf_loss", "entropy", "mean_kl_loss", "clip_fraction")
    settings_from = staticmethod(PPOSettings.from_config)

    @staticmethod
    def make_optimizer(params, lr: float, config) -> torch.optim.Optimizer:
        # fused Adam: one kernel for all parameters instead of ~12 per tensor
        return torch.optim.Adam(params, lr=lr, eps=1e-5, fused=True)

    def training_intensity(self) -> float:
        return float(self.settings.num_epochs)

    def learn(self, batch: OnPolicyBatch) -> Dict[str, Any]:
        s, device = self.settings, self.device
        B = batch.advantages.shape[0]
        mb = B // s.num_minibatches
        w = batch.weights
        stats = torch.zeros(6, device=device)  # pg, vf, ent, kl, clipfrac, count
        for _ in range(s.num_epochs):
            perm = torch.randperm(B, device=device, generator=self.shuffle_generator)
            epoch_kl = torch.zeros((), device=device)
            for i in range(s.num_minibatches):
                idx = perm[i * mb:(i + 1) * mb]
                # global masked means across data-parallel learners (one all-reduce, outside the step)
                denom = self.learners.mean_denominator(w[idx] if w is not None else None, mb, device)
                mstats = self.gradient_step(batch, idx, denom)
                self.after_step()
                with torch.no_grad():
                    stats[:5] += mstats
                    stats[5] += 1
                    epoch_kl += mstats[3]
            if s.adaptive_lr_kl_target is not None:
                self.learners.mean_(epoch_kl)  # every learner adapts lr from the same KL
                self._adapt_lr(float(epoch_kl) / s.num_minibatches)
        out: Dict[str, Any] = {key: stats[i] / stats[5] for i, key in enumerate(self.STATS)}
        with torch.no_grad():
            targets = batch.value_targets
            out["vf_explained_var"] = 1 - (targets - batch.old_values).var() / targets.var().clamp_min(1e-8)
        out["curr_lr"] = self.optimizer.param_groups[0]["lr"]
        return out

    def loss(self, batch: OnPolicyBatch, idx: Optional[torch.Tensor], denom: Optional[torch.Tensor]):
        """One minibatch's clipped-surrogate loss and its ``STATS``; the part of
        the step ``compile`` compiles (minibatch shapes are fixed)."""
        s, module = self.settings, self.module
        w = batch.weights
        wi = w[idx] if w is not None else None
        logp, entropy = module.evaluate_actions(batch.obs[idx], batch.actions[idx])
        adv = batch.advantages[idx]
        if s.normalize_advantages:
            adv = standardize(adv, wi, self.learners.sum_)
        v = module.value(batch.critic_in[idx])
        return ppo_loss(logp, entropy, batch.logp[idx], adv, v, batch.value_targets[idx], batch.old_values[idx],
                        clip_param=s.clip_param, vf_clip_param=s.vf_clip_param, vf_loss_coeff=s.vf_loss_coeff,
                        entropy_coeff=s.entropy_coeff, w=wi, denom=denom)

    def _adapt_lr(self, kl: float) -> None:
        """KL-adaptive learning rate (:func:`.loss.kl_adapted_lr`), once per epoch."""
        s = self.settings
        lo, hi = s.adaptive_lr_bounds
        for group in self.optimizer.param_groups:
            group["lr"] = kl_adapted_lr(group["lr"], kl, s.adaptive_lr_kl_target, lo, hi)


class FastPPO(OnPolicyAlgorithm):
    """Synchronous batched PPO: the on-policy loop with PPO's update."""

    UPDATE = PPOUpdate

    @classmethod
    def get_default_config(cls) -> FastPPOConfig:
        return FastPPOConfig()
