"""Isaac Lab RL envs as tensor vector envs: ``isaaclab:<task id>``.

The adapter class is shared with mjlab (``mjlab:<task id>``,
:mod:`rllib_fast.envs.mjlab`), which implements Isaac Lab's manager-based API on
MuJoCo Warp: the step signature is the same; the observation groups are named
``actor``/``critic`` there instead of ``policy``/``critic``, and mjlab can leave
ended envs un-reset (``auto_reset=False``) so the adapter resets them itself and
``final_obs`` is the true terminal observation (``reset_done=True``).

Isaac Lab's ``ManagerBasedRLEnv`` and ``DirectRLEnv`` are already batched on one
device and return ``(obs, reward, terminated, time_outs, extras)``. What the
adapter (:class:`IsaacLabVecEnv`) handles:

* **same-step reset**: ended envs are reset inside ``step``; the returned obs is
  already the reset observation and the terminal observation is *never*
  returned. ``final_obs`` of an ended env is therefore the observation the
  action was taken from (``s_t``), so a truncation bootstraps from ``V(s_t)`` --
  the approximation Isaac Lab's own rsl_rl/rl_games wrappers make
  (``rew += gamma * V(s_t) * time_outs``). Terminations do not bootstrap, so
  only truncated rows are affected. ``valid`` is None (no straddling transitions).
* **time-outs**: ``truncated = time_outs & ~terminated``; with
  ``cfg.is_finite_horizon`` a time-out is part of the MDP and reported as a
  termination instead (as Isaac Lab's wrappers do).
* **aliasing**: ``DirectRLEnv`` returns its live ``reset_terminated`` /
  ``reset_time_outs`` buffers (written in place each step), so flags and rewards
  are copied; observations are copied when they share storage with the previous
  step's (Isaac Lab computes them into fresh tensors).
* **observations**: ``obs["policy"]`` is the observation; ``obs["critic"]`` (the
  asymmetric critic input, when the task defines it) is ``Step.extras["states"]``,
  ``env.states`` and ``env.single_state_space`` -- the same names as the Isaac Gym
  adapter; ``Step.extras["final_states"]`` are the states that go with
  ``final_obs``. ``extras["log"]`` (episode statistics of the envs reset in that step,
  scalars) is ``env.last_log`` (copies; empty on steps without resets):
  ``Step.extras`` holds per-env ``[N, ...]`` tensors only.
* **clipping**: optional ``clip_obs``/``clip_actions`` (Isaac Lab's rl_games
  wrapper takes the same two); the spaces carry the bounds. Isaac Lab action
  spaces are unbounded ``Box(-inf, inf)`` and the tasks scale actions
  themselves, so an unbounded action space gets ``clip_actions=1.0`` unless
  given (the value of Isaac Lab's rl_games configs): policies need finite bounds.
* ``randomize_episode_progress`` randomises ``episode_length_buf`` (what the
  rsl_rl wrapper's ``init_at_random_ep_len`` does).

Creation: ``isaaclab:<gym id>`` launches the Isaac Sim app (``AppLauncher``,
headless) once per process, imports ``isaaclab_tasks`` (registers the ids),
builds the env config with ``parse_env_cfg`` (num_envs, device, seed) and
``gymnasium.make``. Or pass ``env`` (a built env) or ``env_class`` + ``cfg``.
"""
from __future__ import annotations

import importlib
import importlib.util
from typing import Any, Dict, Optional

import gymnasium as gym
import numpy as np
import torch

from .base import Step, TensorVecEnv, canonical_device, check_num_envs
from .isaacgym import to_gymnasium_space
from .registry import register_prefix

__all__ = ["IsaacLabVecEnv", "make_isaaclab", "IsaacLabNotInstalledError", "set_path"]


def _rows(mask: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """An ``[N]`` row mask shaped to broadcast over ``like``'s rows, whatever its
    rank (flat ``[N, D]`` groups, images, height maps, un-flattened histories)."""
    return mask.view(-1, *([1] * (like.dim() - 1)))


class IsaacLabNotInstalledError(ImportError):
    """Isaac Lab / Isaac Sim cannot be imported."""


def _group_spaces(space: Any, policy_group: str, critic_group: str):
    """(policy space, critic space or None) of a Dict observation space: a
    gymnasium Dict (Isaac Lab) or mjlab's own ``Dict`` (anything with ``.spaces``)."""
    spaces = getattr(space, "spaces", None)
    if isinstance(spaces, dict):
        if policy_group not in spaces:
            raise ValueError(f"observation group {policy_group!r} missing; the env has groups {sorted(spaces)}")
        return spaces[policy_group], spaces.get(critic_group)
    return space, None


def _box(space: Any, clip: Optional[float]) -> gym.Space:
    """A Box-like space as a float32 gymnasium Box; scalar bounds (mjlab's
    ``Box(shape=..., low=-inf)``) are broadcast to the space's shape."""
    shape = getattr(space, "shape", None)
    if shape is not None and hasattr(space, "low") and np.ndim(space.low) == 0 and tuple(shape) != ():
        low = np.full(tuple(shape), float(space.low), dtype=np.float32)
        high = np.full(tuple(shape), float(space.high), dtype=np.float32)
        if clip is not None:
            low, high = np.maximum(low, -clip), np.minimum(high, clip)
        return gym.spaces.Box(low=low, high=high, dtype=np.float32)
    return to_gymnasium_space(space, clip=clip)


def _bounded(space: gym.Space) -> bool:
    return not isinstance(space, gym.spaces.Box) or bool(
        np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high)))


class IsaacLabVecEnv(TensorVecEnv):
    """A manager-based/direct RL env (Isaac Lab, or mjlab through
    :class:`~rllib_fast.envs.mjlab.MjlabVecEnv`) as a ``TensorVecEnv``.

    Both libraries share one step signature ``(obs groups, reward, terminated,
    time_outs, extras)``; they differ in the names of the observation groups
    (``policy_group``/``critic_group``) and in whether the env resets ended
    envs itself. ``reset_done=True`` is for an env built with auto-reset off
    (mjlab's ``cfg.auto_reset=False``): its step returns the true terminal
    observation and this adapter resets the ended envs (``env.reset(env_ids=)``),
    so ``final_obs`` is exact instead of the same-step approximation.
    ``default_clip_actions`` bounds an unbounded action space when
    ``clip_actions`` is not given (policies need finite bounds).
    """

    def __init__(self, env: Any, clip_obs: Optional[float] = None, clip_actions: Optional[float] = None, *,
                 policy_group: str = "policy", critic_group: str = "critic", reset_done: bool = False,
                 default_clip_actions: float = 1.0, use_critic_group: bool = True):
        self.env = env
        base = getattr(env, "unwrapped", env)
        self._base = base
        self.num_envs = check_num_envs(base.num_envs)
        self.device = canonical_device(base.device)
        self._policy_group, self._critic_group = policy_group, critic_group
        self._reset_done = bool(reset_done)
        self._clip_obs = None if clip_obs is None or not np.isfinite(clip_obs) else float(clip_obs)
        #: clip_actions=False: advertise the (default) bound as the action space, never clamp
        #: (rsl_rl's clip_actions=None; the policy's own clip_actions=False then passes actions through)
        self._clamp_actions = clip_actions is not False
        if clip_actions is False:
            clip_actions = None
        self._clip_actions = (None if clip_actions is None or not np.isfinite(clip_actions)
                              else float(clip_actions))
        policy, critic = _group_spaces(base.single_observation_space, policy_group, critic_group)
        if not use_critic_group:
            critic = None
        self.single_observation_space = _box(policy, self._clip_obs)
        self.single_state_space = _box(critic, self._clip_obs) if critic is not None else None
        act = base.single_action_space
        if hasattr(act, "low") and self._clip_actions is None and not _bounded(_box(act, None)):
            self._clip_actions = float(default_clip_actions)
        if hasattr(act, "low"):
            act = _box(act, self._clip_actions)
        self.single_action_space = act
        mel = getattr(base, "max_episode_length", None)
        self.max_episode_steps = int(mel) if mel is not None else None
        self._finite_horizon = bool(getattr(getattr(base, "cfg", None), "is_finite_horizon", False))
        self._obs: Optional[torch.Tensor] = None
        self.states: Optional[torch.Tensor] = None
        self.last_log: Dict[str, Any] = {}

    def _own(self, t: torch.Tensor, prev: Optional[torch.Tensor]) -> torch.Tensor:
        """Both libraries compute observations into fresh tensors; copy only when
        one shares storage with what we returned last step (a reused buffer)."""
        if t.device != self.device or t.dtype != torch.float32 or (
                prev is not None and t.untyped_storage().data_ptr() == prev.untyped_storage().data_ptr()):
            return t.to(self.device, torch.float32, copy=True)
        return t

    def _groups(self, obs: Any, first: bool = False):
        """(policy obs, critic states or None), owned, float32 and clipped."""
        if isinstance(obs, dict):
            policy, critic = obs[self._policy_group], obs.get(self._critic_group)
        else:
            policy, critic = obs, None
        if self.single_state_space is None:
            critic = None
        if first:  # nothing to compare with yet: own the first observation outright
            policy = policy.to(self.device, torch.float32, copy=True)
            critic = None if critic is None else critic.to(self.device, torch.float32, copy=True)
        policy = self._own(policy, self._obs)
        if self._clip_obs is not None:
            policy = policy.clamp(-self._clip_obs, self._clip_obs)
        if critic is not None:
            critic = self._own(critic, self.states)
            if self._clip_obs is not None:
                critic = critic.clamp(-self._clip_obs, self._clip_obs)
        return policy, critic

    def reset(self, seed: Optional[int] = None) -> torch.Tensor:
        out = self.env.reset(seed=seed)
        obs = out[0] if isinstance(out, tuple) else out
        self._obs = None
        self._obs, states = self._groups(obs, first=True)
        if states is not None:
            self.states = states
        return self._obs

    @staticmethod
    def _copy_log(extras: Any) -> Dict[str, Any]:
        log = extras.get("log") if isinstance(extras, dict) else None
        if not isinstance(log, dict):
            return {}
        return {k: (v.detach().clone() if isinstance(v, torch.Tensor) else v) for k, v in log.items()}

    def step(self, actions: torch.Tensor) -> Step:
        if self._clip_actions is not None and self._clamp_actions:
            actions = actions.clamp(-self._clip_actions, self._clip_actions)
        obs, rew, terminated, time_outs, extras = self.env.step(actions.to(self.device))
        prev, prev_states = self._obs, self.states
        new_obs, new_states = self._groups(obs)
        terminated = terminated.to(self.device, torch.bool, copy=True)
        if self._finite_horizon:
            terminated |= time_outs.to(self.device, torch.bool)
            truncated = torch.zeros_like(terminated)
        else:
            truncated = time_outs.to(self.device, torch.bool) > terminated  # time_outs & ~terminated, one op
        done = terminated | truncated
        reward = rew.to(self.device, torch.float32, copy=True)
        self.last_log = self._copy_log(extras)
        if self._reset_done:
            # The step's observation is the true terminal one: it is final_obs, and the
            # ended envs are reset here. One host sync (the env's own step already makes
            # one to find its done envs); the reset observation replaces only ended rows.
            final_obs, final_states = new_obs, new_states
            if bool(done.any()):
                reset_obs, reset_extras = self.env.reset(env_ids=done.nonzero().squeeze(-1))
                self.last_log = self._copy_log(reset_extras)
                r_obs, r_states = self._groups(reset_obs)
                new_obs = torch.where(_rows(done, final_obs), r_obs, final_obs)
                if new_states is not None:
                    new_states = torch.where(_rows(done, final_states), r_states, final_states)
        else:
            # Same-step reset: the terminal observation is gone; the ended rows keep
            # the observation (and states) the action was taken from.
            final_obs = new_obs if prev is None else torch.where(_rows(done, new_obs), prev, new_obs)
            final_states = new_states
            if new_states is not None and prev_states is not None:
                final_states = torch.where(_rows(done, new_states), prev_states, new_states)
        out_extras: Dict[str, torch.Tensor] = {}
        if new_states is not None:
            self.states = new_states
            out_extras["states"] = new_states
            out_extras["final_states"] = final_states
        self._obs = new_obs
        return Step(obs=new_obs, reward=reward, terminated=terminated, truncated=truncated,
                    final_obs=final_obs, valid=None, extras=out_extras)

    def randomize_episode_progress(self) -> None:
        buf = getattr(self._base, "episode_length_buf", None)
        if buf is None or self.max_episode_steps is None:
            return
        self._base.episode_length_buf = torch.randint_like(buf, 0, max(1, self.max_episode_steps))

    def close(self) -> None:
        if hasattr(self.env, "close"):
            self.env.close()


_APP = None


def _launch_app(headless: bool, device: str, app_kwargs: Optional[Dict[str, Any]]) -> None:
    """Isaac Sim's app must run before ``isaaclab.envs`` can be imported; once per process."""
    global _APP
    if _APP is not None:
        return
    if importlib.util.find_spec("isaaclab") is None:
        raise IsaacLabNotInstalledError(
            "isaaclab: Isaac Lab is not installed (it needs Isaac Sim and an NVIDIA GPU; see "
            "https://isaac-sim.github.io/IsaacLab). Tests here use the stand-in "
            "env_class='rllib_fast.envs.standins.isaaclab:PointReachLabEnv'.")
    from isaaclab.app import AppLauncher

    _APP = AppLauncher(headless=headless, device=device, **(app_kwargs or {})).app


def set_path(obj: Any, dotted: str, value: Any, strict: bool = False) -> None:
    """Set ``a.b.c`` on a config object (dict levels by key). ``strict``: the
    last attribute must already exist on an object (a typo is an error, not a
    silently ignored new attribute); dict levels may gain keys."""
    *parents, last = dotted.split(".")
    for p in parents:
        obj = obj[p] if isinstance(obj, dict) else getattr(obj, p)
    if isinstance(obj, dict):
        obj[last] = value
    else:
        if strict and not hasattr(obj, last):
            raise AttributeError(f"{type(obj).__name__} has no attribute {last!r}")
        setattr(obj, last, value)


def make_isaaclab(task_id: str, num_envs: int = 1, device: Any = "cpu", seed: Optional[int] = None, *,
                  env: Any = None, env_class: Any = None, cfg: Any = None, headless: bool = True,
                  app_kwargs: Optional[Dict[str, Any]] = None, clip_obs: Optional[float] = None,
                  clip_actions: Optional[float] = None) -> IsaacLabVecEnv:
    """Creator behind ``isaaclab:<task id>`` (e.g. ``isaaclab:Isaac-Ant-Direct-v0``).

    ``cfg`` is a dict of dotted overrides of the env config
    (``{"episode_length_s": 10.0, "sim.dt": 0.01}``); with ``env_class`` it may
    instead be a config object. Seeds Python/numpy/torch and the env config's
    ``seed`` before creation.
    """
    from .isolated import load_object, seed_everything

    num_envs = check_num_envs(num_envs)
    dev = str(canonical_device(device))
    if env is not None:
        if int(getattr(env, "unwrapped", env).num_envs) != num_envs:
            raise ValueError(f"isaaclab: the given env has num_envs={env.unwrapped.num_envs} but "
                             f"num_envs={num_envs} was requested; they must match")
        return IsaacLabVecEnv(env, clip_obs=clip_obs, clip_actions=clip_actions)
    seed_everything(seed)
    if env_class is not None:
        cls = load_object(env_class) if isinstance(env_class, str) else env_class
        if cfg is None or isinstance(cfg, dict):
            module = importlib.import_module(cls.__module__)
            cfg_cls = getattr(cls, "cfg_class", None) or getattr(module, f"{cls.__name__}Cfg", None)
            if cfg_cls is None:
                raise ValueError(f"isaaclab: pass `cfg` (an env config object) for {cls.__name__}")
            overrides, cfg = dict(cfg or {}), cfg_cls()
            for k, v in overrides.items():
                set_path(cfg, k, v)
        cfg.num_envs = num_envs
        cfg.seed = seed
        cfg.sim.device = dev
        return IsaacLabVecEnv(cls(cfg), clip_obs=clip_obs, clip_actions=clip_actions)
    _launch_app(headless, dev, app_kwargs)
    import isaaclab_tasks  # noqa: F401  (registers the Isaac-* gym ids)
    from isaaclab_tasks.utils import parse_env_cfg

    env_cfg = parse_env_cfg(task_id, device=dev, num_envs=num_envs)
    env_cfg.seed = seed
    for k, v in dict(cfg or {}).items():
        set_path(env_cfg, k, v)
    return IsaacLabVecEnv(gym.make(task_id, cfg=env_cfg).unwrapped, clip_obs=clip_obs,
                          clip_actions=clip_actions)


register_prefix("isaaclab", make_isaaclab, probe=False)   # a simulator: not started for config checks
