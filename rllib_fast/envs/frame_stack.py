"""On-device frame stacking for image tensor vector envs.

:class:`FrameStack` wraps any :class:`~rllib_fast.envs.base.TensorVecEnv` whose
observations are channels-last images ``[N, H, W, C]`` and returns the last
``k`` frames concatenated along the channel axis, ``[N, H, W, k*C]`` (oldest
frame first, newest last: channels ``[(k-1)*C, k*C)`` are the current frame).

Design (all of it on ``env.device``, batched, no Python loop over envs):

* **Ring buffer.** A preallocated ring ``[N, H, W, k*C]`` (viewed as
  ``[N, H, W, k, C]``) in the inner obs dtype (uint8 for the image sources)
  holds the last ``k`` frames of every env. Since all envs step in lock-step a
  single host-side write pointer ``p`` serves every row: a step writes the new
  frame into slot ``p`` in place (no allocation).
* **No aliasing (a rolled copy, never a view).** The returned stacks are the
  ring gathered into oldest-to-newest order (``index_select`` of the frame
  axis with a precomputed order per write pointer -- a roll), which always
  produces a *fresh* tensor. A returned ``obs``/``final_obs`` therefore never
  changes when the ring is written later, so a replay buffer or rollout storage
  may keep a reference to it without copying. That one ``[N, H, W, k*C]``
  tensor per returned stack is the only per-step allocation (two when some env
  reset this step: ``final_obs`` and ``obs`` differ then).
* **Episode ends.** ``final_obs`` is the terminal stack: the last ``k - 1``
  frames of the ended episode followed by the source's terminal frame
  (``Step.final_obs``). The stack of an env whose episode ended is then
  re-initialised from its fresh reset frame (``Step.obs``) according to
  ``pad``:

  - ``"zero"`` (default): ``[0, ..., 0, reset_frame]``, as in Stooke & Abbeel's
    accel_rl/rlpyt Atari env and Dopamine (frames of the previous episode never
    leak in, and "start of episode" is visible to the network);
  - ``"repeat"``: ``[reset_frame] * k``, as OpenAI baselines' ``FrameStack``.

  ``reset()`` initialises every stack the same way.
* **Late-reset sources / ``valid``.** Sources that reset one step late
  (gymnasium ``NEXT_STEP``, envpool, IsaacGymEnvs) return the terminal frame as
  ``obs`` on the done step and the reset frame on the following, ``valid=False``
  step. For those the stack is *not* reset on the done step (``obs`` and
  ``final_obs`` are both the terminal stack) but on the ``valid=False`` step,
  whose ``obs`` is the reset stack; ``final_obs`` of an invalid row is set to
  that ``obs`` (the transition is dropped by storage anyway). ``valid``,
  ``reward``, flags and ``extras`` pass through unchanged. Whether the source
  resets late is read from ``env.autoreset_mode`` (``NEXT_STEP`` = late; what
  :class:`~rllib_fast.envs.gymnasium.GymVectorEnvAdapter` exposes) unless
  ``late_reset`` is given. For same-step sources a row is re-initialised when
  it is done or invalid.
* **No host sync.** On CUDA (any non-CPU device) the reset path is branch-free:
  masked in-place ops on the ring and a masked copy for ``obs``, executed every
  step (with no env done they change nothing). On a CPU device, where reading a
  flag costs nothing, the rows to reset are indexed instead (only they are
  touched; byte-wise masked passes over the whole ring are slow on CPU), and
  with no row to reset ``obs is final_obs``.
"""
from __future__ import annotations

from typing import Any, Dict, Optional

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode

from .base import Step, TensorVecEnv

__all__ = ["FrameStack"]

_PADS = ("zero", "repeat")
_NOT_FORWARDED = ("env", "reset_idx", "autoreset")


class FrameStack(TensorVecEnv):
    """Stack the last ``k`` channels-last frames of ``env`` on its device.

    Args:
        env: inner tensor vector env with a ``Box`` observation space of shape
            ``(H, W, C)`` (channels last).
        k: number of frames (``k >= 1``; ``k == 1`` just copies).
        pad: ``"zero"`` (default) or ``"repeat"``: how a fresh episode's stack
            is filled, see the module docstring.
        late_reset: whether ``env`` resets one step late (``valid=False`` on the
            step after a done). ``None`` reads ``env.autoreset_mode``.

    Attributes besides the contract: ``env`` (the inner env), ``k``, ``pad``.
    The observation space is the inner one tiled ``k`` times along channels,
    same dtype.
    """

    def __init__(self, env: TensorVecEnv, k: int, pad: str = "zero", late_reset: Optional[bool] = None):
        if int(k) < 1:
            raise ValueError(f"FrameStack: k must be >= 1, got {k}")
        if pad not in _PADS:
            raise ValueError(f"FrameStack: pad must be one of {_PADS}, got {pad!r}")
        space = env.single_observation_space
        if not isinstance(space, gym.spaces.Box) or len(space.shape) != 3:
            raise ValueError("FrameStack needs channels-last image observations, a Box of shape "
                             f"(H, W, C); got {space!r}")
        self.env = env
        self.k = int(k)
        self.pad = pad
        self.num_envs = int(env.num_envs)
        self.device = torch.device(env.device)
        self.single_action_space = env.single_action_space
        self.max_episode_steps = getattr(env, "max_episode_steps", None)
        self.normalize_obs_hint = getattr(env, "normalize_obs_hint", None)
        self.steps_on_worker_threads = getattr(env, "steps_on_worker_threads", False)
        h, w, c = (int(s) for s in space.shape)
        self._hwc = (h, w, c)
        self.single_observation_space = gym.spaces.Box(
            low=np.tile(np.asarray(space.low), (1, 1, self.k)),
            high=np.tile(np.asarray(space.high), (1, 1, self.k)), dtype=space.dtype)
        if late_reset is None:
            late_reset = getattr(env, "autoreset_mode", None) is AutoresetMode.NEXT_STEP
        self.late_reset = bool(late_reset)
        dtype = torch.from_numpy(np.zeros(0, dtype=space.dtype)).dtype
        self._ring = torch.zeros((self.num_envs, h, w, self.k * c), dtype=dtype, device=self.device)
        self._ring5 = self._ring.view(self.num_envs, h, w, self.k, c)
        self._ptr = self.k - 1  # slot of the newest frame
        # order[p]: ring slots oldest -> newest when the newest frame is in slot p
        self._order = [torch.tensor([(p + 1 + j) % self.k for j in range(self.k)], device=self.device)
                       for p in range(self.k)]
        self._sync_free = self.device.type == "cpu"

    # -- helpers ---------------------------------------------------------------
    def _stacked(self) -> torch.Tensor:
        """Fresh ``[N, H, W, k*C]`` copy of the ring, oldest frame first."""
        out = self._ring5.index_select(3, self._order[self._ptr])
        return out.view(self.num_envs, *self._hwc[:2], self.k * self._hwc[2])

    def _fill_all(self, frame: torch.Tensor) -> None:
        ring5 = self._ring5
        if self.pad == "repeat":
            ring5.copy_(frame.unsqueeze(3).expand_as(ring5))
        else:
            ring5.zero_()
            ring5[:, :, :, self._ptr] = frame

    def _reset_rows_indexed(self, rows: torch.Tensor, frame: torch.Tensor,
                            final: torch.Tensor) -> torch.Tensor:
        """CPU path: re-initialise the stacks of env indices ``rows`` from their
        reset frames (``frame`` rows); returns ``obs`` (``final`` with those rows
        replaced by their fresh stacks)."""
        f = frame.index_select(0, rows).unsqueeze(3)  # [m, H, W, 1, C]
        if self.pad == "repeat":
            fresh = f.expand(-1, -1, -1, self.k, -1)
            ring_rows = ordered = fresh
        else:
            ring_rows = torch.zeros((rows.numel(), *self._ring5.shape[1:]), dtype=f.dtype, device=f.device)
            ring_rows[:, :, :, self._ptr] = f[:, :, :, 0]
            ordered = torch.zeros_like(ring_rows)
            ordered[:, :, :, self.k - 1] = f[:, :, :, 0]
        self._ring5[rows] = ring_rows
        obs = final.clone()
        obs.view_as(self._ring5)[rows] = ordered
        return obs

    def _reset_rows_masked(self, mask: torch.Tensor, frame: torch.Tensor,
                           final: torch.Tensor) -> torch.Tensor:
        """Branch-free path (no host sync): same as ``_reset_rows_indexed`` for
        the rows where ``mask`` ``[N]`` is True."""
        m5 = mask.view(-1, 1, 1, 1, 1)
        ring5, f = self._ring5, frame.unsqueeze(3)
        final5 = final.view_as(ring5)
        if self.pad == "repeat":
            torch.where(m5, f, ring5, out=ring5)
            obs5 = torch.where(m5, f, final5)
        else:
            ring5.masked_fill_(m5, 0)
            # newest slot: rows not reset already hold exactly this frame (obs == final_obs there)
            ring5[:, :, :, self._ptr] = frame
            obs5 = final5.masked_fill(m5, 0)
            obs5[:, :, :, self.k - 1] = frame
        return obs5.view_as(final)

    # -- contract ---------------------------------------------------------------
    def reset(self, seed: Optional[int] = None) -> torch.Tensor:
        obs = self.env.reset(seed=seed)
        self._ptr = self.k - 1
        self._fill_all(obs.to(self._ring.dtype))
        return self._stacked()

    def step(self, actions: torch.Tensor) -> Step:
        out = self.env.step(actions)
        dtype = self._ring.dtype
        self._ptr = (self._ptr + 1) % self.k
        self._ring5[:, :, :, self._ptr] = out.final_obs.to(dtype)
        final = self._stacked()

        invalid = None if out.valid is None else ~out.valid
        if self.late_reset:
            reset = invalid
        else:
            reset = out.terminated | out.truncated
            if invalid is not None:
                reset = reset | invalid
        obs = final
        if reset is not None:
            if self._sync_free:
                rows = reset.nonzero().view(-1)
                if rows.numel():
                    obs = self._reset_rows_indexed(rows, out.obs.to(dtype), final)
                    if invalid is not None:
                        bad = invalid.nonzero().view(-1)
                        final[bad] = obs[bad]
            else:
                obs = self._reset_rows_masked(reset, out.obs.to(dtype), final)
                if invalid is not None:
                    final = torch.where(invalid.view(-1, 1, 1, 1), obs, final)
        return Step(obs=obs, reward=out.reward, terminated=out.terminated, truncated=out.truncated,
                    final_obs=final, valid=out.valid, extras=out.extras)

    # -- optional ---------------------------------------------------------------
    def randomize_episode_progress(self) -> None:
        """The wrapped source's episode clocks (start-state decorrelation); a
        no-op where it has none. The stacks are untouched: clocks are not frames."""
        fn = getattr(self.env, "randomize_episode_progress", None)
        if fn is not None:
            fn()

    def get_state(self) -> Optional[Dict[str, Any]]:
        inner = self.env.get_state()
        if inner is None:
            return None
        return {"env": inner, "ring": self._ring.detach().cpu().clone(), "ptr": self._ptr}

    def set_state(self, state: Dict[str, Any]) -> None:
        self.env.set_state(state["env"])
        self._ring.copy_(state["ring"].to(self.device))
        self._ptr = int(state["ptr"])

    def close(self) -> None:
        self.env.close()

    def __getattr__(self, name: str) -> Any:
        # forward source-specific attributes (e.g. ``game``, ``autoreset_mode``) to the inner
        # env; never its manual-reset hooks, which would bypass the stack
        if name.startswith("_") or name in _NOT_FORWARDED:
            raise AttributeError(name)
        return getattr(self.env, name)
