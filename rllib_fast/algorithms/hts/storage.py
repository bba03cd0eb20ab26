"""HTS-RL's two rollout storages and the rule that keeps policy lag at one.

Executors write one storage while the learner reads the other; the roles
switch **only when executors have filled the write storage and the learner has
exhausted the read storage** (paper §4, "the system does not switch the role
of a data storage until executors fill up and learners exhaust the data
storage"). Every filled storage carries the parameter version of the policy
that produced it (the behaviour version), which the learner checks against its
own version. This module is only the state machine; the tensors are two
:class:`~rllib_fast.core.rollout.RolloutStorage` objects.
"""
from __future__ import annotations

from typing import Any, Dict, Optional

import torch

from ...core.rollout import RolloutStorage


class SwapError(RuntimeError):
    """A role switch was attempted before both sides were done."""


def clone_storage(st: RolloutStorage) -> RolloutStorage:
    """A second storage with the same fields (zeros)."""
    fields = {k: (tuple(v.shape[2:]), v.dtype) for k, v in st.data.items()}
    return RolloutStorage(st.horizon, st.num_envs, fields, st.device)


class DoubleStorage:
    """Two storages with roles ``write`` (executors) and ``read`` (learner).

    States: ``filled`` (executors finished the write storage this round),
    ``exhausted`` (the learner consumed the read storage, or it holds no data).
    ``swap()`` requires both, then exchanges the roles; the new read storage
    holds fresh data (not exhausted) and the new write storage is empty (not
    filled). ``versions[i]`` is the behaviour version of storage ``i``'s data.
    """

    def __init__(self, a: RolloutStorage, b: RolloutStorage):
        self.storages = [a, b]
        self.write_idx = 0
        self.filled = False
        self.exhausted = True       # nothing to consume before the first swap
        self.versions: list = [None, None]

    @property
    def write(self) -> RolloutStorage:
        return self.storages[self.write_idx]

    @property
    def read(self) -> RolloutStorage:
        return self.storages[1 - self.write_idx]

    @property
    def read_version(self) -> Optional[int]:
        return self.versions[1 - self.write_idx]

    @property
    def has_pending(self) -> bool:
        """The read storage holds data the learner has not consumed yet."""
        return not self.exhausted

    def begin_fill(self, version: int) -> RolloutStorage:
        if self.filled:
            raise SwapError("DoubleStorage: the write storage is already filled; swap first")
        self.versions[self.write_idx] = int(version)
        return self.write

    def mark_filled(self) -> None:
        self.filled = True

    def mark_exhausted(self) -> None:
        self.exhausted = True

    def discard(self) -> None:
        """Drop the pending batch and whatever was written (an interrupted round):
        nothing to consume, the write storage free."""
        self.filled = False
        self.exhausted = True

    def swap(self) -> None:
        if not (self.filled and self.exhausted):
            raise SwapError(f"DoubleStorage: swap needs filled and exhausted, got filled={self.filled}, "
                            f"exhausted={self.exhausted}")
        self.write_idx = 1 - self.write_idx
        self.filled = False
        self.exhausted = False

    # -- checkpointing: only the pending read storage holds live data ------------------
    def state_dict(self) -> Dict[str, Any]:
        pending = None
        if self.has_pending:
            pending = {k: v.detach().cpu().clone() for k, v in self.read.data.items()}
        return {"write_idx": self.write_idx, "filled": self.filled, "exhausted": self.exhausted,
                "versions": list(self.versions), "pending": pending}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.write_idx = int(state["write_idx"])
        self.filled, self.exhausted = bool(state["filled"]), bool(state["exhausted"])
        self.versions = list(state["versions"])
        if state.get("pending") is not None:
            for k, v in state["pending"].items():
                self.read.data[k].copy_(torch.as_tensor(v))
