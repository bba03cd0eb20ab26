"""PopTD3: K TD3 agents updated as one stacked network.

TD3 (Fujimoto et al. 2018) per member: twin critics with clipped double-Q
targets, target-policy smoothing (clipped Gaussian noise on the target
action), delayed policy and target updates. Everything is per member: its
hyperparameters are ``[K]`` tensors (lr, gamma, tau, noises, delay, reward
scale), its noise comes from its own counter-based stream, its minibatch from
its own replay columns. A member's policy delay is a mask on the optimizer
step (``VectorAdam.step(mask=...)``), so members with different delays still
share every kernel.

The twin critic, its target and optimizer, the Bellman target and the
shared-critic variant (CEM-RL, DvD) live in :class:`PopActorCritic`, the base
PopTD3 shares with its sibling PopSAC; this file is the deterministic policy,
its target copy and the delayed update.
"""
from __future__ import annotations

import copy
from typing import Any, Dict, Optional

import torch

from ...core.stacked import StackedMLP, VectorAdam, copy_members, member_broadcast
from ...core.state import StateAdapter
from .actor_critic import PopActorCritic
from .config import PopTD3Config


class PopTD3(PopActorCritic):
    @classmethod
    def get_default_config(cls) -> PopTD3Config:
        return PopTD3Config()

    # -- construction --------------------------------------------------------------------------
    def build_actor(self) -> None:
        cfg = self.config
        self.actor = StackedMLP(self.K, self.obs_dim, self.hidden_sizes, self.act_dim, cfg.activation,
                                cfg.layer_norm, device=self.device)
        self.actor_t = copy.deepcopy(self.actor).requires_grad_(False)
        self.actor_params = list(self.actor.parameters())
        self.actor_opt = VectorAdam(self.actor_params, self.K, lr=self.hp["actor_lr"], eps=cfg.adam_eps,
                                    weight_decay=getattr(cfg, "weight_decay", 0.0), decoupled=True)
        # update counter on the device (TD3's delay test without a host value in the graph)
        self.update_counter = torch.zeros((), dtype=torch.int64, device=self.device)
        #: ``[K]`` bool of the members whose policies train at all (CEM-RL trains a part); None: all
        self.train_mask: Optional[torch.Tensor] = None

    def learner_components(self) -> Dict[str, Any]:
        return {**super().learner_components(), "actor_t": self.actor_t,
                "update_counter": StateAdapter.tensor(self.update_counter)}

    # -- acting -------------------------------------------------------------------------------------
    def pi(self, net, obs: torch.Tensor) -> torch.Tensor:
        """Deterministic policy in [-1, 1] (``[K, B, A]``)."""
        return torch.tanh(net(obs))

    def policy_actions(self, obs: torch.Tensor, explore: bool) -> torch.Tensor:
        a = self.pi(self.actor, obs.float())
        if explore:
            noise = self.rng.normal(*a.shape[1:]) * member_broadcast(self.hp["exploration_noise"], a)
            a = (a + noise).clamp(-1.0, 1.0)
        return self.to_env_action(a)

    # -- learning --------------------------------------------------------------------------------------
    def update_step(self) -> None:
        self.td3_step(*self.sample_batch())

    def sample_batch(self):
        """Every member's minibatch and its target-smoothing noise, from the members' streams."""
        batch = self.replay.sample(self.config.batch_size, self.rng)
        return batch, self.rng.normal(self.config.batch_size, self.act_dim)

    def critic_targets(self, b: Dict[str, torch.Tensor], noise: torch.Tensor) -> torch.Tensor:
        hp = self.hp
        with torch.no_grad():
            eps = (noise * member_broadcast(hp["target_noise"], noise))
            clip = member_broadcast(hp["noise_clip"], noise)
            eps = torch.maximum(torch.minimum(eps, clip), -clip)
            na = (self.pi(self.actor_t, b["next_obs"]) + eps).clamp(-1.0, 1.0)
            qt = torch.minimum(*self.twin_q(self.critic_t, b["next_obs"], na))
            return self.bellman_target(b, qt)

    def actor_loss(self, b: Dict[str, torch.Tensor]) -> torch.Tensor:
        w = b["weight"]
        qv = self.q1_only(self.critic, b["obs"], self.pi(self.actor, b["obs"]))
        return (-(w * qv).sum(1) / w.sum(1).clamp_min(1.0)).sum()

    def policy_mask(self) -> torch.Tensor:
        """``[K]`` bool: members whose policy (and targets) move this step — TD3's
        per-member delay (``update_counter % policy_delay == 0``), within ``train_mask``."""
        delay = self.hp["policy_delay"].round().clamp_min(1.0).long()
        mask = torch.remainder(self.update_counter, delay) == 0
        return mask if self.train_mask is None else mask & self.train_mask

    def td3_step(self, b: Dict[str, torch.Tensor], noise: torch.Tensor,
                 extra_policy_loss: Optional[torch.Tensor] = None) -> None:
        """One TD3 update of every member on batch ``b`` (``[K, B, ...]``) with
        target-smoothing noise ``noise`` (``[K, B, A]`` standard normals);
        ``extra_policy_loss`` is added to the policy loss (DvD's diversity term)."""
        self.critic_step(b, self.critic_targets(b, noise))
        self.update_counter += 1
        mask = self.policy_mask()
        loss = self.actor_loss(b)
        if extra_policy_loss is not None:
            loss = loss + extra_policy_loss
        grads = torch.autograd.grad(loss, self.actor_params)
        self.actor_opt.step(self.clip(grads), mask=mask)
        self.soft_update(mask)

    @torch.no_grad()
    def soft_update(self, mask: torch.Tensor) -> None:
        atau = self.hp["tau"] * mask.float()
        for p, t in zip(self.actor.parameters(), self.actor_t.parameters()):
            t.add_(member_broadcast(atau, p) * (p - t))
        self.critic_soft_update(atau)   # a shared critic's targets follow member 0's delay schedule

    # -- PBT exploit ------------------------------------------------------------------------------------------
    @torch.no_grad()
    def exploit_members(self, src: torch.Tensor, dst: torch.Tensor) -> None:
        """Policy (and, by config, critic) slices ``src -> dst``; targets copied from
        the donor's targets; optimizer state reset or copied."""
        cfg = self.config
        groups = [(self.actor, self.actor_t, self.actor_opt, src, dst)]
        if cfg.pbt_copy_critic and not self.shared_critic:   # Q1 and Q2 slices of the twin net
            groups.append((self.critic, self.critic_t, self.critic_opt, torch.cat([src, src + self.K]),
                           torch.cat([dst, dst + self.K])))
        for net, tgt, opt, s_idx, d_idx in groups:
            copy_members(net, s_idx, d_idx)
            copy_members(tgt, s_idx, d_idx)
            if cfg.pbt_exploit_optimizer == "copy":
                opt.copy_members(s_idx, d_idx)
            else:
                opt.reset_members(d_idx)
