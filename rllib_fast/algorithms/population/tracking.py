"""Per-member episode returns on the device: PBT fitness and population metrics.

Fitness (Flajolet et al. §5.1) is the mean of each member's *last 10* episode
returns, so each member keeps a ring of its last ``window`` returns. Members
own contiguous slices of the env (member m: envs ``m*n .. m*n+n-1``); several
of a member's envs may finish in the same step, so finished episodes are
scattered to consecutive ring slots with a cumulative sum over the member's
envs (no host sync, no Python loop over envs or members).
"""
from __future__ import annotations

from typing import Dict, Optional

import torch


class MemberReturns:
    def __init__(self, num_members: int, envs_per_member: int, device, window: int = 10):
        K, n = num_members, envs_per_member
        self.K, self.n, self.window = K, n, window
        self.ret = torch.zeros(K, n, dtype=torch.float64, device=device)
        self.len = torch.zeros(K, n, dtype=torch.int64, device=device)
        self.ring = torch.zeros(K, window + 1, dtype=torch.float64, device=device)  # slot `window`: sink
        self.ring_len = torch.zeros(K, window + 1, dtype=torch.float64, device=device)
        self.ptr = torch.zeros(K, dtype=torch.int64, device=device)
        self.filled = torch.zeros(K, dtype=torch.int64, device=device)
        self.episodes = torch.zeros(K, dtype=torch.int64, device=device)
        # per env: the running episode is not recorded when it ends (a PBT exploit replaced
        # the member's policy partway through it)
        self.discard = torch.zeros(K, n, dtype=torch.bool, device=device)

    def in_flight(self) -> dict:
        """The per-env accumulators of the episodes running now (copies), as
        ``EpisodeTracker.in_flight``."""
        return {"ret": self.ret.clone(), "len": self.len.clone(), "discard": self.discard.clone()}

    def set_in_flight(self, state: dict) -> None:
        self.ret.copy_(state["ret"])
        self.len.copy_(state["len"])
        if "discard" in state:
            self.discard.copy_(state["discard"])

    def update(self, reward: torch.Tensor, done: torch.Tensor, valid: Optional[torch.Tensor] = None) -> None:
        """Account one step of all ``K*n`` envs."""
        r = reward.double().view(self.K, self.n)
        d = done.view(self.K, self.n)
        if valid is not None:
            v = valid.view(self.K, self.n)
            r = torch.where(v, r, torch.zeros_like(r))
            d = d & v
            self.len += v.long()
        else:
            self.len += 1
        self.ret += r
        keep = d & ~self.discard          # finished episodes that go into the ring
        kl = keep.long()
        slot = torch.remainder(self.ptr.unsqueeze(1) + torch.cumsum(kl, 1) - 1, self.window)
        slot = torch.where(keep, slot, torch.full_like(slot, self.window))
        self.ring.scatter_(1, slot, self.ret)
        self.ring_len.scatter_(1, slot, self.len.double())
        n_kept = kl.sum(1)
        self.ptr = torch.remainder(self.ptr + n_kept, self.window)
        self.filled = torch.clamp(self.filled + n_kept, max=self.window)
        self.episodes += d.long().sum(1)
        self.discard &= ~d
        self.ret = torch.where(d, torch.zeros_like(self.ret), self.ret)
        self.len = torch.where(d, torch.zeros_like(self.len), self.len)

    def fitness(self) -> torch.Tensor:
        """``[K]`` mean of the last ``window`` returns (NaN for members without an episode)."""
        mask = torch.arange(self.window, device=self.ring.device).unsqueeze(0) < self.filled.unsqueeze(1)
        vals = torch.where(mask, self.ring[:, :-1], torch.full_like(self.ring[:, :-1], float("nan")))
        return vals.nanmean(1)

    def mean_length(self) -> torch.Tensor:
        mask = torch.arange(self.window, device=self.ring.device).unsqueeze(0) < self.filled.unsqueeze(1)
        vals = torch.where(mask, self.ring_len[:, :-1], torch.full_like(self.ring_len[:, :-1], float("nan")))
        return vals.nanmean(1)

    @torch.no_grad()
    def reset_members(self, idx: torch.Tensor, discard_in_flight: bool = False) -> None:
        """Forget the returns of members ``idx`` (their policy changed: a PBT exploit,
        CEM-RL generations). ``discard_in_flight``: their episodes running now are not
        recorded when they end either (begun under the replaced policy)."""
        self.filled[idx] = 0
        self.ptr[idx] = 0
        if discard_in_flight:
            self.discard[idx] = True

    _KEYS = ("ret", "len", "ring", "ring_len", "ptr", "filled", "episodes", "discard")

    def state_dict(self) -> Dict[str, torch.Tensor]:
        return {k: getattr(self, k).detach().cpu().clone() for k in self._KEYS}

    def load_state_dict(self, state: Dict[str, torch.Tensor]) -> None:
        for k in self._KEYS:
            if k in state:   # checkpoints before `discard` existed: nothing discarded
                getattr(self, k).copy_(state[k])
