"""Env names -> creators of tensor vector envs.

Names (part of the public interface):

* built-in batched torch tasks under their plain names: ``CartPole``,
  ``Acrobot``, ``Pendulum``, ``MountainCarContinuous``;
* gymnasium ids as ``gym:<id>`` (e.g. ``gym:HalfCheetah-v5``);
* MinAtar games as ``minatar:<game>`` (e.g. ``minatar:breakout``) and Atari
  games with the DQN-family preprocessing as ``atari:<Game>`` (e.g.
  ``atari:Breakout``); both need the ``atari`` extra, imported only when such an
  env is created;
* simulator sources under their own prefixes (each imports its simulator only
  inside the creator): ``envpool:<id>`` (e.g. ``envpool:Ant-v4``,
  ``envpool:Pong-v5``; ``mujoco``/``envpool`` extra), ``isaacgym:<Task>``
  (IsaacGymEnvs, process-isolated by default), ``isaaclab:<Task>`` (Isaac Lab
  gym ids, e.g. ``isaaclab:Isaac-Ant-Direct-v0``) and ``mjlab:<task id>``
  (e.g. ``mjlab:Mjlab-Cartpole-Balance``; ``mjlab`` extra); see ``docs/sources.md``.

Every creator takes ``(num_envs, device, seed, **task_kwargs)`` and returns a
:class:`~rllib_fast.envs.base.TensorVecEnv`. The same names are registered with
``ray.tune.registry.register_env`` so ``config.environment("CartPole")`` resolves
inside Tune trial actors, where the creator receives an ``EnvContext`` dict.
"""
from __future__ import annotations

import difflib
from typing import Any, Callable, Dict, List, Mapping, Optional

from .base import TensorVecEnv

EnvCreator = Callable[..., TensorVecEnv]

_CREATORS: Dict[str, EnvCreator] = {}
_PREFIXES: Dict[str, EnvCreator] = {}
_NOT_PROBED: set = set()   # prefixes of simulators: never started only to read their spaces
# keys of env_config that are not task kwargs
_RESERVED = ("num_envs", "device", "seed")


class UnknownEnvError(ValueError):
    """Raised for an env name no source knows."""


def register(name: str, creator: EnvCreator) -> None:
    """Register a tensor env creator under a plain name."""
    _CREATORS[name] = creator


def register_prefix(prefix: str, creator: EnvCreator, probe: bool = True) -> None:
    """Register a source for ``<prefix>:<id>`` names; creator gets ``id`` first.
    ``probe=False``: a simulator, too costly to start for a config check
    (:mod:`rllib_fast.envs.probe`)."""
    _PREFIXES[prefix] = creator
    if not probe:
        _NOT_PROBED.add(prefix)


def can_probe(name: str) -> bool:
    """Whether validation may build a 1-env instance of ``name`` to read its spaces."""
    return is_known(name) and name.partition(":")[0] not in _NOT_PROBED


def list_envs() -> List[str]:
    """Plain names plus ``prefix:<id>`` patterns, for ``rllib-fast list``."""
    _ensure_builtin_sources()
    return sorted(_CREATORS) + [f"{p}:<id>" for p in sorted(_PREFIXES)]


def is_known(name: Any) -> bool:
    if not isinstance(name, str):
        return False
    _ensure_builtin_sources()  # a fresh process (a Tune trial actor) may not have loaded them yet
    if name in _CREATORS:
        return True
    prefix, sep, _ = name.partition(":")
    return bool(sep) and prefix in _PREFIXES


def unknown_env_message(name: Any) -> str:
    close = difflib.get_close_matches(str(name), list(_CREATORS), n=3)
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    return (f"unknown env {name!r}.{hint} Allowed: {', '.join(list_envs())} "
            f"(or a callable / registered Tune env returning a TensorVecEnv)")


def make(name: str, num_envs: int = 1, device: Any = "cpu", seed: Optional[int] = None,
         **task_kwargs: Any) -> TensorVecEnv:
    """Create a tensor vector env by name."""
    _ensure_builtin_sources()
    if name in _CREATORS:
        return _CREATORS[name](num_envs=num_envs, device=device, seed=seed, **task_kwargs)
    prefix, sep, rest = name.partition(":")
    if sep and prefix in _PREFIXES:
        return _PREFIXES[prefix](rest, num_envs=num_envs, device=device, seed=seed, **task_kwargs)
    raise UnknownEnvError(unknown_env_message(name))


def make_from_context(name: str, ctx: Mapping[str, Any]) -> TensorVecEnv:
    """Create from a Tune ``EnvContext``/dict: reserved keys + task kwargs."""
    ctx = dict(ctx)
    kwargs = {k: v for k, v in ctx.items() if k not in _RESERVED}
    return make(name, num_envs=int(ctx.get("num_envs", 1)), device=ctx.get("device", "cpu"),
                seed=ctx.get("seed"), **kwargs)


def register_with_tune() -> None:
    """Make every plain name resolvable by RLlib/Tune (``register_env``).

    Prefixed names (``isaacgym:Ant``, ``mjlab:...``) are not registered here:
    Tune's registry needs exact names, so FastAlgorithm resolves them itself
    through :func:`make` when it builds its source.
    """
    from ray.tune.registry import register_env

    _ensure_builtin_sources()
    for name in list(_CREATORS):
        register_env(name, _TuneCreator(name))


class _TuneCreator:
    """Picklable creator for Tune's registry (lambdas do not survive cloudpickle
    by reference across processes as cleanly)."""

    def __init__(self, name: str):
        self.name = name

    def __call__(self, ctx: Mapping[str, Any]) -> TensorVecEnv:
        return make_from_context(self.name, ctx)


_loaded = False


def _ensure_builtin_sources() -> None:
    """Import the built-in sources lazily (they register themselves)."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    from . import classic  # noqa: F401  (registers CartPole, Acrobot, ...)
    from . import gymnasium as _gym  # noqa: F401  (registers the gym: prefix)
    # image sources: these modules import minatar / ale_py only inside their creators
    from . import atari as _atari  # noqa: F401  (registers the atari: prefix)
    from . import minatar as _minatar  # noqa: F401  (registers the minatar: prefix)
    # simulator sources: isaacgym/isaacgymenvs, isaaclab and envpool are imported only inside the creators
    from . import envpool as _envpool  # noqa: F401  (registers the envpool: prefix)
    from . import isaacgym as _isaacgym  # noqa: F401  (registers the isaacgym: prefix)
    from . import isaaclab as _isaaclab  # noqa: F401  (registers the isaaclab: prefix)
    from . import mjlab as _mjlab  # noqa: F401  (registers the mjlab: prefix; mjlab imported in the creator)
