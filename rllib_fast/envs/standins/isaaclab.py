"""A stand-in for Isaac Lab's ``DirectRLEnv`` / ``ManagerBasedRLEnv`` RL API.

Reproduces what an adapter relies on (Isaac Lab's documented ``ManagerBasedRLEnv`` step order):

* ``reset(seed=None, options=None) -> (obs, extras)``; obs is a dict with
  ``"policy"`` (and ``"critic"`` when the task has a state space);
* ``step(action) -> (obs, reward, terminated, time_outs, extras)`` in Isaac
  Lab's order: pre-physics -> ``decimation`` x (apply action, sim step) ->
  ``episode_length_buf += 1`` -> dones (``time_outs`` when
  ``episode_length_buf >= max_episode_length - 1``) -> rewards -> **reset of the
  ended envs inside the same step** (their episode statistics go to
  ``extras["log"]``) -> observations, so the returned obs of an ended env is
  already its reset observation and the terminal one is never returned;
* ``reset_terminated``/``reset_time_outs`` are written in place into live
  buffers and returned as such (aliased), as Isaac Lab's ``DirectRLEnv`` does;
* gymnasium spaces: ``single_observation_space["policy"/"critic"]``,
  ``single_action_space``; ``episode_length_buf`` is assignable (wrappers
  randomise it); ``cfg.is_finite_horizon``; ``max_episode_length =
  ceil(episode_length_s / (decimation * sim.dt))``.

Same point-reaching task as :class:`~rllib_fast.envs.standins.vectask.PointReachTask`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, Optional

import gymnasium as gym
import numpy as np
import torch

__all__ = ["PointReachLabEnvCfg", "PointReachLabEnv"]


@dataclass
class _SimCfg:
    dt: float = 0.025
    device: str = "cpu"


@dataclass
class PointReachLabEnvCfg:
    """Mirrors the fields of Isaac Lab's ``DirectRLEnvCfg`` the adapter reads."""

    num_envs: int = 16
    episode_length_s: float = 3.2
    decimation: int = 2
    is_finite_horizon: bool = False
    with_critic_obs: bool = True
    seed: Optional[int] = None
    sim: _SimCfg = field(default_factory=_SimCfg)


class PointReachLabEnv:
    """Direct-workflow style env: hooks ``_pre_physics_step``, ``_apply_action``,
    ``_get_dones``, ``_get_rewards``, ``_reset_idx``, ``_get_observations``."""

    is_vector_env = True
    metadata = {"render_modes": [None]}

    def __init__(self, cfg: PointReachLabEnvCfg, render_mode: Optional[str] = None, **kwargs: Any):
        self.cfg = cfg
        self.num_envs = int(cfg.num_envs)
        self.device = cfg.sim.device
        self.step_dt = cfg.decimation * cfg.sim.dt
        self.max_episode_length = math.ceil(cfg.episode_length_s / self.step_dt)
        if cfg.seed is not None:
            torch.manual_seed(cfg.seed)
        n, d = self.num_envs, self.device
        spaces = {"policy": gym.spaces.Box(-np.inf, np.inf, (6,), np.float32)}
        if cfg.with_critic_obs:
            spaces["critic"] = gym.spaces.Box(-np.inf, np.inf, (8,), np.float32)
        self.single_observation_space = gym.spaces.Dict(spaces)
        self.single_action_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, n)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, n)
        self.episode_length_buf = torch.zeros(n, dtype=torch.long, device=d)
        self.reset_terminated = torch.zeros(n, dtype=torch.bool, device=d)
        self.reset_time_outs = torch.zeros(n, dtype=torch.bool, device=d)
        self.reset_buf = torch.zeros(n, dtype=torch.bool, device=d)
        self.reward_buf = torch.zeros(n, dtype=torch.float32, device=d)
        self.pos = torch.zeros((n, 2), device=d)
        self.vel = torch.zeros((n, 2), device=d)
        self.target = torch.zeros((n, 2), device=d)
        self.actions = torch.zeros((n, 2), device=d)
        self._ep_return = torch.zeros(n, device=d)
        self.extras: Dict[str, Any] = {}

    @property
    def unwrapped(self) -> "PointReachLabEnv":
        return self

    # -- hooks ----------------------------------------------------------------
    def _pre_physics_step(self, actions: torch.Tensor) -> None:
        self.actions = actions.clone().clamp(-1.0, 1.0)

    def _apply_action(self) -> None:
        self.vel.mul_(0.9).add_(self.actions, alpha=self.cfg.sim.dt * 4.0)
        self.pos.add_(self.vel, alpha=self.cfg.sim.dt)

    def _get_dones(self):
        out = (self.pos.abs() > 2.0).any(dim=-1)
        return out, self.episode_length_buf >= self.max_episode_length - 1

    def _get_rewards(self) -> torch.Tensor:
        return 1.0 - torch.linalg.vector_norm(self.target - self.pos, dim=-1)

    def _reset_idx(self, env_ids: torch.Tensor) -> None:
        k = len(env_ids)
        self.extras["log"] = {"Episode_Reward/mean": self._ep_return[env_ids].mean(),
                              "Episode_Termination/out_of_bounds":
                                  self.reset_terminated[env_ids].float().mean(),
                              "num_resets": float(k)}
        self._ep_return[env_ids] = 0.0
        self.pos[env_ids] = (torch.rand((k, 2), device=self.device) * 2 - 1) * 0.5
        self.vel[env_ids] = 0.0
        self.target[env_ids] = torch.rand((k, 2), device=self.device) * 2 - 1
        self.episode_length_buf[env_ids] = 0

    def _get_observations(self) -> Dict[str, torch.Tensor]:
        policy = torch.cat([self.pos, self.vel, self.target - self.pos], dim=-1)
        obs = {"policy": policy}
        if self.cfg.with_critic_obs:
            obs["critic"] = torch.cat([policy, self.target], dim=-1)
        return obs

    # -- the RL API -----------------------------------------------------------------
    def reset(self, seed: Optional[int] = None, options: Optional[dict] = None):
        if seed is not None:
            torch.manual_seed(seed)
        self._reset_idx(torch.arange(self.num_envs, device=self.device))
        self.extras = {}
        return self._get_observations(), self.extras

    def step(self, action: torch.Tensor):
        action = action.to(self.device)
        self._pre_physics_step(action)
        for _ in range(self.cfg.decimation):
            self._apply_action()
        self.episode_length_buf += 1
        self.reset_terminated[:], self.reset_time_outs[:] = self._get_dones()
        self.reset_buf = self.reset_terminated | self.reset_time_outs
        self.reward_buf = self._get_rewards()
        self._ep_return += self.reward_buf
        self.extras = {}
        reset_env_ids = self.reset_buf.nonzero(as_tuple=False).squeeze(-1)
        if len(reset_env_ids) > 0:
            self._reset_idx(reset_env_ids)
        obs = self._get_observations()
        return obs, self.reward_buf, self.reset_terminated, self.reset_time_outs, self.extras

    def close(self) -> None:
        pass
