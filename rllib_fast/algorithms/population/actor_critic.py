"""PopActorCritic: what PopTD3 and PopSAC members share, written once.

Both are continuous-control actor-critics over a stacked *twin* critic:

* the action space is a bounded Box; policies act in [-1, 1] and are mapped
  to it (``act_center + act_half * a``); the replay stores the [-1, 1] action;
* the twin critics are one :class:`StackedMLP` of ``2 * Kc`` members — member
  ``j < Kc`` is Q1 of agent j, member ``Kc + j`` its Q2 — so one kernel per
  layer serves both; ``Kc`` is K, or 1 with ``shared_critic`` (CEM-RL, DvD:
  Flajolet et al. §4.2's "second-order modification": every member's batch
  goes through the one critic and its loss is the mean over all K x B samples);
* the critic's Bellman target, loss, optimizer, Polyak target update and the
  per-member gradient clip are the same.

Subclasses build their policy (``build_actor``: TD3's deterministic actor with
a target copy, SAC's squashed Gaussian with a temperature) and write their
update; neither builds anything the other needs.
"""
from __future__ import annotations

import copy
from typing import Any, Dict

import torch

from ...core.stacked import StackedMLP, VectorAdam, clip_grads_per_member, member_broadcast
from .base import PopulationAlgorithm
from .replay import MemberReplay


class PopActorCritic(PopulationAlgorithm):
    ACTION_SPACE = "continuous"
    shared_critic = False

    # -- construction --------------------------------------------------------------------------
    def build_learner(self) -> None:
        cfg, env = self.config, self.env
        space = env.single_action_space
        self.act_dim = int(space.shape[0])
        low = torch.as_tensor(space.low, dtype=torch.float32, device=self.device)
        high = torch.as_tensor(space.high, dtype=torch.float32, device=self.device)
        self.act_center, self.act_half = (high + low) / 2, (high - low) / 2
        self.obs_dim = int(env.obs_shape[0])
        self.Kc = 1 if self.shared_critic else self.K
        self.build_actor()   # before the critic: initialisation draws in the order the members always had
        self.critic = StackedMLP(2 * self.Kc, self.obs_dim + self.act_dim, self.hidden_sizes, 1,
                                 cfg.activation, cfg.layer_norm, device=self.device)
        self.critic_t = copy.deepcopy(self.critic).requires_grad_(False)
        self.critic_params = list(self.critic.parameters())
        self.critic_opt = VectorAdam(self.critic_params, 2 * self.Kc, lr=self.hp["critic_lr"][:self.Kc].repeat(2),
                                     eps=cfg.adam_eps, weight_decay=getattr(cfg, "weight_decay", 0.0),
                                     decoupled=True)
        self.replay = MemberReplay(cfg.buffer_size, self.K, self.n, env.obs_shape, torch.float32, (self.act_dim,),
                                   torch.float32, self.device, shared=cfg.shared_replay)

    def build_actor(self) -> None:
        """Create ``actor``, ``actor_params``, ``actor_opt`` (and what else the policy needs)."""
        raise NotImplementedError("abstract: PopActorCritic.build_actor")

    def optimizer_hparams(self) -> None:
        self.actor_opt.lr.copy_(self.hp["actor_lr"])
        self.critic_opt.lr.copy_(self.hp["critic_lr"][:self.Kc].repeat(2))

    def learner_components(self) -> Dict[str, Any]:
        return {"actor": self.actor, "critic": self.critic, "critic_t": self.critic_t, "actor_opt": self.actor_opt,
                "critic_opt": self.critic_opt}

    # -- acting -------------------------------------------------------------------------------------
    def to_env_action(self, a: torch.Tensor) -> torch.Tensor:
        """[-1, 1] policy output -> the env's Box."""
        return self.act_center + self.act_half * a

    def to_replay_action(self, action: torch.Tensor) -> torch.Tensor:
        return ((action - self.act_center) / self.act_half).clamp(-1.0, 1.0)

    # -- critic -------------------------------------------------------------------------------------
    def _critic_input(self, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        """``[K, B, obs+act]``; a shared critic sees all K*B pairs as one batch."""
        x = torch.cat([obs, act], -1)
        return x.reshape(1, -1, x.shape[-1]) if self.shared_critic else x

    def twin_q(self, net: StackedMLP, obs: torch.Tensor, act: torch.Tensor):
        """``([K, B], [K, B])`` Q1, Q2 values of the stacked twin critic."""
        K, B = obs.shape[:2]
        x = self._critic_input(obs, act)
        out = net(torch.cat([x, x], 0))[..., 0]              # [2Kc, B']
        return out[:self.Kc].reshape(K, B), out[self.Kc:].reshape(K, B)

    def q1_only(self, net: StackedMLP, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        """Q1 alone (TD3's policy loss): the member slice ``0..Kc-1`` of the twin net."""
        K, B = obs.shape[:2]
        return net(self._critic_input(obs, act), members=slice(0, self.Kc))[..., 0].reshape(K, B)

    def bellman_target(self, b: Dict[str, torch.Tensor], next_v: torch.Tensor) -> torch.Tensor:
        """``reward_scale * r + gamma * (1 - terminated) * V(s')`` per member (truncations bootstrap)."""
        hp = self.hp
        scale, gamma = member_broadcast(hp["reward_scale"], next_v), member_broadcast(hp["gamma"], next_v)
        return scale * b["reward"] + gamma * b["not_done"] * next_v

    def critic_loss(self, b: Dict[str, torch.Tensor], y: torch.Tensor) -> torch.Tensor:
        w = b["weight"]
        q1, q2 = self.twin_q(self.critic, b["obs"], b["action"])
        err = (q1 - y).square() + (q2 - y).square()
        if self.shared_critic:   # averaged over the population (K x B)
            return (w * err).sum() / w.sum().clamp_min(1.0)
        return ((w * err).sum(1) / w.sum(1).clamp_min(1.0)).sum()   # sum of per-member means

    def critic_step(self, b: Dict[str, torch.Tensor], y: torch.Tensor) -> None:
        grads = torch.autograd.grad(self.critic_loss(b, y), self.critic_params)
        self.critic_opt.step(self.clip(grads, twins=True))

    @torch.no_grad()
    def critic_soft_update(self, tau: torch.Tensor) -> None:
        """Polyak step of the twin target with per-member ``tau`` ``[K]`` (a zero
        entry keeps that member's target); a shared critic follows member 0."""
        ctau = (tau[:1] if self.shared_critic else tau).repeat(2)
        for p, t in zip(self.critic.parameters(), self.critic_t.parameters()):
            t.add_(member_broadcast(ctau, p) * (p - t))

    def clip(self, grads, twins: bool = False):
        """Each member's global gradient norm clipped to ``grad_clip``. ``twins``:
        the critic stack holds Q1 of member m at m and Q2 at Kc + m; a member's
        norm is then over both, as a single agent clips its twin critics jointly."""
        if self.config.grad_clip is None:
            return grads
        max_norm = torch.tensor(self.config.grad_clip, device=self.device)
        return clip_grads_per_member(list(grads), max_norm, pairs=self.Kc if twins else None)
