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
* ``max_episode_steps`` comes from the pool's config; time limits are
  truncations (envpool reports them as ``truncated``; a fall of the robot tasks
  is ``terminated``).
* **dict observations** (MuJoCo Playground's ports: ``Go1JoystickFlatTerrain-v1``,
  ``G1JoystickFlatTerrain-v1``, ``LeapCubeReorient-v1``, ...): the ``state`` group
  is the observation, the ``privileged_state`` group the asymmetric critic's input
  -- ``env.single_state_space``, ``env.states`` and ``Step.extras["states"]``, the
  contract of :mod:`rllib_fast.algorithms.asymmetric` that mjlab's critic group
  follows too, so every actor-critic algorithm's ``asymmetric_critic='auto'``
  uses it. Both groups cross to the device in one packed copy. The done step's
  observation is the terminal one (NEXT_STEP), so its states are the terminal
  states too; the following straddling step (``valid=False``) carries both
  groups' reset rows.
* **reward terms**: the task's per-step ``reward_*`` entries of envpool's info
  are averaged per episode on the host (:mod:`rllib_fast.envs.episode_terms`);
  ``episode_metrics()`` hands them to the algorithms' episode logging
  (``env_runners/reward_terms/<term>``, the ``reward_`` prefix dropped).
* **checkpoints**: a pool's simulator state and RNG streams cannot be saved, so
  ``get_state()`` is None: a restored run keeps the live pool's episodes
  (``core/checkpoint.py``) and its random streams go on from where the live
  pool is, not from the checkpoint's; nothing of a Playground task's training
  depends on state outside its episodes (no curricula), so
  ``get_training_state()`` is None too.

Other ``env_config`` keys go to ``envpool.make`` (e.g. ``num_threads``,
``episodic_life``, ``reward_clip``, ``max_episode_steps``).
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import gymnasium as gym
import numpy as np
import torch

from .base import Step, canonical_device, check_num_envs
from .episode_terms import EpisodeTermMeans, info_terms
from .gymnasium import GymVectorEnvAdapter
from .upload import StepUploader
from .registry import register_prefix

__all__ = ["EnvPoolVecEnv", "make_envpool", "ACTOR_GROUP", "CRITIC_GROUP"]

#: the observation groups of MuJoCo Playground's envpool ports: the policy's input and the
#: privileged critic input (the asymmetric critic's ``states``)
ACTOR_GROUP, CRITIC_GROUP = "state", "privileged_state"


def _import_envpool():
    try:
        import envpool
    except ImportError as e:  # pragma: no cover - depends on the install
        raise ImportError("envpool is not installed; install the `envpool` extra: pip install "
                          "'rllib_fast[envpool]' (envpool publishes Linux x86_64 wheels for "
                          "CPython 3.9-3.12)") from e
    return envpool


class _SyncPool:
    """Proxy of a synchronous envpool pool: ``reset``/``step`` results in ``env_id``
    order, and a dict observation (MuJoCo Playground's ``state`` / ``privileged_state``)
    packed into one float32 array, so the gymnasium bridge moves both groups to the
    device in one copy.

    Packed layout of ``[N, A + C]``: the first ``N * A`` values are the actor group
    ``[N, A]`` row-major, the next ``N * C`` the critic group ``[N, C]`` (two
    contiguous blocks, not per-row concatenation), so :meth:`EnvPoolVecEnv._split`
    takes both as contiguous views of the uploaded tensor without a copy.
    """

    def __init__(self, pool: Any):
        self._pool = pool
        n = int(pool.config["num_envs"])
        self._order = np.arange(n)
        self.groups: Optional[Tuple[int, int]] = None   # (actor width, critic width) of a dict observation
        self.group_spaces: Optional[Tuple[gym.spaces.Box, Optional[gym.spaces.Box]]] = None
        space = pool.single_observation_space
        if isinstance(space, gym.spaces.Dict):
            names = sorted(space.spaces)
            actor, critic = space.spaces.get(ACTOR_GROUP), space.spaces.get(CRITIC_GROUP)
            extra = [k for k in names if k not in (ACTOR_GROUP, CRITIC_GROUP)]
            if actor is None or extra or any(len(s.shape) != 1 for s in (actor, critic) if s is not None):
                raise ValueError(f"envpool: dict observation groups {names} are not supported; allowed: "
                                 f"{ACTOR_GROUP!r} (actor) and optionally {CRITIC_GROUP!r} (critic), "
                                 "flat vectors")
            a = int(actor.shape[0])
            c = 0 if critic is None else int(critic.shape[0])
            self.groups = (a, c)
            self.group_spaces = (_f32_box(actor), None if critic is None else _f32_box(critic))
            self.single_observation_space = gym.spaces.Box(-np.inf, np.inf, (a + c,), np.float32)
            self._packed = np.empty(n * (a + c), dtype=np.float32)
            self._blocks = (self._packed[:n * a].reshape(n, a), self._packed[n * a:].reshape(n, c))
        else:
            self.single_observation_space = space

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pool, name)

    def _pack(self, obs: Any) -> Any:
        if self.groups is None:
            return obs
        actor, critic = self._blocks
        actor[...] = obs[ACTOR_GROUP]
        if critic.size:
            critic[...] = obs[CRITIC_GROUP]
        # the bridge's uploader copies it: reusing the host buffer never aliases a returned step
        return self._packed.reshape(actor.shape[0], -1)

    def _sort(self, out: tuple) -> tuple:
        infos = out[-1]
        env_id = infos.get("env_id") if isinstance(infos, dict) else None
        if env_id is None or np.array_equal(env_id, self._order):
            return out
        perm = np.argsort(env_id)

        def order(x: Any) -> Any:
            if isinstance(x, dict):
                return {k: order(v) for k, v in x.items()}
            return np.asarray(x)[perm] if isinstance(x, np.ndarray) and x.shape[:1] == perm.shape else x
        return tuple(order(x) for x in out[:-1]) + (order(infos),)

    def reset(self, seed: Any = None, options: Any = None):
        obs, infos = self._sort(self._pool.reset())
        return self._pack(obs), infos

    def step(self, actions: np.ndarray):
        obs, *rest = self._sort(self._pool.step(actions))
        return (self._pack(obs), *rest)

    def close(self) -> None:
        self._pool.close()


def _f32_box(space: gym.spaces.Box) -> gym.spaces.Box:
    low, high = np.asarray(space.low, np.float32), np.asarray(space.high, np.float32)
    return gym.spaces.Box(low, high, dtype=np.float32)


class EnvPoolVecEnv(GymVectorEnvAdapter):
    """A synchronous envpool pool as a ``TensorVecEnv`` (see the module docstring).

    Args:
        task_id: envpool id (``Ant-v4``, ``Go1JoystickFlatTerrain-v1``, ``Pong-v5``, ...).
        num_envs, device, seed: as every creator.
        make_kwargs: further ``envpool.make`` keyword arguments.

    Besides the contract: ``single_state_space`` / ``states`` / ``Step.extras["states"]``
    (the critic group of a dict observation, else None / absent) and
    ``episode_metrics()`` (per-episode means of the task's reward terms).
    """

    #: the pool's C++ threads step the envs while this process waits in ``recv``
    steps_on_worker_threads = True

    def __init__(self, task_id: str, num_envs: int, device: Any = "cpu", seed: Optional[int] = None,
                 **make_kwargs: Any):
        self.task_id = task_id
        self._make_kwargs = dict(make_kwargs)
        self._pool_seed = 0 if seed is None else int(seed)
        pool = _SyncPool(self._build(check_num_envs(num_envs), self._pool_seed))
        self._fresh = True
        device = canonical_device(device)
        mes = pool.config.get("max_episode_steps")
        super().__init__(pool, device=device, seed=None,
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
        #: the asymmetric critic's input space (a dict observation's critic group), or None
        self.single_state_space: Optional[gym.spaces.Box] = None
        self.states: Optional[torch.Tensor] = None
        self._groups = pool.groups
        if self._groups is not None:
            actor, critic = pool.group_spaces
            self.single_observation_space = actor
            self.single_state_space = critic
        self._terms: Optional[EpisodeTermMeans] = None

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

    def _split(self, packed: torch.Tensor) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        """(actor obs, critic states or None) of a packed ``[N, A + C]`` tensor (see
        :class:`_SyncPool`): contiguous views of its two blocks."""
        if self._groups is None:
            return packed, None
        n, (a, c) = self.num_envs, self._groups
        flat = packed.reshape(-1)
        return flat[:n * a].view(n, a), (flat[n * a:].view(n, c) if c else None)

    def reset(self, seed: Optional[int] = None) -> torch.Tensor:
        """``reset(seed)`` restarts every env from that seed (a fresh pool, unless
        this one was just built with it); ``reset()`` continues the streams."""
        if seed is not None and not (self._fresh and int(seed) == self._pool_seed):
            self.gym_env.close()
            self._pool_seed = int(seed)
            self.gym_env = _SyncPool(self._build(self.num_envs, self._pool_seed))
        self._fresh = False
        self._seeded = True
        obs, self.states = self._split(super().reset(seed=None))
        if self._terms is None:
            self._terms = EpisodeTermMeans(info_terms(self.last_infos, self.num_envs), self.num_envs)
        self._terms.clear_running()
        return obs

    def step(self, actions: Any) -> Step:
        straddle = self._prev_done.copy()       # rows whose step returns their reset observation
        out = super().step(actions)
        if self._terms is not None:
            self._terms.update(self.last_infos, ~straddle, self._prev_done)
        if self._groups is None:
            return out
        obs, states = self._split(out.obs)
        extras = dict(out.extras)
        if states is not None:
            # the step's observation is the terminal one on the done step (NEXT_STEP), so
            # these states are the ones to bootstrap from there too (no separate final_states)
            self.states = states
            extras["states"] = states
        return out._replace(obs=obs, final_obs=obs, extras=extras)

    def episode_metrics(self) -> Dict[str, float]:
        """Per-episode means of the task's reward terms (``reward_*`` of envpool's info)
        over the episodes ended since the last call (:mod:`rllib_fast.envs.episode_terms`)."""
        return {} if self._terms is None else self._terms.pop_means()


def make_envpool(task_id: str, num_envs: int = 1, device: Any = "cpu", seed: Optional[int] = None,
                 **make_kwargs: Any) -> EnvPoolVecEnv:
    """Creator behind ``envpool:<id>``; extra kwargs go to ``envpool.make``."""
    return EnvPoolVecEnv(task_id, num_envs=num_envs, device=device, seed=seed, **make_kwargs)


register_prefix("envpool", make_envpool, probe=False)   # a simulator: not started for config checks
