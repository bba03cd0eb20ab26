"""PopSAC: K soft actor-critic agents as one stacked network.

SAC (Haarnoja et al. 2018) per member: tanh-squashed Gaussian policy, twin
critics with soft clipped double-Q targets, Polyak targets every update, and
an adaptive entropy temperature alpha per member (``log_alpha`` is a ``[K]``
tensor with its own vectorised Adam). Member hyperparameters (the paper's
SAC search space): actor/critic/alpha lr, target entropy (a scale of the
default ``-|A|``), reward scale, gamma, tau. Exploit resets the policy and
alpha optimizers and alpha itself (as the paper's code does) unless
``pbt_exploit_optimizer='copy'``.
"""
from __future__ import annotations

import math
from typing import Any, Dict

import torch

from ...core.nets import squashed_gaussian
from ...core.stacked import StackedMLP, VectorAdam, copy_members, member_broadcast
from ...core.state import StateAdapter
from .actor_critic import PopActorCritic
from .config import PopSACConfig

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


class PopSAC(PopActorCritic):
    @classmethod
    def get_default_config(cls) -> PopSACConfig:
        return PopSACConfig()

    def build_actor(self) -> None:
        cfg = self.config
        # the actor outputs mean and log-std
        self.actor = StackedMLP(self.K, self.obs_dim, self.hidden_sizes, 2 * self.act_dim, cfg.activation,
                                cfg.layer_norm, device=self.device)
        self.actor_params = list(self.actor.parameters())
        self.actor_opt = VectorAdam(self.actor_params, self.K, lr=self.hp["actor_lr"], eps=cfg.adam_eps)
        self.log_alpha = torch.full((self.K,), math.log(cfg.initial_alpha), device=self.device)
        self.alpha_opt = VectorAdam([self.log_alpha], self.K, lr=self.hp["alpha_lr"], eps=cfg.adam_eps)

    def optimizer_hparams(self) -> None:
        super().optimizer_hparams()
        self.alpha_opt.lr.copy_(self.hp["alpha_lr"])

    def learner_components(self) -> Dict[str, Any]:
        return {**super().learner_components(), "log_alpha": StateAdapter.tensor(self.log_alpha),
                "alpha_opt": self.alpha_opt}

    # -- policy ---------------------------------------------------------------------------------------------
    def sample_pi(self, obs: torch.Tensor, eps: torch.Tensor):
        """Squashed-Gaussian action in [-1, 1] and its log-probability (``[K, B]``)."""
        mean, log_std = self.actor(obs).chunk(2, -1)
        return squashed_gaussian(mean, log_std.clamp(LOG_STD_MIN, LOG_STD_MAX), eps)

    def policy_actions(self, obs: torch.Tensor, explore: bool) -> torch.Tensor:
        obs = obs.float()
        if explore:
            a, _ = self.sample_pi(obs, self.rng.normal(*obs.shape[1:-1], self.act_dim))
        else:
            a = torch.tanh(self.actor(obs).chunk(2, -1)[0])
        return self.to_env_action(a)

    # -- learning ---------------------------------------------------------------------------------------------
    def update_step(self) -> None:
        B = self.config.batch_size
        batch = self.replay.sample(B, self.rng)
        self.sac_step(batch, self.rng.normal(B, self.act_dim), self.rng.normal(B, self.act_dim))

    def sac_step(self, b: Dict[str, torch.Tensor], eps_next: torch.Tensor, eps_pi: torch.Tensor) -> None:
        hp = self.hp
        alpha = self.log_alpha.exp()
        with torch.no_grad():
            na, nlogp = self.sample_pi(b["next_obs"], eps_next)
            qt = (torch.minimum(*self.twin_q(self.critic_t, b["next_obs"], na))
                  - member_broadcast(alpha, nlogp) * nlogp)
            y = self.bellman_target(b, qt)
        self.critic_step(b, y)
        w = b["weight"]
        wsum = w.sum(1).clamp_min(1.0)
        a, logp = self.sample_pi(b["obs"], eps_pi)
        q1, q2 = self.twin_q(self.critic, b["obs"], a)
        actor_loss = ((w * (member_broadcast(alpha, logp) * logp - torch.minimum(q1, q2))).sum(1) / wsum).sum()
        grads = torch.autograd.grad(actor_loss, self.actor_params)
        self.actor_opt.step(self.clip(grads))
        target_entropy = -float(self.act_dim) * hp["target_entropy_scale"]
        with torch.no_grad():
            ent_err = ((w * (logp + target_entropy.unsqueeze(1))).sum(1) / wsum)     # [K]
        # d/d log_alpha of -(log_alpha * (logp + H_target)).mean()
        self.alpha_opt.step([-ent_err])
        self.critic_soft_update(hp["tau"])

    # -- exploit ----------------------------------------------------------------------------------------------------
    @torch.no_grad()
    def exploit_members(self, src: torch.Tensor, dst: torch.Tensor) -> None:
        cfg = self.config
        copy_members(self.actor, src, dst)
        if cfg.pbt_copy_critic:
            s2, d2 = torch.cat([src, src + self.K]), torch.cat([dst, dst + self.K])
            copy_members(self.critic, s2, d2)
            copy_members(self.critic_t, s2, d2)
        if cfg.pbt_exploit_optimizer == "copy":
            self.actor_opt.copy_members(src, dst)
            self.alpha_opt.copy_members(src, dst)
            self.log_alpha[dst] = self.log_alpha[src].clone()
            if cfg.pbt_copy_critic:
                self.critic_opt.copy_members(s2, d2)
        else:
            self.actor_opt.reset_members(dst)
            self.alpha_opt.reset_members(dst)
            self.log_alpha[dst] = math.log(cfg.initial_alpha)
            if cfg.pbt_copy_critic:
                self.critic_opt.reset_members(d2)
