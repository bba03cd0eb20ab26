"""envpool (C++ thread-pool vector envs) as tensor vector envs: ``envpool:<id>``.

envpool >= 1.x builds gymnasium ``VectorEnv``s (``env_type="gymnasium"``) whose
auto-reset is one step late (``metadata["autoreset_mode"] = NEXT_STEP``): the
step on which an env ends returns its terminal observation, and the *next* step
returns its reset observation with reward 0 and ignores its action. The
adapter is :class:`~rllib_fast.envs.gymnasium.GymVectorEnvAdapter`'s NEXT_STEP
path -- that following transition is ``valid=False``, ``final_obs = obs`` -- plus
what is specific to envpool:

* **synchronous mode only** (``batch_size == num_envs``): the contract steps all
  envs in lock-step. Results are put in ``env_id`` order (envpool returns them in
  order in sync mode; the check is one comparison per step).
* **seeding**: envpool fixes seeds at creation and ignores ``reset(seed=...)``,
  so ``reset(seed)`` rebuilds the pool with that seed (skipped when the pool was
  just built with it; envpool derives every env's seed from it).
* **observations keep their dtype where it matters**: Atari frames
  (``envpool:Pong-v5``: ``uint8 [4, 84, 84]``, 4-frame stack, 84x84 grayscale,
  30 no-op starts, 27,000-step limit -- envpool's Atari defaults) stay uint8 and
  travel to the device in one packed copy; float observations (MuJoCo, float64 in
  envpool) become float32.
* ``max_episode_steps`` comes from the pool's config.

Other ``env_config`` keys go to ``envpool.make`` (e.g. ``num_threads``,
``episodic_life``, ``reward_clip``, ``max_episode_steps``).
"""
from __future__ import annotations

from typing import Any, Dict, Optional

import gymnasium as gym
import numpy as np
import torch

from .base import canonical_device, check_num_envs
from .gymnasium import GymVectorEnvAdapter
from .upload import StepUploader
from .registry import register_prefix

__all__ = ["EnvPoolVecEnv", "make_envpool"]


def _import_envpool():
    try:
        import envpool
    except ImportError as e:  # pragma: no cover - depends on the install
        raise ImportError("envpool is not installed; install the `envpool` extra: pip install "
                          "'rllib_fast[envpool]' (envpool publishes Linux x86_64 wheels for "
                          "CPython 3.9-3.12)") from e
    return envpool


class _InOrder:
    """Proxy of an envpool env whose ``reset``/``step`` results are in ``env_id`` order."""

    def __init__(self, pool: Any):
        self._pool = pool
        self._order = np.arange(int(pool.config["num_envs"]))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pool, name)

    def _sort(self, out: tuple, infos: Dict[str, Any]) -> tuple:
        env_id = infos.get("env_id") if isinstance(infos, dict) else None
        if env_id is None or np.array_equal(env_id, self._order):
            return out
        perm = np.argsort(env_id)
        arrays = tuple(np.asarray(x)[perm] for x in out[:-1])
        infos = {k: (np.asarray(v)[perm] if isinstance(v, np.ndarray) and v.shape[:1] == perm.shape else v)
                 for k, v in infos.items()}
        return (*arrays, infos)

    def reset(self, seed: Any = None, options: Any = None):
        out = self._pool.reset()
        return self._sort(out, out[-1])

    def step(self, actions: np.ndarray):
        out = self._pool.step(actions)
        return self._sort(out, out[-1])

    def close(self) -> None:
        self._pool.close()


class EnvPoolVecEnv(GymVectorEnvAdapter):
    """A synchronous envpool pool as a ``TensorVecEnv`` (see the module docstring).

    Args:
        task_id: envpool id (``Ant-v4``, ``HalfCheetah-v5``, ``Pong-v5``, ...).
        num_envs, device, seed: as every creator.
        make_kwargs: further ``envpool.make`` keyword arguments.
    """

    def __init__(self, task_id: str, num_envs: int, device: Any = "cpu", seed: Optional[int] = None,
                 **make_kwargs: Any):
        self.task_id = task_id
        self._make_kwargs = dict(make_kwargs)
        self._pool_seed = 0 if seed is None else int(seed)
        pool = self._build(check_num_envs(num_envs), self._pool_seed)
        self._fresh = True
        device = canonical_device(device)
        mes = pool.config.get("max_episode_steps")
        super().__init__(_InOrder(pool), device=device, seed=None,
                         max_episode_steps=int(mes) if mes is not None else None)
        act = self.single_action_space
        if isinstance(act, gym.spaces.Box) and np.dtype(act.dtype) != np.float32:
            # policies emit float32; the bridge still casts actions to the pool's dtype
            self.single_action_space = gym.spaces.Box(act.low.astype(np.float32), act.high.astype(np.float32),
                                                      dtype=np.float32)
        src = pool.single_observation_space
        if isinstance(src, gym.spaces.Box) and np.dtype(src.dtype) == np.uint8:
            self.single_observation_space = src
            self._uploader = StepUploader(self.num_envs, self.obs_shape, self.device, obs_dtype=np.uint8)

    def _build(self, num_envs: int, seed: int) -> Any:
        envpool = _import_envpool()
        kw = dict(self._make_kwargs)
        if kw.get("batch_size", num_envs) != num_envs:
            raise ValueError(f"envpool: batch_size = {kw['batch_size']} is not supported; allowed: num_envs "
                             f"({num_envs}) -- the tensor contract steps every env in lock-step")
        kw.pop("batch_size", None)
        # envpool takes an int32 seed; derived seeds (core.seeding) are 32-bit words
        return envpool.make(self.task_id, env_type="gymnasium", num_envs=num_envs, batch_size=num_envs,
                            seed=int(seed) % (2 ** 31), **kw)

    def reset(self, seed: Optional[int] = None) -> torch.Tensor:
        """``reset(seed)`` restarts every env from that seed (a fresh pool, unless
        this one was just built with it); ``reset()`` continues the streams."""
        if seed is not None and not (self._fresh and int(seed) == self._pool_seed):
            self.gym_env.close()
            self._pool_seed = int(seed)
            self.gym_env = _InOrder(self._build(self.num_envs, self._pool_seed))
        self._fresh = False
        self._seeded = True
        return super().reset(seed=None)


def make_envpool(task_id: str, num_envs: int = 1, device: Any = "cpu", seed: Optional[int] = None,
                 **make_kwargs: Any) -> EnvPoolVecEnv:
    """Creator behind ``envpool:<id>``; extra kwargs go to ``envpool.make``."""
    return EnvPoolVecEnv(task_id, num_envs=num_envs, device=device, seed=seed, **make_kwargs)


register_prefix("envpool", make_envpool, probe=False)   # a simulator: not started for config checks
