"""MinAtar games as a tensor vector env (``minatar:<game>`` names).

MinAtar (Young & Tian, 2019) is a set of 10x10 miniature Atari games written in
numpy, one Python object per game instance. :class:`MinAtarVecEnv` keeps ``N``
``minatar.Environment`` objects and steps them in a tight Python loop -- the
per-env loop is inherent to this CPU source -- writing every result into one
preallocated host staging buffer that reaches the device with a single copy per
step (see :mod:`rllib_fast.envs.upload`).

Names: ``minatar:breakout``, ``minatar:space_invaders``, ``minatar:freeway``,
``minatar:seaquest``, ``minatar:asterix`` (also accepted: ``Breakout``,
``SpaceInvaders``, ``MinAtar/Breakout-v1``).

Decisions:

* **Observations** are MinAtar's boolean state as ``uint8`` ``[N, 10, 10, C]``
  (channels last, values 0/1; ``C`` = 4 breakout, 6 space_invaders, 7 freeway,
  10 seaquest, 4 asterix). Not frame-stacked: MinAtar states already encode
  motion (trail channels); wrap with :class:`~rllib_fast.envs.frame_stack.FrameStack`
  if wanted.
* **Actions**: ``Discrete(len(action_set))`` over the game's *minimal* action set
  by default (``minimal_action_set=True``; 3 actions for breakout, 4 for
  space_invaders, 3 for freeway, 6 for seaquest, 5 for asterix) -- what
  MinAtar's ``MinAtar/<Game>-v1`` gymnasium ids use. ``minimal_action_set=False``
  gives the raw ``Environment``'s 6 actions (the ``-v0`` ids).
* **Sticky actions**: ``sticky_action_prob=0.1`` as MinAtar's default
  (configurable; 0 disables). As in MinAtar, the repeated "last action" is not
  cleared at an episode reset. ``difficulty_ramping=True`` as MinAtar's default.
* **Time limit**: ``max_episode_steps=27_000`` by default -- the paper's Atari
  maximum path length (108k frames / frameskip 4). MinAtar itself has no time
  limit (freeway ends by its own 2500-step timer), so this only bounds runaway
  episodes of a strong agent (e.g. breakout regenerates its bricks) and reports
  them as ``truncated`` (never ``terminated``), so learners bootstrap through it.
  ``None`` disables it.
* **Autoreset** is same-step: ``obs`` of an ended env is already its reset
  state, ``final_obs`` the terminal state (for the other rows it equals
  ``obs``; it *is* the ``obs`` tensor when no env ended); ``valid`` is always
  None.
* **Seeding**: ``reset(seed)`` seeds env ``i`` with the ``i``-th word of
  ``numpy.random.SeedSequence(seed).generate_state(N)`` (independent streams,
  reproducible for a given ``(seed, N)``); the constructor's ``seed`` is used
  for the first ``reset()`` without one. Later resets (including autoresets)
  continue each env's stream. Unseeded envs draw OS entropy (MinAtar's default).
* ``get_state``/``set_state`` pickle the game objects (RNG included), for an
  exact resume.
"""
from __future__ import annotations

import pickle
import re
from typing import Any, Dict, List, Optional

import gymnasium as gym
import numpy as np
import torch

from .base import Step, TensorVecEnv, canonical_device, check_num_envs
from .registry import register_prefix
from .upload import PackedUploader
from ..core.seeding import env_seeds

__all__ = ["MinAtarVecEnv", "make_minatar", "MINATAR_GAMES"]

MINATAR_GAMES = ("asterix", "breakout", "freeway", "seaquest", "space_invaders")


def actions_to_list(actions: Any) -> List[int]:
    if isinstance(actions, torch.Tensor):
        actions = actions.detach().to("cpu")
        return actions.view(-1).tolist()
    return np.asarray(actions).reshape(-1).tolist()


# ---------------------------------------------------------------------------
# MinAtar
# ---------------------------------------------------------------------------
def _import_minatar():
    try:
        from minatar import Environment
    except ImportError as e:  # pragma: no cover - depends on the install
        raise ImportError("MinAtar is not installed; install the `atari` extra: "
                          "pip install 'rllib_fast[atari]' (or pip install minatar)") from e
    return Environment


def canonical_minatar_game(name: str) -> str:
    """``"Breakout"``, ``"MinAtar/SpaceInvaders-v1"``, ``"space-invaders"`` ->
    MinAtar's module name (``"breakout"``, ``"space_invaders"``)."""
    base = name.split("/")[-1]
    base = re.sub(r"-v\d+$", "", base)
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", base).replace("-", "_").lower()
    if snake not in MINATAR_GAMES:
        raise ValueError(f"unknown MinAtar game {name!r}; allowed: {', '.join(MINATAR_GAMES)} "
                         f"(as minatar:<game>, e.g. minatar:breakout)")
    return snake


class MinAtarVecEnv(TensorVecEnv):
    """``N`` MinAtar games stepped in lock-step as a ``TensorVecEnv``.

    Args:
        game: MinAtar game (see :data:`MINATAR_GAMES`; CamelCase accepted).
        num_envs: number of game instances ``N``.
        device: torch device of every returned tensor.
        seed: seed of the first ``reset()`` called without one.
        sticky_action_prob: probability of repeating the previous action (0.1).
        difficulty_ramping: MinAtar's difficulty ramping (True).
        max_episode_steps: time limit reported as truncation (27,000; None = none).
        minimal_action_set: act in the game's minimal action set (True) or in
            all 6 MinAtar actions.

    See the module docstring for the semantics. Attributes besides the
    contract: ``game``, ``action_set`` (MinAtar action index of each discrete
    action), ``games`` (the ``minatar.Environment`` objects).
    """

    def __init__(self, game: str, num_envs: int = 1, device: Any = "cpu", seed: Optional[int] = None, *,
                 sticky_action_prob: float = 0.1, difficulty_ramping: bool = True,
                 max_episode_steps: Optional[int] = 27_000, minimal_action_set: bool = True):
        Environment = _import_minatar()
        self.game = canonical_minatar_game(game)
        self.num_envs = n = check_num_envs(num_envs)
        self.device = canonical_device(device)
        self.games = [Environment(self.game, sticky_action_prob=float(sticky_action_prob),
                                  difficulty_ramping=bool(difficulty_ramping)) for _ in range(n)]
        g0 = self.games[0]
        self.action_set = (list(g0.minimal_action_set()) if minimal_action_set
                           else list(range(g0.num_actions())))
        self.single_action_space = gym.spaces.Discrete(len(self.action_set))
        shape = tuple(int(s) for s in g0.state_shape())
        self.single_observation_space = gym.spaces.Box(0, 1, shape=shape, dtype=np.uint8)
        self.max_episode_steps = None if max_episode_steps is None else int(max_episode_steps)
        self._seed = seed
        self._seeded = False
        self._t = np.zeros(n, dtype=np.int64)
        self._up = PackedUploader(n, shape, self.device, n_f32=1, n_bool=2)
        self._amap = np.asarray(self.action_set, dtype=np.int64)

    # -- contract ---------------------------------------------------------------
    def reset(self, seed: Optional[int] = None) -> torch.Tensor:
        if seed is None and not self._seeded:
            seed = self._seed
        self._seeded = True
        if seed is not None:
            words = env_seeds(seed, self.num_envs)
            for g, s in zip(self.games, words.tolist()):
                g.seed(int(s))
        up = self._up
        up.wait()
        obs = up.obs
        for i, g in enumerate(self.games):
            g.reset()
            obs[i] = g.state()
        self._t[:] = 0
        return up.send_obs()

    def step(self, actions: Any) -> Step:
        acts = actions_to_list(actions)
        if min(acts) < 0 or max(acts) >= len(self._amap):   # numpy would wrap negative indices
            raise IndexError(f"{type(self).__name__}.step: actions must be in [0, {len(self._amap)}), "
                             f"got {min(acts)}..{max(acts)}")
        acts = self._amap[acts].tolist()
        up = self._up
        up.wait()
        rew, term, trunc, obs, final = up.f32[0], up.bools[0], up.bools[1], up.obs, up.final
        term[:] = False
        trunc[:] = False
        t = self._t
        t += 1
        limit = self.max_episode_steps
        hit = (t >= limit).tolist() if limit is not None else [False] * self.num_envs
        rewards = [0.0] * self.num_envs
        ended = []
        for i, (g, a, h) in enumerate(zip(self.games, acts, hit)):
            r, terminal = g.act(a)
            rewards[i] = r
            if terminal or h:
                final[i] = g.state()
                g.reset()
                if terminal:
                    term[i] = True
                else:
                    trunc[i] = True
                ended.append(i)
            obs[i] = g.state()
        rew[:] = rewards
        if ended:
            t[ended] = 0
            keep = np.ones(self.num_envs, dtype=bool)
            keep[ended] = False
            final[keep] = obs[keep]
        f32, flags, o, fo = up.send(with_final=bool(ended))
        return Step(obs=o, reward=f32[0], terminated=flags[0], truncated=flags[1], final_obs=fo)

    # -- optional ---------------------------------------------------------------
    def get_state(self) -> Dict[str, Any]:
        return {"games": pickle.dumps(self.games), "t": self._t.copy(), "seeded": self._seeded}

    def set_state(self, state: Dict[str, Any]) -> None:
        games = pickle.loads(state["games"])
        if len(games) != self.num_envs:
            raise ValueError(f"state holds {len(games)} envs, this env has {self.num_envs}")
        self.games = games
        self._t[:] = state["t"]
        self._seeded = bool(state["seeded"])

    def close(self) -> None:
        self.games = []


def make_minatar(game: str, num_envs: int = 1, device: Any = "cpu", seed: Optional[int] = None,
                 **kwargs: Any) -> MinAtarVecEnv:
    """Creator behind the ``minatar:<game>`` names; kwargs go to
    :class:`MinAtarVecEnv` (``sticky_action_prob``, ``difficulty_ramping``,
    ``max_episode_steps``, ``minimal_action_set``)."""
    return MinAtarVecEnv(game, num_envs=num_envs, device=device, seed=seed, **kwargs)


register_prefix("minatar", make_minatar)
