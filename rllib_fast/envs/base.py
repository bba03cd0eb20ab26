"""The tensor vector-env contract every rllib_fast algorithm consumes.

A *tensor vector env* runs ``num_envs`` copies of a task in lock-step and keeps
every observation, reward and flag as a torch tensor on ``device``. Algorithms
never see per-env Python objects, so the hot path (act -> step -> store) stays a
handful of batched tensor ops with no host synchronisation.

Contract (drawn in ``docs/architecture.md``):

* attributes ``num_envs``, ``device``, ``single_observation_space``,
  ``single_action_space`` (gymnasium spaces) and ``max_episode_steps`` (or None);
* ``reset(seed=None) -> obs`` with shape ``[N, *obs_shape]``;
* ``step(actions) -> Step``:

  - ``obs``: what to act on next; already reset for envs that ended this step
    when the source resets in the same step;
  - ``reward``: float32 ``[N]``;
  - ``terminated`` / ``truncated``: bool ``[N]``; a time limit is a truncation,
    never a termination, so learners bootstrap through it;
  - ``final_obs``: the true next observation of the transition just taken, for
    every env. For envs that ended it is the terminal observation (the one to
    bootstrap from on truncation); for the others it equals ``obs``. Defining it
    for all rows means a learner can use ``final_obs`` as ``next_obs`` without a
    gather/scatter on the hot path;
  - ``valid``: bool ``[N]`` or None (= all valid). False marks a transition that
    straddles an auto-reset in sources that reset one step late (IsaacGymEnvs,
    gymnasium NEXT_STEP, envpool); storage must drop or mask it;
  - ``extras``: optional dict of extra device tensors (e.g. ``true_objective``).

Optional: ``get_state()``/``set_state()`` (exact resume from checkpoints),
``get_training_state()``/``set_training_state()`` (the simulator's own training
state, e.g. curriculum counters, saved in every checkpoint), ``episode_metrics()``
(the source's own per-episode statistics, logged with the returns),
``randomize_episode_progress()`` (spread the episode clocks: the on-policy
start-state decorrelation), ``normalize_obs_hint`` (the task authors' advice on
observation normalisation) and ``close()``.
"""
from __future__ import annotations

from typing import Any, Dict, NamedTuple, Optional, Sequence

import gymnasium as gym
import numpy as np
import torch


class Step(NamedTuple):
    """Result of one batched ``step``; every field lives on the env's device."""

    obs: torch.Tensor
    reward: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    final_obs: torch.Tensor
    valid: Optional[torch.Tensor] = None
    extras: Dict[str, torch.Tensor] = {}

    @property
    def done(self) -> torch.Tensor:
        """Episode ended for any reason (termination or truncation)."""
        return self.terminated | self.truncated


def concat_steps(parts: Sequence[Step], device: Any = None) -> Step:
    """One :class:`Step` from the steps of consecutive env slices (workers of a
    process sampler, HTS executors), in order. ``valid`` stays None only when
    every part's is (None rows count as valid); ``extras`` keeps the keys all
    parts have. ``device`` moves every field there (None: where they are)."""
    def cat(ts: Sequence[torch.Tensor]) -> torch.Tensor:
        return torch.cat([t if device is None else t.to(device) for t in ts])

    valid = None
    if any(p.valid is not None for p in parts):
        valid = cat([p.valid if p.valid is not None else torch.ones_like(p.terminated) for p in parts])
    keys = set(parts[0].extras or {})
    for p in parts[1:]:
        keys &= set(p.extras or {})
    extras = {k: cat([p.extras[k] for p in parts]) for k in sorted(keys)}
    return Step(obs=cat([p.obs for p in parts]), reward=cat([p.reward for p in parts]),
                terminated=cat([p.terminated for p in parts]), truncated=cat([p.truncated for p in parts]),
                final_obs=cat([p.final_obs for p in parts]), valid=valid, extras=extras)


def canonical_device(device: Any) -> torch.device:
    """A concrete torch device ("cuda" -> "cuda:<current>") so it compares
    equal to the ``.device`` of tensors created on it."""
    return torch.empty(0, device=device).device


def check_num_envs(num_envs: Any) -> int:
    n = int(num_envs)
    if n < 1:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}")
    return n


def env_share_error(num_envs: int, parts: int, key: str, owner: str) -> Optional[str]:
    """Why ``num_envs`` cannot be split evenly over ``parts`` (the value of the
    config key ``key``), or None when it can. Every split of a batch of envs
    (data-parallel learners, asynchronous learners, HTS executors, simulator
    workers) goes through here: equal shares keep every part's batch shape,
    and therefore its compiled/preallocated buffers, the same."""
    if parts < 1 or num_envs % parts:
        return (f"{owner}: `num_envs` = {num_envs} must be divisible by `{key}` = {parts} (each steps "
                f"num_envs / {key} envs); allowed: a {key} that divides num_envs")
    return None


def env_share(num_envs: int, parts: int, key: str, owner: str) -> int:
    """The envs each of ``parts`` equal parts steps; a one-line ``ValueError``
    naming the keys when ``num_envs`` does not split evenly."""
    msg = env_share_error(num_envs, parts, key, owner)
    if msg is not None:
        raise ValueError(msg)
    return num_envs // parts


class EnvContractError(ValueError):
    """A tensor vector env broke the contract (shape, dtype or device)."""



def is_discrete_space(space: Any) -> bool:
    """Whether an action space is discrete (the one rule, for envs and for config checks)."""
    return isinstance(space, gym.spaces.Discrete)

class TensorVecEnv:
    """Base class for tensor vector envs. Subclasses set the attributes in
    ``__init__`` and implement ``reset`` and ``step``.

    It is a plain base class, not an ABC, so adapters that wrap foreign objects
    (Isaac Gym, Isaac Lab) can subclass it without metaclass conflicts.
    """

    num_envs: int
    device: torch.device
    single_observation_space: gym.Space
    single_action_space: gym.Space
    max_episode_steps: Optional[int] = None
    #: Whether the task's authors normalise its observations for training (mjlab:
    #: ``obs_normalization`` of the task's registered rsl_rl config), or None: no
    #: advice. On-policy algorithms' ``normalize_obs='auto'`` follows it.
    normalize_obs_hint: Optional[bool] = None
    #: Whether ``step`` runs the simulation on worker threads of the source's own
    #: in this process (envpool's thread pool). Then torch's OpenMP threads,
    #: spinning after the policy's forward, take the cores those workers need:
    #: on-policy algorithms act with one torch thread (``acting_threads='auto'``).
    steps_on_worker_threads: bool = False

    # -- required ---------------------------------------------------------
    def reset(self, seed: Optional[int] = None) -> torch.Tensor:  # pragma: no cover - interface
        raise NotImplementedError("abstract: TensorVecEnv.reset")

    def step(self, actions: torch.Tensor) -> Step:  # pragma: no cover - interface
        raise NotImplementedError("abstract: TensorVecEnv.step")

    # -- optional ---------------------------------------------------------
    def get_state(self) -> Optional[Dict[str, Any]]:
        """Everything needed to continue bit-exactly after a restore, or None."""
        return None

    def set_state(self, state: Dict[str, Any]) -> None:
        """Inverse of ``get_state``; a no-op for sources that cannot restore."""

    def get_training_state(self) -> Optional[Dict[str, Any]]:
        """The simulator's own state that training depends on beyond its episodes
        (curriculum counters: mjlab's ``common_step_counter``), or None: nothing.
        Checkpoints save it whether or not ``get_state`` can save the episodes, so
        a resumed run continues its curricula instead of restarting them."""
        return None

    def set_training_state(self, state: Dict[str, Any]) -> None:
        """Inverse of ``get_training_state``."""

    def close(self) -> None:
        """Release simulator resources."""

    def compile_step(self, setting: Any, backend: Optional[str] = None) -> bool:
        """Compile the source's own step under the algorithms' ``compile``
        setting (and ``compile_backend`` where the config has one) where it is
        torch code that can be (the built-in tasks); True when it did.
        Simulators and wrappers keep their step."""
        return False

    # -- derived helpers ----------------------------------------------------
    @property
    def obs_shape(self) -> tuple:
        return tuple(self.single_observation_space.shape)

    @property
    def is_discrete(self) -> bool:
        return is_discrete_space(self.single_action_space)

    @property
    def action_shape(self) -> tuple:
        return () if self.is_discrete else tuple(self.single_action_space.shape)

    def sample_actions(self, generator: Optional[torch.Generator] = None) -> torch.Tensor:
        """Uniform-random actions for all envs, on device (start-state
        decorrelation and warm-up use this; no numpy round trip)."""
        space = self.single_action_space
        if isinstance(space, gym.spaces.Discrete):
            return torch.randint(int(space.start), int(space.start) + int(space.n), (self.num_envs,),
                                 device=self.device, generator=generator)
        low = torch.as_tensor(space.low, dtype=torch.float32, device=self.device)
        high = torch.as_tensor(space.high, dtype=torch.float32, device=self.device)
        u = torch.rand((self.num_envs, *space.shape), device=self.device, generator=generator)
        return low + (high - low) * u

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(num_envs={self.num_envs}, device={self.device}, "
                f"obs={self.obs_shape}, act={self.single_action_space})")


# ---------------------------------------------------------------------------
# validation
# ---------------------------------------------------------------------------
_REQUIRED_ATTRS = ("num_envs", "device", "single_observation_space", "single_action_space")


def _check_tensor(name: str, t: Any, shape: Sequence[int], dtypes: tuple, device: torch.device,
                  source: str) -> None:
    if not isinstance(t, torch.Tensor):
        raise EnvContractError(f"{source}: `{name}` must be a torch.Tensor, got {type(t).__name__}")
    if tuple(t.shape) != tuple(shape):
        raise EnvContractError(f"{source}: `{name}` has shape {tuple(t.shape)}, expected {tuple(shape)}")
    if t.dtype not in dtypes:
        allowed = ", ".join(str(d) for d in dtypes)
        raise EnvContractError(f"{source}: `{name}` has dtype {t.dtype}, allowed: {allowed}")
    if t.device != device:
        raise EnvContractError(f"{source}: `{name}` is on {t.device}, expected env.device={device}")


_FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
_OBS_DTYPES = _FLOATS + (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)


def validate_env(env: Any, *, num_steps: int = 2) -> None:
    """Check that ``env`` honours the tensor vector-env contract.

    Runs ``reset`` and ``num_steps`` random steps and raises
    :class:`EnvContractError` naming the first offending field and what was
    expected. Algorithms call it once at setup so a broken source fails with a
    one-line message instead of a shape error deep inside torch.
    """
    source = type(env).__name__
    for attr in _REQUIRED_ATTRS:
        if not hasattr(env, attr):
            raise EnvContractError(f"{source}: missing required attribute `{attr}` "
                                   f"(required: {', '.join(_REQUIRED_ATTRS)})")
    if not isinstance(env.num_envs, (int, np.integer)) or env.num_envs < 1:
        raise EnvContractError(f"{source}: `num_envs` must be a positive int, got {env.num_envs!r}")
    if not isinstance(env.single_observation_space, gym.spaces.Box):
        raise EnvContractError(f"{source}: `single_observation_space` must be a gymnasium Box, "
                               f"got {env.single_observation_space!r}")
    if not isinstance(env.single_action_space, (gym.spaces.Box, gym.spaces.Discrete)):
        raise EnvContractError(f"{source}: `single_action_space` must be a gymnasium Box or Discrete, "
                               f"got {env.single_action_space!r}")
    device = torch.device(env.device)
    n = int(env.num_envs)
    obs_shape = (n, *env.single_observation_space.shape)
    obs = env.reset()
    _check_tensor("reset() obs", obs, obs_shape, _OBS_DTYPES, device, source)
    sampler = env.sample_actions if hasattr(env, "sample_actions") else (
        lambda: TensorVecEnv.sample_actions(env))
    for _ in range(num_steps):
        out = env.step(sampler())
        if not isinstance(out, Step):
            raise EnvContractError(f"{source}: step() must return rllib_fast.envs.Step, got {type(out).__name__}")
        _check_tensor("step().obs", out.obs, obs_shape, _OBS_DTYPES, device, source)
        _check_tensor("step().final_obs", out.final_obs, obs_shape, _OBS_DTYPES, device, source)
        _check_tensor("step().reward", out.reward, (n,), _FLOATS, device, source)
        _check_tensor("step().terminated", out.terminated, (n,), (torch.bool,), device, source)
        _check_tensor("step().truncated", out.truncated, (n,), (torch.bool,), device, source)
        if out.valid is not None:
            _check_tensor("step().valid", out.valid, (n,), (torch.bool,), device, source)
