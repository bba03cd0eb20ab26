"""PopDQN: K double-DQN agents as one stacked Q-network.

Per member: its own epsilon-greedy stream (its epsilon anneals from
``epsilon_initial`` to its own ``epsilon_final``), its own lr, gamma and
Polyak tau, its own replay columns. One update = one Huber double-Q step of
every member; the paper fuses 10 of them per call (``fused_update_steps``).
Image observations (channels-last ``[H, W, C]``, the env convention that
``QNetwork`` also reads) use a stacked MinAtar-style trunk (one grouped conv).
"""
from __future__ import annotations

import copy
from typing import Any, Dict

import torch
from torch import nn
from torch.nn import functional as F

from ...core.qnets import ChannelsLastToFirst, resolve_trunk_kind
from ...core.stacked import (StackedConv2d, StackedMLP, VectorAdam, clip_grads_per_member, copy_members,
                             member_broadcast)
from .base import PopulationAlgorithm
from .config import PopDQNConfig
from .replay import MemberReplay


class StackedQNet(nn.Module):
    """MLP, or for channels-last ``[H, W, C]`` images one 3x3 conv (16 channels,
    MinAtar) + MLP head: member m computes what ``QNetwork(obs_shape,
    trunk="minatar_cnn")`` computes with the same weights (same layout
    handling, same flatten order)."""

    def __init__(self, K: int, obs_shape: tuple, num_actions: int, hidden, activation: str, device):
        super().__init__()
        obs_shape = tuple(int(s) for s in obs_shape)
        self.conv = None
        if resolve_trunk_kind(obs_shape) != "mlp":
            h, w, c = obs_shape
            self.to_channels_first = ChannelsLastToFirst()
            self.conv = StackedConv2d(K, c, 16, 3, device=device)
            in_dim = 16 * (h - 2) * (w - 2)
        else:
            in_dim = obs_shape[0]
        self.head = StackedMLP(K, in_dim, hidden, num_actions, activation, device=device)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = obs.float()
        if self.conv is not None:
            K, B = x.shape[:2]
            x = self.to_channels_first(x.flatten(0, 1)).unflatten(0, (K, B))   # [K, B, C, H, W]
            x = F.relu(self.conv(x)).reshape(K, B, -1)
        return self.head(x)


class PopDQN(PopulationAlgorithm):
    ACTION_SPACE = "discrete"
    @classmethod
    def get_default_config(cls) -> PopDQNConfig:
        return PopDQNConfig()

    def build_learner(self) -> None:
        cfg, env = self.config, self.env
        self.num_actions = int(env.single_action_space.n)
        self.q = StackedQNet(self.K, env.obs_shape, self.num_actions, self.hidden_sizes, cfg.activation,
                             self.device)
        self.q_t = copy.deepcopy(self.q).requires_grad_(False)
        self.params = list(self.q.parameters())
        self.opt = VectorAdam(self.params, self.K, lr=self.hp["lr"], eps=cfg.adam_eps)
        obs_dtype = torch.uint8 if env.single_observation_space.dtype == "uint8" else torch.float32
        self.replay = MemberReplay(cfg.buffer_size, self.K, self.n, env.obs_shape, obs_dtype, (), torch.int64,
                                   self.device, shared=cfg.shared_replay)

    def optimizer_hparams(self) -> None:
        self.opt.lr.copy_(self.hp["lr"])

    def learner_components(self) -> Dict[str, Any]:
        return {"q": self.q, "q_t": self.q_t, "opt": self.opt}

    def epsilon(self) -> torch.Tensor:
        cfg = self.config
        frac = min(1.0, self.member_env_steps / cfg.epsilon_timesteps)
        return cfg.epsilon_initial + frac * (self.hp["epsilon_final"] - cfg.epsilon_initial)

    @torch.no_grad()
    def policy_actions(self, obs: torch.Tensor, explore: bool) -> torch.Tensor:
        greedy = self.q(obs).argmax(-1)                                   # [K, n]
        if not explore:
            return greedy
        shape = greedy.shape[1:]
        rand = self.rng.randint(self.num_actions, *shape)
        take = self.rng.uniform(*shape) < member_broadcast(self.epsilon(), greedy)
        return torch.where(take, rand, greedy)

    def update_step(self) -> None:
        self.dqn_step(self.replay.sample(self.config.batch_size, self.rng))

    def dqn_step(self, b: Dict[str, torch.Tensor]) -> None:
        hp, cfg = self.hp, self.config
        K, B = b["action"].shape
        q_all = self.q(torch.cat([b["obs"], b["next_obs"]], 1))          # [K, 2B, A]
        q_sa = q_all[:, :B].gather(2, b["action"].unsqueeze(2))[..., 0]
        with torch.no_grad():
            next_a = q_all[:, B:].argmax(-1, keepdim=True)
            next_v = self.q_t(b["next_obs"]).gather(2, next_a)[..., 0]
            y = b["reward"] + member_broadcast(hp["gamma"], next_v) * b["not_done"] * next_v
        w = b["weight"]
        loss = ((w * F.huber_loss(q_sa, y, delta=cfg.huber_delta, reduction="none")).sum(1)
                / w.sum(1).clamp_min(1.0)).sum()
        grads = torch.autograd.grad(loss, self.params)
        if cfg.grad_clip is not None:
            grads = clip_grads_per_member(list(grads), torch.tensor(cfg.grad_clip, device=self.device))
        self.opt.step(grads)
        with torch.no_grad():
            for p, t in zip(self.q.parameters(), self.q_t.parameters()):
                t.add_(member_broadcast(hp["tau"], p) * (p - t))

    @torch.no_grad()
    def exploit_members(self, src: torch.Tensor, dst: torch.Tensor) -> None:
        copy_members(self.q, src, dst)
        copy_members(self.q_t, src, dst)
        if self.config.pbt_exploit_optimizer == "copy":
            self.opt.copy_members(src, dst)
        else:
            self.opt.reset_members(dst)
