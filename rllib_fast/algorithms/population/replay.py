"""Replay topology for populations: per-member buffers or one shared buffer.

PBT needs one buffer *per member* (no data mixing), while
CEM-RL and DvD share one buffer. Both are one :class:`SegmentedReplay` over
the ``K*n`` envs of the population env (its ``[C, K*n]`` layout already keeps
every env's history in its own column, and member m's envs are columns
``m*n .. m*n+n-1``); the topology is only a matter of which columns a
member's minibatch may come from. Indices are drawn from the member's own
random stream, so members' minibatches are independent.
"""
from __future__ import annotations

from typing import Dict

import torch

from ...core.replay import SegmentedReplay
from .rng import MemberRNG


class MemberReplay:
    def __init__(self, capacity_per_member: int, num_members: int, envs_per_member: int, obs_shape: tuple,
                 obs_dtype: torch.dtype, action_shape: tuple, action_dtype: torch.dtype, device,
                 shared: bool = False):
        self.K, self.n, self.shared = num_members, envs_per_member, shared
        self.buf = SegmentedReplay(capacity_per_member * num_members, num_members * envs_per_member, obs_shape,
                                   obs_dtype, action_shape, action_dtype, device)
        self.device = device
        # write count and fill level as device scalars too: read inside the (possibly
        # compiled) update, host ints that change every iteration would force re-traces
        self.t_dev = torch.zeros((), dtype=torch.int64, device=device)
        self.stored_dev = torch.zeros((), dtype=torch.int64, device=device)
        self.col0 = torch.arange(num_members, device=device, dtype=torch.int64).unsqueeze(1) * envs_per_member

    @property
    def t(self) -> int:
        return self.buf.t

    def __len__(self) -> int:
        return len(self.buf)

    def cut_episodes(self) -> None:
        self.buf.cut_episodes()

    def clear(self) -> None:
        self.buf.clear()
        self.t_dev.zero_()
        self.stored_dev.zero_()

    def add(self, obs, action, reward, terminated, done, next_obs, valid=None) -> None:
        self.buf.add(obs, action, reward, terminated, done, next_obs, valid)
        self.t_dev.add_(1)
        self.stored_dev.fill_(self.buf.steps_stored)

    def sample(self, batch_size: int, rng: MemberRNG) -> Dict[str, torch.Tensor]:
        """``[K, B, ...]`` one-step transitions; ``not_done`` = 1 - terminated
        (time-outs bootstrap), ``weight`` = 0 for invalid transitions."""
        b = self.buf
        S = self.stored_dev
        pos = (self.t_dev - S) + rng.randint(S, batch_size)
        if self.shared:
            col = rng.randint(self.K * self.n, batch_size)
        else:
            col = self.col0 + rng.randint(self.n, batch_size)
        slot = pos % b.C
        d = b.data
        return {
            "obs": d["obs"][slot, col],
            "action": d["action"][slot, col],
            "reward": d["reward"][slot, col],
            "next_obs": d["next_obs"][slot, col],
            "not_done": (~d["terminated"][slot, col]).float(),
            "weight": d["valid"][slot, col].float(),
        }

    def sample_obs(self, batch_size: int, rng: MemberRNG) -> torch.Tensor:
        """``[B, ...]`` observations from the whole buffer from member 0's stream
        (DvD's shared embedding batch)."""
        b = self.buf
        S = self.stored_dev
        pos = ((self.t_dev - S) + rng.randint(S, batch_size, members=slice(0, 1))[0]) % b.C
        col = rng.randint(self.K * self.n, batch_size, members=slice(0, 1))[0]
        return b.data["obs"][pos, col]

    def state_dict(self):
        return self.buf.state_dict()

    def load_state_dict(self, state) -> None:
        self.buf.load_state_dict(state)
        self.t_dev.fill_(self.buf.t)
        self.stored_dev.fill_(self.buf.steps_stored)
