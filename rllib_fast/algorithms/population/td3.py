"""PopTD3: K TD3 agents updated as one stacked network.

TD3 (Fujimoto et al. 2018) per member: twin critics with clipped double-Q
targets, target-policy smoothing (clipped Gaussian noise on the target
action), delayed policy and target updates. Everything is per member: its
hyperparameters are ``[K]`` tensors (lr, gamma, tau, noises, delay, reward
scale), its noise comes from its own counter-based stream, its minibatch from
its own replay columns. A member's policy delay is a mask on the optimizer
step (``VectorAdam.step(mask=...)``), so members with different delays still
share every kernel.

With ``shared_critic=True`` (CEM-RL, DvD) there is one critic for the whole
population (Flajolet et al. §4.2's "second-order modification"): each
member's batch goes through its own target policy, the critic loss is the
mean over all K x B samples, and the policies are then updated in parallel
against that critic.
"""
from __future__ import annotations

import copy
from typing import Any, Dict

import torch

from ...core.stacked import StackedMLP, VectorAdam, clip_grads_per_member, copy_members
from .base import PopulationAlgorithm
from .config import PopTD3Config
from .replay import MemberReplay


def _b(v: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """Broadcast a ``[K]`` hyperparameter over a ``[K, ...]`` tensor."""
    return v.view(-1, *([1] * (like.dim() - 1)))


class PopTD3(PopulationAlgorithm):
    shared_critic = False

    @classmethod
    def get_default_config(cls) -> PopTD3Config:
        return PopTD3Config()

    # -- construction --------------------------------------------------------------------------
    def build_learner(self) -> None:
        cfg, env = self.config, self.env
        if env.is_discrete:
            raise TypeError(f"{type(self).__name__} needs a continuous (Box) action space; env {cfg.env!r} has "
                            f"{env.single_action_space}")
        space = env.single_action_space
        self.act_dim = int(space.shape[0])
        low = torch.as_tensor(space.low, dtype=torch.float32, device=self.device)
        high = torch.as_tensor(space.high, dtype=torch.float32, device=self.device)
        self.act_center, self.act_half = (high + low) / 2, (high - low) / 2
        obs_dim = int(env.obs_shape[0])
        K, Kc = self.K, (1 if self.shared_critic else self.K)
        hid, act, ln = tuple(cfg.hidden_sizes), cfg.activation, cfg.layer_norm
        self.actor = StackedMLP(K, obs_dim, hid, self.act_dim, act, ln, device=self.device)
        # twin critics as one stacked net of 2*Kc members: member j < Kc is Q1 of member j,
        # member Kc + j its Q2 (one kernel per layer serves both)
        self.critic = StackedMLP(2 * Kc, obs_dim + self.act_dim, hid, 1, act, ln, device=self.device)
        self.actor_t = copy.deepcopy(self.actor).requires_grad_(False)
        self.critic_t = copy.deepcopy(self.critic).requires_grad_(False)
        self.Kc = Kc
        self.actor_params = list(self.actor.parameters())
        self.critic_params = list(self.critic.parameters())
        self.actor_opt = VectorAdam(self.actor_params, K, lr=self.hp["actor_lr"], eps=cfg.adam_eps,
                                    weight_decay=getattr(cfg, "weight_decay", 0.0), decoupled=True)
        self.critic_opt = VectorAdam(self.critic_params, 2 * Kc, lr=self.hp["critic_lr"][:Kc].repeat(2),
                                     eps=cfg.adam_eps, weight_decay=getattr(cfg, "weight_decay", 0.0), decoupled=True)
        self.replay = MemberReplay(cfg.buffer_size, K, self.n, env.obs_shape, torch.float32, (self.act_dim,),
                                   torch.float32, self.device, shared=cfg.shared_replay)
        # update counter on the device (TD3's delay test without a host value in the graph)
        self.update_counter = torch.zeros((), dtype=torch.int64, device=self.device)

    def optimizer_hparams(self) -> None:
        self.actor_opt.lr.copy_(self.hp["actor_lr"])
        self.critic_opt.lr.copy_(self.hp["critic_lr"][:self.Kc].repeat(2))

    def learner_components(self) -> Dict[str, Any]:
        return {"actor": self.actor, "critic": self.critic, "actor_t": self.actor_t, "critic_t": self.critic_t,
                "actor_opt": self.actor_opt, "critic_opt": self.critic_opt,
                "update_counter": _TensorBox(self.update_counter)}

    # -- acting -------------------------------------------------------------------------------------
    def pi(self, net, obs: torch.Tensor) -> torch.Tensor:
        """Deterministic policy in [-1, 1] (``[K, B, A]``)."""
        return torch.tanh(net(obs))

    def policy_actions(self, obs: torch.Tensor, explore: bool) -> torch.Tensor:
        a = self.pi(self.actor, obs.float())
        if explore:
            noise = self.rng.normal(*a.shape[1:]) * _b(self.hp["exploration_noise"], a)
            a = (a + noise).clamp(-1.0, 1.0)
        return self.act_center + self.act_half * a

    def random_actions(self) -> torch.Tensor:
        return super().random_actions()

    def to_replay_action(self, action: torch.Tensor) -> torch.Tensor:
        return ((action - self.act_center) / self.act_half).clamp(-1.0, 1.0)

    # -- learning --------------------------------------------------------------------------------------
    def twin_q(self, net, obs: torch.Tensor, act: torch.Tensor):
        """``([K, B], [K, B])`` Q1, Q2 values of the stacked twin critic; a shared
        critic sees all K*B pairs as one batch."""
        x = torch.cat([obs, act], -1)
        K, B = x.shape[:2]
        if self.shared_critic:
            x = x.reshape(1, K * B, -1)
        out = net(torch.cat([x, x], 0))[..., 0]              # [2Kc, B']
        return out[:self.Kc].reshape(K, B), out[self.Kc:].reshape(K, B)

    def q1_only(self, net, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        """Q1 alone (the policy loss): members ``0..Kc-1`` of the twin net."""
        x = torch.cat([obs, act], -1)
        K, B = x.shape[:2]
        if self.shared_critic:
            x = x.reshape(1, K * B, -1)
        h = x
        n = len(net.layers)
        for i, layer in enumerate(net.layers):
            w = layer.weight[:self.Kc]
            h = torch.baddbmm(layer.bias[:self.Kc], h, w)
            if i < n - 1:
                if net.norms is not None:
                    ln = net.norms[i]
                    h = torch.nn.functional.layer_norm(h, h.shape[-1:], eps=ln.eps) * ln.weight[:self.Kc] \
                        + ln.bias[:self.Kc]
                h = net.act(h)
        return h[..., 0].reshape(K, B)

    def update_step(self) -> None:
        batch = self.replay.sample(self.config.batch_size, self.rng)
        noise = self.rng.normal(self.config.batch_size, self.act_dim)
        self.td3_step(batch, noise)

    def critic_targets(self, b: Dict[str, torch.Tensor], noise: torch.Tensor) -> torch.Tensor:
        hp = self.hp
        with torch.no_grad():
            eps = (noise * _b(hp["target_noise"], noise))
            clip = _b(hp["noise_clip"], noise)
            eps = torch.maximum(torch.minimum(eps, clip), -clip)
            na = (self.pi(self.actor_t, b["next_obs"]) + eps).clamp(-1.0, 1.0)
            qt = torch.minimum(*self.twin_q(self.critic_t, b["next_obs"], na))
            return _b(hp["reward_scale"], qt) * b["reward"] + _b(hp["gamma"], qt) * b["not_done"] * qt

    def critic_loss(self, b: Dict[str, torch.Tensor], y: torch.Tensor) -> torch.Tensor:
        w = b["weight"]
        q1, q2 = self.twin_q(self.critic, b["obs"], b["action"])
        err = (q1 - y).square() + (q2 - y).square()
        if self.shared_critic:   # averaged over the population (K x B)
            return (w * err).sum() / w.sum().clamp_min(1.0)
        return ((w * err).sum(1) / w.sum(1).clamp_min(1.0)).sum()   # sum of per-member means

    def actor_loss(self, b: Dict[str, torch.Tensor]) -> torch.Tensor:
        w = b["weight"]
        qv = self.q1_only(self.critic, b["obs"], self.pi(self.actor, b["obs"]))
        return (-(w * qv).sum(1) / w.sum(1).clamp_min(1.0)).sum()

    def td3_step(self, b: Dict[str, torch.Tensor], noise: torch.Tensor) -> None:
        """One TD3 update of every member on batch ``b`` (``[K, B, ...]``) with
        target-smoothing noise ``noise`` (``[K, B, A]`` standard normals)."""
        hp = self.hp
        y = self.critic_targets(b, noise)
        grads = torch.autograd.grad(self.critic_loss(b, y), self.critic_params)
        self.critic_opt.step(self.clip(grads))
        self.update_counter += 1
        delay = hp["policy_delay"].round().clamp_min(1.0).long()
        mask = torch.remainder(self.update_counter, delay) == 0            # [K]
        grads = torch.autograd.grad(self.policy_loss(b), self.actor_params)
        self.actor_opt.step(self.clip(grads), mask=mask)
        self.soft_update(mask)

    def policy_loss(self, b: Dict[str, torch.Tensor]) -> torch.Tensor:
        return self.actor_loss(b)

    def clip(self, grads):
        if self.config.grad_clip is None:
            return grads
        return clip_grads_per_member(list(grads), torch.tensor(self.config.grad_clip, device=self.device))

    @torch.no_grad()
    def soft_update(self, mask: torch.Tensor) -> None:
        tau = self.hp["tau"]
        atau = tau * mask.float()
        for p, t in zip(self.actor.parameters(), self.actor_t.parameters()):
            t.add_(_b(atau, p) * (p - t))
        if self.shared_critic:  # the shared critic's targets follow member 0's delay schedule
            ctau = (tau[:1] * mask[:1].float()).repeat(2)
        else:
            ctau = (tau * mask.float()).repeat(2)
        for p, t in zip(self.critic.parameters(), self.critic_t.parameters()):
            t.add_(_b(ctau, p) * (p - t))

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


class _TensorBox:
    """state_dict wrapper for a loose device tensor (checkpointed in place)."""

    def __init__(self, t: torch.Tensor):
        self.t = t

    def state_dict(self):
        return {"t": self.t.cpu().clone()}

    def load_state_dict(self, state) -> None:
        self.t.copy_(state["t"])
