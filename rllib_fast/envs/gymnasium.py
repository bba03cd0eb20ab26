"""Bridges between gymnasium vector envs and tensor vector envs, both ways.

* :class:`GymVectorEnvAdapter` wraps any gymnasium 1.x ``VectorEnv`` (sync,
  async or a native vector entry point, in any autoreset mode) as a
  :class:`~rllib_fast.envs.base.TensorVecEnv` on a chosen torch device. The
  ``gym:`` registry prefix builds one: ``make("gym:CartPole-v1", num_envs=8)``.
* :class:`TensorVecEnvToGym` exposes any ``TensorVecEnv`` as a numpy gymnasium
  ``VectorEnv`` so RLlib's built-in algorithms (and other gymnasium-vector
  consumers) run on exactly the same task. :func:`rllib_env_creator` /
  :func:`register_rllib_gym_envs` register every built-in task with Tune as
  ``"rllib-fast-gym:<name>"``.

Autoreset semantics, gym -> tensor (``GymVectorEnvAdapter``):

* ``NEXT_STEP``: the done step returns the terminal obs, so ``final_obs = obs``;
  the following step returns the reset obs for those envs (the action given to
  them is ignored by the source) and is marked ``valid=False`` with reward 0 and
  both flags False.
* ``SAME_STEP``: ``obs`` is already the reset obs; ``final_obs`` rows of ended
  envs come from ``infos["final_obs"]`` (mask ``infos["_final_obs"]``);
  ``valid=None``.
* ``DISABLED``: the adapter resets ended envs itself with
  ``env.reset(options={"reset_mask": done})`` right after the step, giving the
  same-step semantics above.

In every mode ``truncated = truncated & ~terminated`` (a termination wins), obs
and rewards are float32, and discrete actions are cast to the source's integer
dtype (continuous ones to its float dtype, float32 in practice).

Tensor -> gym (``TensorVecEnvToGym``): see the class docstring.
"""
from __future__ import annotations

import warnings
from typing import Any, Dict, Mapping, Optional, Tuple

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from .base import Step, TensorVecEnv
from .registry import register_prefix
from .upload import StepUploader

__all__ = [
    "GymVectorEnvAdapter",
    "TensorVecEnvToGym",
    "make_gym",
    "rllib_env_creator",
    "register_rllib_gym_envs",
    "RLLIB_GYM_PREFIX",
]

#: Tune/RLlib env-name prefix of the built-in tasks exposed as gymnasium vector envs.
RLLIB_GYM_PREFIX = "rllib-fast-gym:"


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------
def _coerce_autoreset_mode(mode: Any) -> AutoresetMode:
    """``AutoresetMode`` from an enum, its value (``"NextStep"``) or its name
    (``"next_step"``, ``"NEXT_STEP"``)."""
    if isinstance(mode, AutoresetMode):
        return mode
    if isinstance(mode, str):
        for m in AutoresetMode:
            if mode == m.value or mode.upper() == m.name or mode.lower() == m.value.lower():
                return m
    raise ValueError(f"unknown autoreset_mode {mode!r}; allowed: "
                     f"{', '.join(m.name for m in AutoresetMode)} (gymnasium.vector.AutoresetMode)")


def _source_autoreset_mode(env: gym.vector.VectorEnv) -> AutoresetMode:
    mode = getattr(env, "metadata", {}).get("autoreset_mode")
    if mode is None:
        # gymnasium 1.x's default (and what make_vec warns about when absent)
        warnings.warn(f"{env} has no metadata['autoreset_mode']; assuming NEXT_STEP", stacklevel=3)
        return AutoresetMode.NEXT_STEP
    return _coerce_autoreset_mode(mode)


def _np_action_dtype(space: gym.Space) -> np.dtype:
    dtype = np.dtype(space.dtype) if getattr(space, "dtype", None) is not None else np.dtype(np.float32)
    if isinstance(space, gym.spaces.Box):
        return dtype if np.issubdtype(dtype, np.floating) else np.dtype(np.float32)
    return dtype if np.issubdtype(dtype, np.integer) else np.dtype(np.int64)


def _owned_f32(x: Any) -> np.ndarray:
    """A fresh C-contiguous float32 copy (gym sources may reuse their buffers)."""
    return np.array(x, dtype=np.float32, copy=True, order="C")


# ---------------------------------------------------------------------------
# gymnasium VectorEnv -> TensorVecEnv
# ---------------------------------------------------------------------------
class GymVectorEnvAdapter(TensorVecEnv):
    """A gymnasium ``VectorEnv`` (any autoreset mode) as a ``TensorVecEnv``.

    Args:
        env: the gymnasium vector env (gymnasium >= 1.0 API). Its single
            observation space must be a ``Box``; use gymnasium's observation
            wrappers (e.g. ``FlattenObservation``) for other spaces.
        device: torch device of every returned tensor.
        seed: used for the first ``reset`` when that is called without a seed.
        max_episode_steps: overrides what is read from the env spec.

    Attributes besides the contract: ``gym_env`` (the wrapped env),
    ``autoreset_mode`` (the source's ``AutoresetMode``) and ``last_infos`` (the
    raw info dict of the latest reset/step, for inspection only).
    """

    def __init__(self, env: gym.vector.VectorEnv, device: Any = "cpu", seed: Optional[int] = None,
                 max_episode_steps: Optional[int] = None):
        self.gym_env = env
        self.num_envs = int(env.num_envs)
        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        obs_space = env.single_observation_space
        if not isinstance(obs_space, gym.spaces.Box):
            raise TypeError(f"GymVectorEnvAdapter needs a Box single_observation_space, got {obs_space!r}; "
                            "wrap the env with e.g. gymnasium.wrappers.vector.FlattenObservation")
        self._source_obs_space = obs_space
        self.single_observation_space = gym.spaces.Box(
            low=np.asarray(obs_space.low, dtype=np.float32),
            high=np.asarray(obs_space.high, dtype=np.float32), dtype=np.float32)
        self.single_action_space = env.single_action_space
        batched = getattr(env, "action_space", None)
        self._act_dtype = _np_action_dtype(batched if batched is not None else self.single_action_space)
        self.autoreset_mode = _source_autoreset_mode(env)
        self.max_episode_steps = (int(max_episode_steps) if max_episode_steps is not None
                                  else self._spec_max_episode_steps(env))
        self._seed = seed
        self._seeded = False
        self._prev_done = np.zeros(self.num_envs, dtype=bool)
        self._uploader = StepUploader(self.num_envs, self.obs_shape, self.device)
        self.last_infos: Dict[str, Any] = {}

    @staticmethod
    def _spec_max_episode_steps(env: gym.vector.VectorEnv) -> Optional[int]:
        spec = getattr(env, "spec", None)
        if spec is not None:
            kw = getattr(spec, "kwargs", None) or {}
            if kw.get("max_episode_steps") is not None:
                return int(kw["max_episode_steps"])
            if getattr(spec, "max_episode_steps", None) is not None:
                return int(spec.max_episode_steps)
        mes = getattr(getattr(env, "unwrapped", env), "max_episode_steps", None)
        return int(mes) if isinstance(mes, (int, np.integer)) else None

    # -- contract ---------------------------------------------------------------
    def reset(self, seed: Optional[int] = None) -> torch.Tensor:
        if seed is None and not self._seeded:
            seed = self._seed
        self._seeded = True
        obs, infos = self.gym_env.reset(seed=seed)
        self.last_infos = infos
        self._prev_done[:] = False
        return self._uploader.obs(obs)

    def _actions_to_numpy(self, actions: Any) -> np.ndarray:
        if isinstance(actions, torch.Tensor):
            actions = actions.detach().cpu().numpy()
        return np.asarray(actions).astype(self._act_dtype, copy=False)

    def step(self, actions: Any) -> Step:
        obs, reward, terminated, truncated, infos = self.gym_env.step(self._actions_to_numpy(actions))
        terminated = np.asarray(terminated, dtype=bool)
        truncated = np.asarray(truncated, dtype=bool) & ~terminated
        reward = np.asarray(reward, dtype=np.float32)
        valid = None
        mode = self.autoreset_mode
        if mode is AutoresetMode.NEXT_STEP:
            straddle = self._prev_done
            valid = ~straddle
            if straddle.any():
                # the source already zeroes these, but be robust to custom vector envs
                reward = np.where(straddle, np.float32(0.0), reward)
                terminated = terminated & valid
                truncated = truncated & valid
            final_obs = obs
            self._prev_done = terminated | truncated
        elif mode is AutoresetMode.SAME_STEP:
            final_obs = obs
            mask = infos.get("_final_obs") if isinstance(infos, dict) else None
            if mask is not None and np.any(mask):
                mask = np.asarray(mask, dtype=bool)
                final_obs = _owned_f32(obs)
                src = infos["final_obs"]
                if isinstance(src, np.ndarray) and src.dtype != object and src.shape[0] == self.num_envs:
                    final_obs[mask] = src[mask]
                else:
                    final_obs[mask] = np.stack([np.asarray(src[i], dtype=np.float32)
                                                for i in np.flatnonzero(mask)])
        else:  # DISABLED: reset ended envs ourselves -> same-step semantics
            done = terminated | truncated
            final_obs = obs
            if done.any():
                final_obs = _owned_f32(obs)  # copy before the source may reuse its buffer
                obs, reset_infos = self.gym_env.reset(options={"reset_mask": done.copy()})
                infos = {"step": infos, "reset": reset_infos}
        self.last_infos = infos
        o, fo, r, te, tr, v = self._uploader.step(obs, final_obs, reward, terminated, truncated, valid)
        return Step(obs=o, reward=r, terminated=te, truncated=tr, final_obs=fo, valid=v)

    def close(self) -> None:
        self.gym_env.close()


def _resolve_vectorization_mode(env_id: str, vectorization_mode: Any,
                                autoreset_mode: Optional[AutoresetMode]) -> gym.VectorizeMode:
    if vectorization_mode is not None:
        return gym.VectorizeMode(vectorization_mode)
    spec = gym.spec(env_id)
    if spec.vector_entry_point is None:
        return gym.VectorizeMode.SYNC
    if autoreset_mode is None:
        return gym.VectorizeMode.VECTOR_ENTRY_POINT
    # a native vector env takes no vector_kwargs: keep it only if it already has
    # the requested autoreset mode, else fall back to SyncVectorEnv
    try:
        entry = spec.vector_entry_point
        cls = entry if callable(entry) else gym.envs.registration.load_env_creator(entry)
        native = (getattr(cls, "metadata", None) or {}).get("autoreset_mode")
    except Exception:  # pragma: no cover - broken third-party entry point
        native = None
    return gym.VectorizeMode.VECTOR_ENTRY_POINT if native == autoreset_mode else gym.VectorizeMode.SYNC


def make_gym(env_id: str, num_envs: int = 1, device: Any = "cpu", seed: Optional[int] = None,
             vectorization_mode: Any = None, autoreset_mode: Any = None,
             **gym_kwargs: Any) -> GymVectorEnvAdapter:
    """Creator behind the ``gym:<id>`` names.

    ``vectorization_mode`` defaults to gymnasium's choice (the id's
    ``vector_entry_point`` when it has one, else ``sync``); when an
    ``autoreset_mode`` is requested that a native vector env does not have,
    ``sync`` is used since only Sync/AsyncVectorEnv take one. Without
    ``autoreset_mode`` the source keeps gymnasium's default (NEXT_STEP).
    ``seed`` seeds the first ``reset``; other kwargs go to the env constructor
    (e.g. ``max_episode_steps=5``).
    """
    mode_req = None if autoreset_mode is None else _coerce_autoreset_mode(autoreset_mode)
    vmode = _resolve_vectorization_mode(env_id, vectorization_mode, mode_req)
    vector_kwargs = None
    if mode_req is not None and vmode is not gym.VectorizeMode.VECTOR_ENTRY_POINT:
        vector_kwargs = {"autoreset_mode": mode_req}
    env = gym.make_vec(env_id, num_envs=int(num_envs), vectorization_mode=vmode,
                       vector_kwargs=vector_kwargs, **gym_kwargs)
    if mode_req is not None and _source_autoreset_mode(env) is not mode_req:
        env.close()
        raise ValueError(f"{env_id!r} with vectorization_mode={vmode.value!r} runs in "
                         f"{_source_autoreset_mode(env).name} autoreset mode, not {mode_req.name}; "
                         "use vectorization_mode='sync' or 'async'")
    return GymVectorEnvAdapter(env, device=device, seed=seed)


register_prefix("gym", make_gym)


# ---------------------------------------------------------------------------
# TensorVecEnv -> gymnasium VectorEnv
# ---------------------------------------------------------------------------
def _supports_manual_reset(env: Any) -> bool:
    """Built-in tasks constructed with ``autoreset=False`` expose ``reset_idx``."""
    return callable(getattr(env, "reset_idx", None)) and getattr(env, "autoreset", True) is False


class TensorVecEnvToGym(gym.vector.VectorEnv):
    """Any ``TensorVecEnv`` as a numpy gymnasium ``VectorEnv``.

    Autoreset semantics (``metadata["autoreset_mode"]``):

    * **NEXT_STEP** (what RLlib's ``SingleAgentEnvRunner`` assumes) whenever it
      can be presented faithfully: the step on which an env ends returns its
      terminal observation; the following step returns its reset observation
      with reward 0 and both flags False, ignoring the action given for it.
      Requires either a manual-reset env (``autoreset=False`` plus
      ``reset_idx(mask)``, as the built-in tasks support: all envs are stepped,
      then the pending ones are reset and their outputs overwritten) or a source
      that itself resets one step late (``env.autoreset_mode == NEXT_STEP``,
      e.g. :class:`GymVectorEnvAdapter` over a NEXT_STEP gym env; passed
      through as is).
    * **SAME_STEP** fallback for a generic autoresetting ``TensorVecEnv``: the
      step on which an env ends already returns its reset observation and the
      terminal one is in ``infos["final_obs"]`` (mask ``infos["_final_obs"]``).
      RLlib's env runner does not understand this mode (it would record the
      reset obs as the terminal obs); a warning is issued. Can also be
      requested explicitly for a manual-reset env.

    Observations are numpy arrays in the single observation space's dtype,
    rewards float32, flags bool. Extra device tensors of a step
    (``Step.extras``) with a leading ``num_envs`` dim are copied into
    ``infos`` (masked out on the reset rows of NEXT_STEP).

    Args:
        env: the tensor env (its device may be anything; results come to host).
        autoreset_mode: ``None`` (NEXT_STEP if possible, else SAME_STEP) or an
            ``AutoresetMode``/its name.
    """

    def __init__(self, env: TensorVecEnv, autoreset_mode: Any = None):
        self.env = env
        self.num_envs = int(env.num_envs)
        self.device = torch.device(env.device)
        self.single_observation_space = env.single_observation_space
        self.single_action_space = env.single_action_space
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self._obs_dtype = np.dtype(self.single_observation_space.dtype or np.float32)
        self._discrete = isinstance(self.single_action_space,
                                    (gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary))
        self._manual = _supports_manual_reset(env)
        self._passthrough = getattr(env, "autoreset_mode", None) is AutoresetMode.NEXT_STEP
        want = None if autoreset_mode is None else _coerce_autoreset_mode(autoreset_mode)
        if want is AutoresetMode.DISABLED:
            raise ValueError("TensorVecEnvToGym supports NEXT_STEP and SAME_STEP autoreset modes")
        if want is None:
            want = (AutoresetMode.NEXT_STEP if (self._manual or self._passthrough)
                    else AutoresetMode.SAME_STEP)
            if want is AutoresetMode.SAME_STEP:
                warnings.warn(
                    f"{type(env).__name__} resets ended envs in the same step and has no "
                    "autoreset=False/reset_idx mode, so TensorVecEnvToGym presents SAME_STEP "
                    "autoreset (terminal obs in infos['final_obs']); RLlib's env runner assumes "
                    "NEXT_STEP and would mis-record terminal observations", stacklevel=2)
        elif want is AutoresetMode.NEXT_STEP and not (self._manual or self._passthrough):
            raise ValueError(f"{type(env).__name__} cannot present NEXT_STEP autoreset: construct it "
                             "with autoreset=False (needs reset_idx(mask)) or use SAME_STEP")
        elif want is AutoresetMode.SAME_STEP and self._passthrough and not self._manual:
            raise ValueError(f"{type(env).__name__} resets one step late; it can only be "
                             "presented with NEXT_STEP autoreset")
        self.autoreset_mode = want
        self.metadata = {"autoreset_mode": want, "render_modes": []}
        self.render_mode = None
        self._pending = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)

    @property
    def tensor_env(self) -> TensorVecEnv:
        return self.env

    # -- conversions --------------------------------------------------------------
    def _obs_np(self, obs: torch.Tensor) -> np.ndarray:
        return obs.detach().cpu().numpy().astype(self._obs_dtype, copy=False)

    def _actions_to_tensor(self, actions: Any) -> torch.Tensor:
        if self._discrete:
            arr = np.asarray(actions)
            self._check_discrete(arr)
            return torch.as_tensor(arr, dtype=torch.long, device=self.device)
        return torch.as_tensor(np.asarray(actions, dtype=np.float32), device=self.device)

    def _check_discrete(self, arr: np.ndarray) -> None:
        """Reject what a cast to long would silently change (-1 wraps around in the
        source's indexing, 0.7 becomes 0): a one-line ValueError naming the values."""
        ok = arr.shape == self.action_space.shape
        if ok and not np.issubdtype(arr.dtype, np.integer):
            ok = np.issubdtype(arr.dtype, np.number) and bool(np.all(np.isfinite(arr) & (arr == np.round(arr))))
        if ok:
            ok = bool(self.action_space.contains(arr.astype(self.action_space.dtype)))
        if not ok:
            flat = np.asarray(arr, dtype=np.float64).ravel() if np.issubdtype(arr.dtype, np.number) else arr.ravel()
            space = self.single_action_space
            if isinstance(space, gym.spaces.Discrete) and np.issubdtype(arr.dtype, np.number):
                lo, hi = int(space.start), int(space.start) + int(space.n)
                flat = flat[(flat < lo) | (flat >= hi) | (flat != np.round(flat))]
            bad = np.unique(flat)[:5].tolist()
            raise ValueError(f"TensorVecEnvToGym.step: invalid discrete actions (values {bad}, shape "
                             f"{tuple(arr.shape)}); allowed: integers of {self.single_action_space} for each of "
                             f"{self.num_envs} envs, shape {self.action_space.shape}")

    def _reset_rows(self, mask: torch.Tensor) -> Optional[torch.Tensor]:
        """``reset_idx(mask)``; returns the reset obs, full-batch or rows only."""
        out = self.env.reset_idx(mask)
        if isinstance(out, tuple):
            out = out[0]
        return out

    @staticmethod
    def _overwrite(obs: torch.Tensor, mask: torch.Tensor, reset_obs: Optional[torch.Tensor]) -> torch.Tensor:
        if reset_obs is None:
            raise RuntimeError("reset_idx(mask) must return the reset observations")
        if reset_obs.shape[0] == obs.shape[0]:
            return torch.where(mask.view(-1, *([1] * (obs.dim() - 1))), reset_obs.to(obs.dtype), obs)
        obs = obs.clone()
        obs[mask] = reset_obs.to(obs.dtype)
        return obs

    # -- gymnasium VectorEnv API ---------------------------------------------------
    def reset(self, *, seed: Any = None, options: Optional[dict] = None) -> Tuple[np.ndarray, dict]:
        if isinstance(seed, (list, tuple)):
            seed = seed[0] if seed else None
        obs = self.env.reset(seed=seed)
        self._pending.zero_()
        return self._obs_np(obs), {}

    def step(self, actions: Any) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict]:
        out = self.env.step(self._actions_to_tensor(actions))
        reward, terminated = out.reward, out.terminated
        truncated = out.truncated & ~terminated
        infos: Dict[str, Any] = {}
        valid = None
        if self._passthrough and not self._manual:
            obs = out.obs
            if out.valid is not None:
                valid = out.valid
                reward = torch.where(valid, reward, torch.zeros_like(reward))
                terminated, truncated = terminated & valid, truncated & valid
        elif self.autoreset_mode is AutoresetMode.NEXT_STEP:  # manual-reset env
            obs = out.final_obs  # terminal obs for rows that just ended
            pending = self._pending
            valid = ~pending
            if bool(pending.any()):
                obs = self._overwrite(obs, pending, self._reset_rows(pending))
                reward = torch.where(valid, reward, torch.zeros_like(reward))
                terminated, truncated = terminated & valid, truncated & valid
            self._pending = terminated | truncated
        else:  # SAME_STEP
            obs = out.obs
            done = terminated | truncated
            if self._manual and bool(done.any()):
                obs = self._overwrite(obs, done, self._reset_rows(done))
            done_np = done.cpu().numpy()
            if done_np.any():
                final = self._obs_np(out.final_obs)
                final_obs = np.full(self.num_envs, None, dtype=object)
                for i in np.flatnonzero(done_np):
                    final_obs[i] = final[i]
                infos["final_obs"], infos["_final_obs"] = final_obs, done_np
        if out.extras:
            valid_np = None if valid is None else valid.cpu().numpy()
            for k, v in out.extras.items():
                if isinstance(v, torch.Tensor) and v.dim() >= 1 and v.shape[0] == self.num_envs:
                    infos[k] = v.detach().cpu().numpy()
                    if valid_np is not None:
                        infos[f"_{k}"] = valid_np
        return (self._obs_np(obs), reward.detach().float().cpu().numpy(),
                terminated.cpu().numpy(), truncated.cpu().numpy(), infos)

    def render(self):
        return None

    def close_extras(self, **kwargs: Any) -> None:
        self.env.close()


# ---------------------------------------------------------------------------
# RLlib / Tune registration
# ---------------------------------------------------------------------------
_RLLIB_RESERVED = ("num_envs", "device", "seed", "worker_index", "num_workers", "vector_index",
                   "remote", "recreated_worker")


class _RLlibGymCreator:
    """Picklable Tune env creator: ``ctx -> TensorVecEnvToGym(make(name, ...))``.

    ``ctx`` is RLlib's ``EnvContext`` (a dict of ``env_config``), extended with
    ``num_envs`` by ``gym_env_vectorize_mode="vector_entry_point"``; other keys
    are task kwargs. The tensor env is built with ``autoreset=False`` when its
    creator accepts that, so the wrapper can present exact NEXT_STEP semantics.
    """

    def __init__(self, name: str):
        self.name = name

    def __call__(self, ctx: Optional[Mapping[str, Any]] = None) -> TensorVecEnvToGym:
        from .registry import make

        ctx = dict(ctx or {})
        kwargs = {k: v for k, v in ctx.items() if k not in _RLLIB_RESERVED}
        common = dict(num_envs=int(ctx.get("num_envs", 1)), device=ctx.get("device", "cpu"),
                      seed=ctx.get("seed"))
        if "autoreset" not in kwargs:
            try:
                env = make(self.name, autoreset=False, **common, **kwargs)
            except TypeError as e:
                if "autoreset" not in str(e):
                    raise
                env = make(self.name, **common, **kwargs)
        else:
            env = make(self.name, **common, **kwargs)
        return TensorVecEnvToGym(env)

    def __repr__(self) -> str:
        return f"rllib_env_creator({self.name!r})"


def rllib_env_creator(name: str) -> _RLlibGymCreator:
    """A picklable creator for ``ray.tune.registry.register_env`` that builds
    the tensor env ``name`` (any registry name, e.g. ``"CartPole"`` or
    ``"gym:Pendulum-v1"``) on CPU and wraps it in :class:`TensorVecEnvToGym`.

    Use with ``.env_runners(gym_env_vectorize_mode="vector_entry_point",
    num_envs_per_env_runner=N)`` so RLlib calls it once with ``num_envs=N``.
    """
    return _RLlibGymCreator(name)


def register_rllib_gym_envs() -> None:
    """Register ``"rllib-fast-gym:<name>"`` with Tune for every plain built-in
    name (idempotent), for RLlib's own algorithms via the reverse bridge."""
    from ray.tune.registry import register_env

    from .registry import list_envs

    for name in list_envs():
        if ":" not in name:
            register_env(RLLIB_GYM_PREFIX + name, rllib_env_creator(name))
