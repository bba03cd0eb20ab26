"""The spaces of a configured env, known before an algorithm is built.

Why: a config that cannot work with its env (FastDQN on Pendulum's Box
actions, ``asymmetric_critic=True`` on a source without critic states, a PQL
replay larger than its memory cap) should fail at validation, in the driver,
before Ray or Tune start a trial. The spaces come from a 1-env CPU instance,
cached per (name, env_config), and only for sources that are cheap to build
(the built-in torch tasks, gymnasium, MinAtar, Atari): a simulator (Isaac Gym,
Isaac Lab, mjlab, envpool) is never started for a check. Its config is checked
when the algorithm builds the source, with the same messages
(:func:`action_space_error`), so each rule has one wording and one owner.
"""
from __future__ import annotations

from typing import Any, Dict, NamedTuple, Optional

import numpy as np

from .base import is_discrete_space


class Spaces(NamedTuple):
    observation: Any
    action: Any
    state: Any   # the asymmetric critic's input space, None when the source has none


_PROBED: Dict[tuple, Optional[Spaces]] = {}

#: what ``required`` means in :func:`action_space_error`
ACTION_SPACE_KINDS = ("discrete", "continuous", "bounded continuous")


def probe_spaces(env: Any, env_config: Optional[dict] = None) -> Optional[Spaces]:
    """The spaces of env ``env`` (a registered name) under ``env_config``, or None
    when they cannot be known cheaply (a callable, a simulator source, a source
    whose package is missing or that fails to build: its build reports that)."""
    from . import registry

    if not isinstance(env, str) or not registry.can_probe(env):
        return None
    try:
        key = (env, repr(sorted((env_config or {}).items())))
    except TypeError:
        return None
    if key not in _PROBED:
        _PROBED[key] = _probe(env, dict(env_config or {}))
    return _PROBED[key]


def _probe(env: str, env_config: dict) -> Optional[Spaces]:
    from . import registry

    try:
        inst = registry.make_from_context(env, {**env_config, "num_envs": 1, "device": "cpu", "seed": 0})
    except Exception:  # noqa: BLE001 - validation must not fail because probing failed
        return None
    try:
        return Spaces(inst.single_observation_space, inst.single_action_space,
                      getattr(inst, "single_state_space", None))
    finally:
        inst.close()


def action_space_error(owner: str, required: str, space: Any, env: Any) -> Optional[str]:
    """Why ``owner`` cannot act in ``space`` (env ``env``), or None.
    ``required``: one of :data:`ACTION_SPACE_KINDS`."""
    if required == "discrete":
        return None if is_discrete_space(space) else f"{owner} needs a Discrete action space; env {env!r} has {space}"
    if is_discrete_space(space):
        return f"{owner} needs a continuous (Box) action space; env {env!r} has {space}"
    if required == "bounded continuous" and not (np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high))):
        return f"{owner} needs a bounded action space; env {env!r} has {space}"
    return None


def states_error(owner: str, asymmetric_critic: Any, state_space: Any, env: Any) -> Optional[str]:
    """Why ``asymmetric_critic`` cannot hold for a source whose state space is
    ``state_space`` (None: the source exposes no critic states), or None."""
    if asymmetric_critic is True and state_space is None:
        return (f"{owner}: `asymmetric_critic` = True but env {env!r} exposes no critic states (its "
                "single_state_space is None); allowed: 'auto' or False for this env")
    return None
