"""Atari 2600 games with the DQN-family preprocessing (``atari:<Game>`` names).

``make("atari:Breakout", num_envs=N)`` returns ``FrameStack(AtariFrames(...), 4)``:
uint8 observations ``[N, 104, 80, 4]`` (channels last, oldest frame first),
``Discrete(n)`` over the game's minimal action set, the preprocessing of Stooke
& Abbeel, "Accelerated Methods for Deep Reinforcement Learning" (2018).

Source: ale-py's native C++ vector env ``ale_py.AtariVectorEnv`` (threaded, one
call per step for all ``N`` games; needs ``ale-py>=0.12``, the ``atari`` extra).
It implements no-op starts, frame skip, max-pooling and greyscale natively, but
its only resize is an interpolating resize of the whole frame, not the paper's
crop + subsample; so it runs at the full 210x160 greyscale resolution (verified
to be ALE's exact ``getScreenGrayscale`` frame) and the crop/subsample is done
here. ``GymVectorEnvAdapter`` is not reused because it casts observations to
float32 (4x the bytes of uint8 images) and knows nothing of the crop; the
uint8 path below uploads 104x80 bytes per env per step.

Preprocessing (each a keyword of :class:`AtariFrames` / ``make``):

* **No-op starts**: a random number (0..``noop_max``=30) of no-ops after every
  reset (native).
* **Frame skip 4 with max-pool**: each action is repeated ``frameskip=4``
  frames, the observation is the pixel-wise max of the last 2 frames, rewards
  are summed over the 4 frames (native).
* **Greyscale** (ALE's luminance palette, native).
* **Crop + downsample to 104x80** (here): of the 210x160 frame the first and
  last rows (0 and 209) are cropped, leaving 208x160, then every other row and
  column is kept (subsampling, no averaging): ``frame[1:-1:2, ::2]``, i.e. rows
  1, 3, ..., 207 and columns 0, 2, ..., 158. This is the paper authors' own
  implementation (accel_rl/rlpyt ``AtariEnv``: "crop two rows, downsample 2x").
* **Frame stacking** 4 on the device via
  :class:`~rllib_fast.envs.frame_stack.FrameStack` (``frame_stack=4``; zero
  padding at episode starts, ``pad="repeat"`` for baselines-style; 1 = no stack).
* **Reward clipping** (``clip_rewards=True``): ``Step.reward`` is the frame-
  skip-summed reward clipped to [-1, 1] (= its sign, rewards being integers).
  The *unclipped* reward is always in ``Step.extras["raw_reward"]`` (float32
  ``[N]``); report episode returns from it, not from ``reward``.
* **Episodic life** (``episodic_life=False`` by default, as in the paper's
  setting and the current evaluation standard): when on, losing a life is
  reported as ``terminated`` but the game goes on (no reset; the DQN
  ``EpisodicLifeEnv`` trick, implemented here from the ``lives`` counter since
  the native option restarts the whole game on every life loss). FrameStack
  restarts the stack at such a step. ``Step.extras["real_done"]`` (bool ``[N]``)
  marks where the game really ended (game over or time limit; equals
  ``terminated | truncated`` when episodic life is off): use it with
  ``raw_reward`` to report true game scores.
* **Sticky actions**: ``repeat_action_probability=0.0`` as in the paper
  (DQN-era, deterministic ALE). Note gymnasium's ``ALE/<Game>-v5`` default is
  0.25 (Machado et al. 2018); pass 0.25 for that protocol.
* **Fire on reset**: off (``fire_reset=False``), as in the paper/rlpyt; the
  agent must learn to press FIRE.
* **Time limit**: ``max_episode_steps=27_000`` agent steps (= 108k frames, the
  paper's max path length), reported as ``truncated``, never ``terminated``.
  ``None`` = no limit.

Autoreset is same-step (``obs`` of an ended env is already its reset frame,
``final_obs`` the terminal one), ``valid`` is always None. ``reset(seed)`` seeds
game ``i`` with word ``i`` of ``numpy.random.SeedSequence(seed)`` (31-bit);
later resets continue each game's own RNG.
"""
from __future__ import annotations

import re
from typing import Any, Optional

import gymnasium as gym
import numpy as np
import torch

from .base import Step, TensorVecEnv, canonical_device, check_num_envs
from .frame_stack import FrameStack
from .minatar import actions_to_list
from .upload import PackedUploader
from .registry import register_prefix
from ..core.seeding import env_seeds

__all__ = ["AtariFrames", "make_atari", "crop_downsample", "canonical_atari_game", "FRAME_SHAPE"]

#: (H, W) of one preprocessed frame.
FRAME_SHAPE = (104, 80)
_RAW_SHAPE = (210, 160)
_NO_LIMIT_FRAMES = 2 ** 30


def crop_downsample(frames: np.ndarray) -> np.ndarray:
    """The paper's crop + 2x subsample of greyscale ALE frames ``[..., 210, 160]``
    -> ``[..., 104, 80]``: drop rows 0 and 209, keep every other row (1, 3, ...,
    207) and column (0, 2, ..., 158). Returns a strided view (no copy)."""
    return frames[..., 1:-1:2, ::2]


def _import_ale():
    try:
        import ale_py
    except ImportError as e:  # pragma: no cover - depends on the install
        raise ImportError("Atari envs need ale-py; install the `atari` extra: "
                          "pip install 'rllib_fast[atari]'") from e
    if not hasattr(ale_py, "AtariVectorEnv"):  # pragma: no cover
        raise ImportError(f"ale-py {getattr(ale_py, '__version__', '?')} has no AtariVectorEnv; "
                          "the `atari` extra needs ale-py>=0.12: pip install -U 'rllib_fast[atari]'")
    return ale_py


def canonical_atari_game(name: str) -> str:
    """``"Breakout"``, ``"ALE/Breakout-v5"``, ``"BreakoutNoFrameskip-v4"``,
    ``"MsPacman"`` -> ale-py ROM id (``"breakout"``, ``"ms_pacman"``).
    Validated against ale-py's ROM list (imports ale_py)."""
    base = name.split("/")[-1]
    base = re.sub(r"-v\d+$", "", base)
    base = re.sub(r"(NoFrameskip|Deterministic)$", "", base)
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", base).replace("-", "_").lower()
    ale_py = _import_ale()
    roms = ale_py.roms.get_all_rom_ids()
    if snake not in roms:
        import difflib

        close = difflib.get_close_matches(snake, roms, n=3)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise ValueError(f"unknown Atari game {name!r} (ROM id {snake!r}).{hint} Use atari:<Game> with "
                         "the gymnasium name (e.g. atari:Breakout, atari:SpaceInvaders)")
    return snake


class AtariFrames(TensorVecEnv):
    """``N`` Atari games as a ``TensorVecEnv`` of *single* preprocessed frames
    ``[N, 104, 80, 1]`` uint8 (no stacking; :func:`make_atari` adds it).

    Args:
        game: game name (``"Breakout"``, ``"ALE/Breakout-v5"`` or ROM id).
        num_envs, device, seed: as every creator.
        noop_max, frameskip, episodic_life, clip_rewards,
        repeat_action_probability, max_episode_steps, fire_reset: see the
            module docstring.
        full_action_space: 18 actions instead of the game's minimal set.
        num_threads: ale-py worker threads (0 = its default).
        keep_raw: keep the latest raw 210x160 frames (``last_raw_obs``,
            ``[N, 210, 160]`` numpy) for inspection/tests.

    Extras of every step: ``raw_reward`` (float32, unclipped) and
    ``real_done`` (bool, the game itself ended).
    """

    def __init__(self, game: str, num_envs: int = 1, device: Any = "cpu", seed: Optional[int] = None, *,
                 noop_max: int = 30, frameskip: int = 4, episodic_life: bool = False,
                 clip_rewards: bool = True, repeat_action_probability: float = 0.0,
                 max_episode_steps: Optional[int] = 27_000, fire_reset: bool = False,
                 full_action_space: bool = False, num_threads: int = 0, keep_raw: bool = False):
        ale_py = _import_ale()
        self.game = canonical_atari_game(game)
        self.num_envs = n = check_num_envs(num_envs)
        self.device = canonical_device(device)
        self.max_episode_steps = None if max_episode_steps is None else int(max_episode_steps)
        frames = (_NO_LIMIT_FRAMES if self.max_episode_steps is None
                  else self.max_episode_steps * int(frameskip))
        self.vec = ale_py.AtariVectorEnv(
            self.game, n, num_threads=int(num_threads), max_num_frames_per_episode=frames,
            repeat_action_probability=float(repeat_action_probability),
            full_action_space=bool(full_action_space), autoreset_mode="SameStep",
            img_height=_RAW_SHAPE[0], img_width=_RAW_SHAPE[1], grayscale=True, stack_num=1,
            frameskip=int(frameskip), maxpool=True, noop_max=int(noop_max),
            episodic_life=False, life_loss_info=False, reward_clipping=False,
            use_fire_reset=bool(fire_reset))
        self.single_action_space = gym.spaces.Discrete(int(self.vec.single_action_space.n))
        self.single_observation_space = gym.spaces.Box(0, 255, shape=(*FRAME_SHAPE, 1), dtype=np.uint8)
        self.episodic_life = bool(episodic_life)
        self.clip_rewards = bool(clip_rewards)
        self.keep_raw = bool(keep_raw)
        self.last_raw_obs: Optional[np.ndarray] = None
        self._seed = seed
        self._seeded = False
        self._lives = np.zeros(n, dtype=np.int32)
        self._up = PackedUploader(n, self.single_observation_space.shape, self.device, n_f32=2, n_bool=3)

    def _frames(self, raw: np.ndarray) -> np.ndarray:
        raw = raw[:, 0]  # stack_num = 1
        if self.keep_raw:
            self.last_raw_obs = raw.copy()
        return crop_downsample(raw)

    # -- contract ---------------------------------------------------------------
    def reset(self, seed: Optional[int] = None) -> torch.Tensor:
        if seed is None and not self._seeded:
            seed = self._seed
        self._seeded = True
        seeds = None
        if seed is not None:
            seeds = env_seeds(seed, self.num_envs).astype(np.int64) & 0x7FFFFFFF
        obs, info = self.vec.reset(seed=seeds)
        self._lives[:] = info["lives"]
        up = self._up
        up.wait()
        np.copyto(up.obs[..., 0], self._frames(obs))
        return up.send_obs()

    def step(self, actions: Any) -> Step:
        acts = np.asarray(actions_to_list(actions), dtype=np.int32)
        obs, reward, term, trunc, info = self.vec.step(acts)
        up = self._up
        up.wait()
        np.copyto(up.obs[..., 0], self._frames(obs))
        game_over = np.asarray(term, dtype=bool)
        reset_rows = game_over | np.asarray(trunc, dtype=bool)  # the source reset these
        lives = info["lives"]
        terminated = game_over
        if self.episodic_life:
            terminated = game_over | ((lives < self._lives) & ~reset_rows)
        self._lives[:] = lives
        raw = up.f32[1]
        raw[:] = reward
        if self.clip_rewards:
            np.clip(raw, -1.0, 1.0, out=up.f32[0])
        else:
            up.f32[0] = raw
        flags = up.bools
        flags[0] = terminated
        flags[1] = reset_rows & ~terminated
        flags[2] = reset_rows
        any_reset = bool(reset_rows.any())
        if any_reset:
            np.copyto(up.final, up.obs)
            idx = np.flatnonzero(reset_rows)
            up.final[idx, ..., 0] = crop_downsample(info["final_obs"][idx, 0])
        f32, b, o, fo = up.send(with_final=any_reset)
        return Step(obs=o, reward=f32[0], terminated=b[0], truncated=b[1], final_obs=fo,
                    extras={"raw_reward": f32[1], "real_done": b[2]})

    def close(self) -> None:
        self.vec.close()


def make_atari(game: str, num_envs: int = 1, device: Any = "cpu", seed: Optional[int] = None, *,
               frame_stack: int = 4, pad: str = "zero", **kwargs: Any) -> TensorVecEnv:
    """Creator behind the ``atari:<Game>`` names: ``FrameStack(AtariFrames(game,
    ...), frame_stack, pad)`` (just ``AtariFrames`` for ``frame_stack=1``).
    Other kwargs go to :class:`AtariFrames`."""
    env = AtariFrames(game, num_envs=num_envs, device=device, seed=seed, **kwargs)
    return FrameStack(env, int(frame_stack), pad=pad) if int(frame_stack) > 1 else env


register_prefix("atari", make_atari)
