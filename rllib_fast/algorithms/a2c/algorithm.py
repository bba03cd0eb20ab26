"""FastA2C: batched synchronous advantage actor-critic.

The rollout, storage and targets are the shared on-policy machinery
(:mod:`rllib_fast.algorithms.onpolicy.algorithm`); A2C's learning phase,
:class:`A2CUpdate` (composed into FastA2C, HTSA2C and every FastA3C learner),
is one gradient step on the whole ``[T, N]`` batch: policy gradient with
(optionally standardised) advantages, value regression and an entropy bonus.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Dict, Optional

import torch

from .rmsprop import ReferenceRMSprop
from ..onpolicy.algorithm import OnPolicyAlgorithm
from ..onpolicy.batch import OnPolicyBatch
from ..onpolicy.reductions import standardize
from ..onpolicy.update import UpdateRule
from .config import FastA2CConfig
from .loss import a2c_loss



@dataclass(frozen=True)
class A2CSettings:
    """The config keys A2C's update reads (rebuilt when live keys change)."""

    vf_loss_coeff: float
    entropy_coeff: float
    normalize_advantages: bool
    grad_clip: Optional[float]

    @classmethod
    def from_config(cls, config) -> "A2CSettings":
        return cls(**{f.name: getattr(config, f.name) for f in fields(cls)})


class A2CUpdate(UpdateRule):
    """A2C's learning phase: one gradient step on the whole batch, with the
    A2C reference's RMSProp (or Adam); the lr under ``lr_rule`` is the
    config's (``FastA2CConfig.configured_lr``)."""

    STATS = ("policy_loss", "vf_loss", "entropy")
    settings_from = staticmethod(A2CSettings.from_config)

    @staticmethod
    def make_optimizer(params, lr: float, config) -> torch.optim.Optimizer:
        if config.optimizer == "rmsprop":
            return ReferenceRMSprop(params, lr=lr, alpha=config.rmsprop_alpha, eps=config.rmsprop_eps)
        if config.optimizer == "rmsprop_torch":
            return torch.optim.RMSprop(params, lr=lr, alpha=config.rmsprop_alpha, eps=config.rmsprop_eps,
                                       foreach=True)
        return torch.optim.Adam(params, lr=lr, eps=config.rmsprop_eps, fused=True)

    def training_intensity(self) -> float:
        return 1.0

    def loss(self, batch: OnPolicyBatch, idx: Optional[torch.Tensor], denom: Optional[torch.Tensor]):
        """The whole batch's loss (``idx`` None) and its ``STATS``; the part of
        the step ``compile`` compiles. Advantages are standardised before
        (:meth:`learn`), over the whole batch."""
        s, module = self.settings, self.module
        logp, entropy = module.evaluate_actions(batch.obs, batch.actions)
        return a2c_loss(logp, entropy, batch.advantages, module.value(batch.critic_in), batch.value_targets,
                        vf_loss_coeff=s.vf_loss_coeff, entropy_coeff=s.entropy_coeff, w=batch.weights,
                        denom=denom)

    def learn(self, batch: OnPolicyBatch) -> Dict[str, Any]:
        adv, w = batch.advantages, batch.weights
        denom = self.learners.mean_denominator(w, adv.numel(), self.device)  # global masked means across learners
        if self.settings.normalize_advantages:
            batch = batch._replace(advantages=standardize(adv, w, self.learners.sum_))
        stats = self.gradient_step(batch, None, denom)
        self.after_step()
        out: Dict[str, Any] = {key: stats[i] for i, key in enumerate(self.STATS)}
        out["curr_lr"] = self.optimizer.param_groups[0]["lr"]
        return out


class FastA2C(OnPolicyAlgorithm):
    """Synchronous batched A2C: the on-policy loop with A2C's update."""

    UPDATE = A2CUpdate

    @classmethod
    def get_default_config(cls) -> FastA2CConfig:
        return FastA2CConfig()
