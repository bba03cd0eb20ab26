"""FastA2C: batched synchronous advantage actor-critic.

The rollout, storage and targets are the shared on-policy machinery
(:mod:`rllib_fast.algorithms.onpolicy`); A2C's learning phase,
:class:`A2CUpdate` (composed into FastA2C, HTSA2C and every FastA3C learner),
is one gradient step on the whole ``[T, N]`` batch: policy gradient with
(optionally standardised) advantages, value regression and an entropy bonus.
"""
from __future__ import annotations

import torch
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.utils.metrics import LEARNER_RESULTS

from ...core.rmsprop import ReferenceRMSprop
from ..onpolicy import OnPolicyAlgorithm, Targets, UpdateRule, masked_mean, standardize
from .config import FastA2CConfig

POLICY = DEFAULT_MODULE_ID  # RLlib's module id of a single-agent policy


class A2CUpdate(UpdateRule):
    """A2C's learning phase: one gradient step on the whole batch, with the
    A2C reference's RMSProp (or Adam), the lr under ``lr_rule``."""

    @staticmethod
    def configured_lr(config) -> float:
        """``lr`` under ``lr_rule`` (the sqrt rule scales with the trial's batch)."""
        return config.effective_lr()

    def make_optimizer(self, params) -> torch.optim.Optimizer:
        cfg, lr = self.algo.config, self.algo.configured_lr()
        if cfg.optimizer == "rmsprop":
            return ReferenceRMSprop(params, lr=lr, alpha=cfg.rmsprop_alpha, eps=cfg.rmsprop_eps)
        if cfg.optimizer == "rmsprop_torch":
            return torch.optim.RMSprop(params, lr=lr, alpha=cfg.rmsprop_alpha, eps=cfg.rmsprop_eps, foreach=True)
        return torch.optim.Adam(params, lr=lr, eps=cfg.rmsprop_eps, fused=True)

    def training_intensity(self) -> float:
        return 1.0

    def loss(self, obs, actions, adv, targets, critic_in, w, denom):
        """The whole batch's loss and its (policy loss, value loss, entropy);
        the update step's part that ``compile`` compiles."""
        cfg, module = self.algo.config, self.algo.module
        logp, entropy = module.evaluate_actions(obs, actions)
        pg_loss = -masked_mean(logp * adv, w, denom)
        # the reference's value loss (baselines: vf_coef * mean squared error, no extra 1/2),
        # so vf_loss_coeff = 0.5 weighs it as there
        vf_loss = masked_mean((module.value(critic_in) - targets) ** 2, w, denom)
        ent = masked_mean(entropy, w, denom)
        loss = pg_loss + cfg.vf_loss_coeff * vf_loss - cfg.entropy_coeff * ent
        return loss, torch.stack([pg_loss.detach(), vf_loss.detach(), ent.detach()])

    def learn(self, batch: Targets) -> None:
        algo = self.algo
        cfg, st = algo.config, algo.storage
        adv, targets, _, w = batch
        denom = algo._mean_denominator(w, adv.numel())  # global masked means across learners
        if cfg.normalize_advantages:
            adv = standardize(adv, w, algo._reduce)
        critic_in = st.flat(algo.critic_key)   # the observations, or the source's states (asymmetric)
        loss, stats = algo._update_fn(st.flat("obs"), st.flat("actions"), adv, targets, critic_in, w, denom)
        algo.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.apply_gradients()
        log = algo.metrics.log_value
        for i, key in enumerate(("policy_loss", "vf_loss", "entropy")):
            log((LEARNER_RESULTS, POLICY, key), stats[i], window=1)
        log((LEARNER_RESULTS, POLICY, "curr_lr"), algo.optimizer.param_groups[0]["lr"], window=1)


class FastA2C(OnPolicyAlgorithm):
    """Synchronous batched A2C: the on-policy loop with A2C's update."""

    UPDATE = A2CUpdate

    @classmethod
    def get_default_config(cls) -> FastA2CConfig:
        return FastA2CConfig()
