"""Random step times for any tensor vector env (HTS-RL's test bed).

HTS-RL's speed-up over synchronous A2C/PPO comes from *step-time variance*:
with a barrier every step, every round waits for the slowest of n envs, and
that maximum grows with the variance (paper §4.2, Claim 1; Fig. 4 left). To
measure it without a slow simulator, :class:`VariableTimeEnv` wraps any
:class:`~rllib_fast.envs.base.TensorVecEnv` and sleeps after each ``step`` for
a time drawn from a configurable distribution. Sleeping releases the GIL and
burns no CPU, so many such envs can be stepped from threads on a 2-core
machine and any speed-up they show is about scheduling, not compute.

Distributions (``mean_s`` and ``std_s`` in seconds):

* ``"exponential"``: ``shift + Exp(scale)`` with ``scale = std_s`` and
  ``shift = mean_s - std_s`` (so the mean and variance are exactly the given
  ones; needs ``std_s <= mean_s``; ``std_s = mean_s`` is the plain
  exponential of the paper's simulation, rate ``beta = 1 / mean_s``);
* ``"gamma"``: shape ``(mean/std)^2``, scale ``std^2/mean`` (any mean/std);
* ``"constant"``: always ``mean_s`` (``std_s`` must be 0).

The sleep RNG is a numpy ``Generator`` seeded from the env's seed, so the
sequence of step times is reproducible and is part of ``get_state`` (the
wrapped env's own state is nested under ``"inner"``). The draw is one number
per ``step`` call: the whole wrapped batch (e.g. one HTS executor's group of
env slots) takes that long.
"""
from __future__ import annotations

import math
import time
from typing import Any, Dict, Mapping, Optional

import numpy as np

from .base import Step, TensorVecEnv

DISTRIBUTIONS = ("exponential", "gamma", "constant")


def check_step_time(mean_s: float, std_s: float, distribution: str) -> None:
    """Raise ValueError naming the argument and the allowed values."""
    if distribution not in DISTRIBUTIONS:
        raise ValueError(f"VariableTimeEnv: `distribution` = {distribution!r}; allowed: "
                         + ", ".join(repr(d) for d in DISTRIBUTIONS))
    if not (mean_s >= 0 and math.isfinite(mean_s)):
        raise ValueError(f"VariableTimeEnv: `mean_s` = {mean_s!r}; allowed: a finite float >= 0")
    if not (std_s >= 0 and math.isfinite(std_s)):
        raise ValueError(f"VariableTimeEnv: `std_s` = {std_s!r}; allowed: a finite float >= 0")
    if distribution == "exponential" and std_s > mean_s:
        raise ValueError(f"VariableTimeEnv: `std_s` = {std_s} exceeds `mean_s` = {mean_s}; allowed for "
                         "'exponential': std_s <= mean_s (use 'gamma' for larger variance)")
    if distribution == "gamma" and std_s > 0 and mean_s == 0:
        raise ValueError("VariableTimeEnv: `mean_s` = 0 with `std_s` > 0; allowed for 'gamma': mean_s > 0")
    if distribution == "constant" and std_s != 0:
        raise ValueError(f"VariableTimeEnv: `std_s` = {std_s}; allowed for 'constant': 0")


class StepTimeSampler:
    """Seeded draws of step times with a given mean and standard deviation."""

    def __init__(self, mean_s: float, std_s: float = 0.0, distribution: str = "exponential",
                 seed: Optional[int] = None):
        check_step_time(float(mean_s), float(std_s), distribution)
        self.mean_s, self.std_s, self.distribution = float(mean_s), float(std_s), distribution
        self.rng = np.random.Generator(np.random.PCG64(seed))

    def draw(self) -> float:
        m, s = self.mean_s, self.std_s
        if s == 0.0 or self.distribution == "constant":
            return m
        if self.distribution == "exponential":
            return (m - s) + float(self.rng.exponential(s))
        return float(self.rng.gamma((m / s) ** 2, s * s / m))

    def get_state(self) -> Dict[str, Any]:
        return {"bit_generator": self.rng.bit_generator.state}

    def set_state(self, state: Mapping[str, Any]) -> None:
        self.rng.bit_generator.state = state["bit_generator"]


class VariableTimeEnv(TensorVecEnv):
    """``env`` whose every ``step`` additionally sleeps a random time.

    Args:
        env: any tensor vector env (its tensors are passed through untouched).
        mean_s / std_s / distribution: the step-time law (see module docstring).
        seed: seed of the sleep RNG (None: nondeterministic).
        sleep: False draws the times (``last_step_time``) without sleeping,
            for tests.
    """

    def __init__(self, env: TensorVecEnv, mean_s: float, std_s: float = 0.0, distribution: str = "exponential",
                 seed: Optional[int] = None, sleep: bool = True):
        self.env = env
        self.sampler = StepTimeSampler(mean_s, std_s, distribution, seed)
        self.sleep = bool(sleep)
        self.num_envs = env.num_envs
        self.device = env.device
        self.single_observation_space = env.single_observation_space
        self.single_action_space = env.single_action_space
        self.max_episode_steps = getattr(env, "max_episode_steps", None)
        self.normalize_obs_hint = getattr(env, "normalize_obs_hint", None)
        self.steps_on_worker_threads = getattr(env, "steps_on_worker_threads", False)
        self.autoreset_mode = getattr(env, "autoreset_mode", None)  # NEXT_STEP: resets one step late
        self.last_step_time = 0.0
        self.total_sleep_s = 0.0

    def reset(self, seed: Optional[int] = None) -> Any:
        return self.env.reset(seed=seed)

    def step(self, actions: Any) -> Step:
        out = self.env.step(actions)
        dt = self.sampler.draw()
        self.last_step_time = dt
        self.total_sleep_s += dt
        if self.sleep and dt > 0:
            time.sleep(dt)
        return out

    def sample_actions(self, generator=None):
        fn = getattr(self.env, "sample_actions", None)
        return fn(generator) if fn is not None else TensorVecEnv.sample_actions(self, generator)

    def __getattr__(self, name: str) -> Any:
        # optional capabilities of the wrapped env (reset_idx, randomize_episode_progress, ...)
        if name == "env":
            raise AttributeError(name)
        return getattr(self.env, name)

    def get_state(self) -> Optional[Dict[str, Any]]:
        inner = self.env.get_state() if hasattr(self.env, "get_state") else None
        if inner is None:
            # the source cannot restore its episodes: say so (None), as the other wrappers
            # do, so a restore keeps the live episodes and cuts the checkpoint's in-flight ones
            return None
        return {"inner": inner, "sampler": self.sampler.get_state()}

    def set_state(self, state: Dict[str, Any]) -> None:
        if state.get("inner") is not None and hasattr(self.env, "set_state"):
            self.env.set_state(state["inner"])
        self.sampler.set_state(state["sampler"])

    def close(self) -> None:
        self.env.close()


class VariableTimeCreator:
    """Picklable env creator for ``config.environment(...)``:
    ``VariableTimeCreator("CartPole", mean_s=2e-3, std_s=2e-3)`` builds the
    named env from the algorithm's env context and wraps it; the sleep RNG is
    seeded from the context's seed (offset so it is independent of the env's)."""

    def __init__(self, name: str, mean_s: float, std_s: float = 0.0, distribution: str = "exponential",
                 **task_kwargs: Any):
        check_step_time(float(mean_s), float(std_s), distribution)
        self.name, self.mean_s, self.std_s, self.distribution = name, float(mean_s), float(std_s), distribution
        self.task_kwargs = dict(task_kwargs)

    def __call__(self, ctx: Mapping[str, Any]) -> VariableTimeEnv:
        from .registry import make_from_context

        ctx = dict(ctx)
        inner = make_from_context(self.name, {**self.task_kwargs, **ctx})
        seed = ctx.get("seed")
        sleep_seed = None if seed is None else [int(seed), 0x5EE9]
        return VariableTimeEnv(inner, self.mean_s, self.std_s, self.distribution, seed=sleep_seed)

    def __repr__(self) -> str:
        return (f"VariableTimeCreator({self.name!r}, mean_s={self.mean_s}, std_s={self.std_s}, "
                f"distribution={self.distribution!r})")
