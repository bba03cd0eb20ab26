"""FastA2C: batched synchronous advantage actor-critic.

The rollout, storage and targets are the shared on-policy machinery
(:mod:`rllib_fast.algorithms.onpolicy`); A2C's learning phase,
:class:`A2CUpdate` (composed into FastA2C, HTSA2C and every FastA3C learner),
is one gradient step on the whole ``[T, N]`` batch: policy gradient with
(optionally standardised) advantages, value regression and an entropy bonus.
"""
from __future__ import annotations

import math

import torch

from ...core.rmsprop import ReferenceRMSprop
from ..onpolicy import OnPolicyAlgorithm, Targets, UpdateRule, masked_mean, standardize
from .config import FastA2CConfig



class A2CUpdate(UpdateRule):
    """A2C's learning phase: one gradient step on the whole batch, with the
    A2C reference's RMSProp (or Adam), the lr under ``lr_rule``."""

    @staticmethod
    def configured_lr(config) -> float:
        """``lr`` under ``lr_rule``: 'sqrt' scales it with the square root of the
        batch (``horizon * num_envs``) relative to ``lr_rule_base_batch``, capped
        at ``lr_rule_cap`` (Stooke & Abbeel's large-batch rule)."""
        if config.lr_rule == "sqrt":
            batch = config.horizon() * config.num_envs
            return min(config.lr_rule_cap, config.lr * math.sqrt(batch / config.lr_rule_base_batch))
        return config.lr

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
        denom = algo.mean_denominator(w, adv.numel())  # global masked means across learners
        if cfg.normalize_advantages:
            adv = standardize(adv, w, algo.reduce_over_learners)
        critic_in = st.flat(algo.critic_key)   # the observations, or the source's states (asymmetric)
        loss, stats = algo.update_step(st.flat("obs"), st.flat("actions"), adv, targets, critic_in, w, denom)
        algo.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.apply_gradients()
        log = algo.log_learner
        for i, key in enumerate(("policy_loss", "vf_loss", "entropy")):
            log(key, stats[i])
        log("curr_lr", algo.optimizer.param_groups[0]["lr"])


class FastA2C(OnPolicyAlgorithm):
    """Synchronous batched A2C: the on-policy loop with A2C's update."""

    UPDATE = A2CUpdate

    @classmethod
    def get_default_config(cls) -> FastA2CConfig:
        return FastA2CConfig()
