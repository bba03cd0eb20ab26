"""FastA2C: batched synchronous advantage actor-critic.

The rollout, storage and targets are the shared on-policy machinery
(:mod:`rllib_fast.algorithms.onpolicy`); A2C's learning phase is one gradient
step on the whole ``[T, N]`` batch: policy gradient with (optionally
standardised) advantages, value regression and an entropy bonus.
"""
from __future__ import annotations

import torch
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.utils.metrics import LEARNER_RESULTS

from ...core.rmsprop import ReferenceRMSprop
from ..onpolicy import OnPolicyAlgorithm, Targets, masked_mean, standardize
from .config import FastA2CConfig

POLICY = DEFAULT_MODULE_ID  # RLlib's module id of a single-agent policy


class FastA2C(OnPolicyAlgorithm):
    @classmethod
    def get_default_config(cls) -> FastA2CConfig:
        return FastA2CConfig()

    def make_optimizer(self) -> torch.optim.Optimizer:
        cfg = self.config
        if cfg.optimizer == "rmsprop":
            return ReferenceRMSprop(self.params, lr=self.configured_lr(), alpha=cfg.rmsprop_alpha,
                                    eps=cfg.rmsprop_eps)
        if cfg.optimizer == "rmsprop_torch":
            return torch.optim.RMSprop(self.params, lr=self.configured_lr(), alpha=cfg.rmsprop_alpha,
                                       eps=cfg.rmsprop_eps, foreach=True)
        return torch.optim.Adam(self.params, lr=self.configured_lr(), eps=cfg.rmsprop_eps, fused=True)

    def configured_lr(self) -> float:
        """``lr`` under ``lr_rule`` (the sqrt rule scales with the trial's batch)."""
        return self.config.effective_lr()

    def training_intensity(self) -> float:
        return 1.0

    def _update_loss(self, obs, actions, adv, targets, critic_in, w, denom):
        """The whole batch's loss and its (policy loss, value loss, entropy);
        the update step's part that ``compile`` compiles."""
        cfg, module = self.config, self.module
        logp, entropy = module.evaluate_actions(obs, actions)
        pg_loss = -masked_mean(logp * adv, w, denom)
        # the reference's value loss (baselines: vf_coef * mean squared error, no extra 1/2),
        # so vf_loss_coeff = 0.5 weighs it as there
        vf_loss = masked_mean((module.value(critic_in) - targets) ** 2, w, denom)
        ent = masked_mean(entropy, w, denom)
        loss = pg_loss + cfg.vf_loss_coeff * vf_loss - cfg.entropy_coeff * ent
        return loss, torch.stack([pg_loss.detach(), vf_loss.detach(), ent.detach()])

    def _learn(self, batch: Targets) -> None:
        cfg, st = self.config, self.storage
        adv, targets, _, w = batch
        denom = self._mean_denominator(w, adv.numel())  # global masked means across learners
        if cfg.normalize_advantages:
            adv = standardize(adv, w, self._reduce)
        critic_in = st.flat(self.critic_key)   # the observations, or the source's states (asymmetric)
        loss, stats = self._update_fn(st.flat("obs"), st.flat("actions"), adv, targets, critic_in, w, denom)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self._apply_gradients()
        for i, key in enumerate(("policy_loss", "vf_loss", "entropy")):
            self.metrics.log_value((LEARNER_RESULTS, POLICY, key), stats[i], window=1)
        self.metrics.log_value((LEARNER_RESULTS, POLICY, "curr_lr"), self.optimizer.param_groups[0]["lr"],
                               window=1)
