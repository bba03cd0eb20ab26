"""Asymmetric actor-critic: the critic sees the source's privileged ``states``.

Simulators such as Isaac Gym and Isaac Lab can expose, next to the policy's
observation, a second per-env vector meant for the critic only (``states``;
Isaac Lab calls it the ``"critic"`` observation group). The critic is used only
in training, so it may see information a deployed policy will not have; the
actor keeps reading the observation, so inference (``get_module()``,
evaluation) needs nothing but observations.

The source contract for states (see ``docs/sources.md``):

* ``env.single_state_space``: a Box, or None/absent when the source has none;
* ``env.states``: the current ``[N, ...]`` states (after ``reset`` too);
* ``Step.extras["states"]``: the states after the step (the new episode's
  first states where an env was reset);
* ``Step.extras["final_states"]`` (optional): the states that go with
  ``Step.final_obs`` -- the states to bootstrap from at a truncation. Sources
  whose ``final_obs`` *is* the step's observation (Isaac Gym returns the
  terminal observation with ``reset=1`` and resets one step later) need not
  provide it: ``Step.extras["states"]`` then are the terminal states, and that
  is the fallback used here.

``asymmetric_critic``: ``"auto"`` uses states when the source has them,
``True`` requires them (one-line error at build otherwise), ``False`` keeps
the critic on observations.
"""
from __future__ import annotations

import math
from typing import Any, Optional

import torch

from ..core.params import Param
from ..envs.probe import states_error

ASYMMETRIC_CRITIC = Param(
    "auto", "critic input: 'auto' = the source's privileged states when it has them (asymmetric "
    "actor-critic), True = require states, False = the observation", (str, bool),
    check=(lambda v: v == "auto" or isinstance(v, bool), "'auto', True or False"))


def state_dim(config: Any, env: Any, algo_name: str) -> Optional[int]:
    """Flat width of the critic's states, or None when the critic reads observations.

    Raises one-line ValueError when ``asymmetric_critic`` is True and the source
    exposes no states."""
    mode = getattr(config, "asymmetric_critic", "auto")
    space = getattr(env, "single_state_space", None)
    if mode is False or (mode == "auto" and getattr(config, "shared_trunk", False)):
        return None   # a shared trunk reads one input for both heads: the observation
    if space is None:
        err = states_error(algo_name, mode, space, config.env)
        if err:
            raise ValueError(err)
        return None
    return int(math.prod(space.shape))


def current_states(env: Any) -> torch.Tensor:
    """The env's current states, flat float ``[N, S]`` (a copy: sources may reuse buffers)."""
    s = env.states
    if s is None:
        raise RuntimeError(f"{type(env).__name__} declares single_state_space but env.states is None after reset")
    return s.float().reshape(s.shape[0], -1).clone()


def step_states(step: Any) -> torch.Tensor:
    """``Step.extras["states"]`` flat float ``[N, S]``."""
    s = step.extras["states"]
    return s.float().reshape(s.shape[0], -1)


def final_states(step: Any) -> torch.Tensor:
    """The states that go with ``step.final_obs`` (bootstrap at truncation):
    ``extras["final_states"]`` when the source provides it, else
    ``extras["states"]`` (exact for sources whose final observation is the
    step's observation, such as Isaac Gym)."""
    s = step.extras.get("final_states")
    if s is None:
        s = step.extras["states"]
    return s.float().reshape(s.shape[0], -1)
