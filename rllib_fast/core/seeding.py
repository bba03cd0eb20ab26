"""Every seed derived from a trial's ``seed``, from one function.

A trial has one seed; the streams it needs beyond its own (each simulator
worker's source, each HTS executor's sampling stream, each data-parallel or
asynchronous learner, the evaluation envs, each env of a batched source)
are children of ``numpy.random.SeedSequence(seed)`` addressed by a spawn key
(:func:`derive_seed`). SeedSequence hashes seed and key together, so the
children are statistically independent of each other and of the parent,
unlike ``seed + k`` offsets, which make trial ``s``'s learner 1 share its
streams with trial ``s + k``'s learner 0.

Stream keys (the first element of the spawn key) name who draws: small
integers are simulator worker indices (``derive_seed(seed, w)``); the others
are the four-letter tags below.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

EXECUTOR = 0x4854      # 'HT': an HTS executor's sampling stream (second key: executor e)
LEARNER = 0x4C52       # 'LR': data-parallel learner r >= 1 (learner 0 is the trial itself)
ASYNC_LEARNER = 0x4153  # 'AS': asynchronous (APPO/A3C) learner r
EVALUATION = 0x4556    # 'EV': the evaluation envs (second key: the evaluation round)
PQL_LEARNER = 0x504C   # 'PL': PQL's learner actors on the Ray backend (second key: 0 = V, 1 = P)
MEMBER = 0x4D42        # 'MB': a population member's on-device stream (second key: member k)
PBT_HOST = 0x5048      # 'PH': a population's host-side PBT draws (selection, explore)
HTS_SHUFFLE = 0x4853   # 'HS': an HTS learner's minibatch shuffling


def derive_seed(seed: int, *keys: int) -> int:
    """The first 32-bit word of the child of ``SeedSequence(seed)`` at spawn
    key ``keys``: a seed independent of ``seed``'s other children."""
    return int(np.random.SeedSequence(int(seed), spawn_key=tuple(int(k) for k in keys)).generate_state(1)[0])


def worker_seed(seed: Optional[int], worker: int) -> Optional[int]:
    """Seed of simulator worker ``worker``'s source (None stays None: an
    unseeded run stays unseeded)."""
    return None if seed is None else derive_seed(seed, worker)


def env_seeds(seed: int, n: int) -> np.ndarray:
    """``n`` per-env seeds (uint32 words) of a batched source whose games each
    take their own seed (MinAtar, Atari): independent streams, one per env."""
    return np.random.SeedSequence(int(seed)).generate_state(n)
