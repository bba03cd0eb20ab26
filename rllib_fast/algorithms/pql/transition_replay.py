"""A flat ring of ready-made transitions, allocated once, sampled uniformly.

:class:`~rllib_fast.core.replay.SegmentedReplay` stores raw steps and builds
n-step windows at sample time, which needs the episode structure. PQL's
learners receive transitions that are already aggregated (by
:class:`~rllib_fast.algorithms.pql.nstep.NStepAggregator` on the Actor), possibly in
another thread or process, so they need a plainer store: named fields, each a
``[capacity, ...]`` tensor on the learner's device, written ``N`` rows at a
time at a host-side write pointer (no sync), sampled uniformly over the filled
part. Rows flagged invalid are kept but get weight 0 when sampled (masking
instead of compaction keeps the write a fixed-size copy).

The byte count is known before allocating (:func:`replay_bytes`), so a
config can reject a replay that does not fit with the number in the message.
"""
from __future__ import annotations

from typing import Dict, Mapping, Optional, Tuple

import numpy as np
import torch

FieldSpec = Mapping[str, Tuple[tuple, torch.dtype]]


def replay_bytes(capacity: int, fields: FieldSpec) -> int:
    """Bytes that ``TransitionReplay(capacity, ..., fields)`` allocates."""
    per_row = sum(int(np.prod(shape, dtype=np.int64)) * torch.empty((), dtype=dt).element_size()
                  for shape, dt in fields.values())
    return int(capacity) * per_row


class TransitionReplay:
    def __init__(self, capacity: int, rows_per_add: int, fields: FieldSpec, device: torch.device):
        if capacity < rows_per_add:
            raise ValueError(f"capacity {capacity} is smaller than one write of {rows_per_add} rows")
        self.rows_per_add = int(rows_per_add)
        # a whole number of writes, so a write never wraps around the end
        self.capacity = (int(capacity) // self.rows_per_add) * self.rows_per_add
        self.device = torch.device(device)
        self.fields = dict(fields)
        self.data: Dict[str, torch.Tensor] = {
            k: torch.zeros((self.capacity, *shape), dtype=dt, device=self.device) for k, (shape, dt) in fields.items()}
        self.ptr = 0     # next write row (host int)
        self.size = 0    # filled rows (host int)

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.data.values())

    def __len__(self) -> int:
        return self.size

    def clear(self) -> None:
        """Hold nothing, as when built (a restore from a checkpoint saved without replay)."""
        self.ptr = self.size = 0

    def add(self, batch: Mapping[str, torch.Tensor]) -> None:
        """Write one batch of ``rows_per_add`` rows (every field present)."""
        lo, hi = self.ptr, self.ptr + self.rows_per_add
        for k, t in self.data.items():
            t[lo:hi].copy_(batch[k], non_blocking=True)
        self.ptr = hi % self.capacity
        self.size = min(self.size + self.rows_per_add, self.capacity)

    def sample_indices(self, batch_size: int, generator: Optional[torch.Generator] = None) -> torch.Tensor:
        return torch.randint(0, max(1, self.size), (batch_size,), device=self.device, generator=generator)

    def sample(self, batch_size: int, generator: Optional[torch.Generator] = None,
               keys: Optional[tuple] = None) -> Dict[str, torch.Tensor]:
        idx = self.sample_indices(batch_size, generator)
        return {k: self.data[k][idx] for k in (keys or self.data)}

    def state_dict(self) -> Dict[str, object]:
        return {"ptr": self.ptr, "size": self.size,
                "data": {k: v[:self.size].detach().cpu().clone() for k, v in self.data.items()}}

    def load_state_dict(self, state: Mapping[str, object]) -> None:
        size = int(state["size"])
        if size > self.capacity:
            raise ValueError(f"replay checkpoint holds {size} rows; this replay has capacity {self.capacity}")
        self.ptr, self.size = int(state["ptr"]) % self.capacity, size
        for k, v in state["data"].items():
            self.data[k][:size].copy_(v)
