"""Counter-based random streams, one per population member.

Exploration noise, target-policy noise and minibatch
sampling must come from *independent streams per member*; drawing one noise
tensor and broadcasting it silently correlates the population. A Python loop
over K ``torch.Generator`` objects would cost K kernel launches per draw, so
instead every draw is a pure function of ``(member key, call counter, element
index)``: a 32-bit integer hash (two rounds of an avalanche mixer) evaluated
for all members at once. Consequences we rely on:

* member m's stream does not depend on K or on the other members, so a
  population member and a single agent with the same key see the same noise
  (the PopTD3-equals-K-sequential-TD3 test uses that);
* the state is ``keys[K]`` plus one call counter (a device scalar): checkpointing is exact, and
  an exploited member keeps its own key (its future noise stays its own);
* no host sync, works under ``torch.compile`` and on any device.

The hash is SplitMix64's finaliser on int64 tensors (multiplications wrap
modulo 2**64, as two's-complement int64 arithmetic does on CPU and CUDA;
right shifts are made logical by masking). One hash gives 64 bits, enough for
the two uniforms of a Box-Muller normal, so a normal draw costs ~15 element-wise
kernels for all members together.
"""
from __future__ import annotations

import math
from typing import Dict, Sequence

import torch

from ...core.seeding import MEMBER, derive_seed


def _s64(c: int) -> int:
    """An unsigned 64-bit constant as the int64 with the same bits."""
    return c - (1 << 64) if c >= (1 << 63) else c


_GOLDEN = _s64(0x9E3779B97F4A7C15)
_C1 = _s64(0xBF58476D1CE4E5B9)
_C2 = _s64(0x94D049BB133111EB)
_M32 = 0xFFFFFFFF


def _shr(x: torch.Tensor, s: int) -> torch.Tensor:
    """Logical right shift of int64 bits."""
    return (x >> s) & ((1 << (64 - s)) - 1)


def _mix64(z: torch.Tensor) -> torch.Tensor:
    """SplitMix64 finaliser (a bijection on 64-bit values with full avalanche)."""
    z = (z ^ _shr(z, 30)) * _C1
    z = (z ^ _shr(z, 27)) * _C2
    return z ^ _shr(z, 31)


class MemberRNG:
    """Independent uniform/normal/integer streams for K members.

    ``keys``: ``[K]`` int64 member keys (derive them from the run seed and the
    member index). Every draw advances the shared call counter by one; the
    counter value and the member key select a fresh, non-overlapping block.
    """

    def __init__(self, keys: torch.Tensor):
        self.keys = keys.to(torch.int64).clone()
        # a device tensor, bumped in place: a Python int would be a guard that
        # makes torch.compile re-trace the update on every call
        self.counter = torch.zeros((), dtype=torch.int64, device=keys.device)

    @classmethod
    def from_seed(cls, seed: int, num_members: int, device) -> "MemberRNG":
        """Member k's key from the trial's seed (``core.seeding``: tag MEMBER, key k), spread to 64 bits."""
        words = [derive_seed(seed, MEMBER, k) for k in range(num_members)]
        return cls(_mix64(torch.tensor(words, dtype=torch.int64, device=device) + _GOLDEN))

    @property
    def num_members(self) -> int:
        return self.keys.shape[0]

    def _bits(self, shape: Sequence[int], members=None) -> torch.Tensor:
        """``[K, *shape]`` uniform 64-bit patterns (int64)."""
        keys = self.keys if members is None else self.keys[members]
        n = math.prod(shape)
        k = _mix64(keys + self.counter * _C1)                        # this call's member keys
        self.counter.add_(1)
        idx = torch.arange(1, n + 1, dtype=torch.int64, device=keys.device) * _GOLDEN
        return _mix64(k.unsqueeze(1) + idx.unsqueeze(0)).reshape(keys.shape[0], *shape)

    @staticmethod
    def _unit(bits: torch.Tensor, shift: int) -> torch.Tensor:
        """24 bits starting at ``shift`` -> floats in (0, 1)."""
        return (((bits >> shift) & 0xFFFFFF).float() + 0.5) * (1.0 / 16777216.0)

    def uniform(self, *shape: int, members=None) -> torch.Tensor:
        """Floats in (0, 1), ``[K, *shape]`` (24-bit resolution)."""
        return self._unit(self._bits(shape, members), 40)

    def normal(self, *shape: int, members=None) -> torch.Tensor:
        """Standard normals by Box-Muller over two 24-bit uniforms of one hash."""
        bits = self._bits(shape, members)
        u1, u2 = self._unit(bits, 40), self._unit(bits, 8)
        return torch.sqrt(-2.0 * torch.log(u1)) * torch.cos(2.0 * math.pi * u2)

    def randint(self, high, *shape: int, members=None) -> torch.Tensor:
        """Integers in ``[0, high)`` (``high`` < 2**31, an int or a ``[K]``/scalar
        tensor); bias <= high / 2**32, negligible for replay sizes."""
        bits = _shr(self._bits(shape, members), 32)                     # 32 uniform bits
        if isinstance(high, torch.Tensor):
            high = high.to(torch.int64)
            high = high.reshape(()) if high.numel() == 1 else high.view(-1, *([1] * len(shape)))
        return (bits * high) >> 32

    # -- checkpointing ---------------------------------------------------------------------
    def state_dict(self) -> Dict[str, object]:
        return {"keys": self.keys.cpu().clone(), "counter": self.counter.cpu().clone()}

    def load_state_dict(self, state: Dict[str, object]) -> None:
        self.keys.copy_(state["keys"])
        self.counter.copy_(torch.as_tensor(state["counter"]))
