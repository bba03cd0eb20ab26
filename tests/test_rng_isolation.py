"""An algorithm's run does not depend on anything else in the process (issue 28, item 1).

Every algorithm draws from its own random stream (``rllib_fast/core/rng.py``),
so (a) two algorithms built with the same seed and trained interleaved, with
other code drawing from torch's, numpy's and Python's global generators between
their iterations, end bit-identical to one run alone, and leave the caller's
generators untouched; (b) a restore inside the same, live process
(``Algorithm.from_checkpoint``, ``restore_from_path`` into a freshly built or
into the very algorithm that trained on) followed by one iteration equals the
uninterrupted run bit for bit, for every algorithm whose class says
``RESUME_EXACT``, with default settings (start-state decorrelation on) and
with the adaptive-KL lr. ``tests/test_resume.py`` checks the same in a new
process.
"""
import random

import numpy as np
import pytest
import torch

from rllib_fast.algorithms import ALGORITHMS
from tests._resume_worker import VARIANTS, build_tiny, counters, params

K = 2
EXACT = [n for n in [*ALGORITHMS, *VARIANTS] if getattr(ALGORITHMS[VARIANTS.get(n, (n,))[0]], "RESUME_EXACT", True)]


def _build(name, seed=0):
    """A tiny config of ``name`` with the start-state decorrelation at its default (on)."""
    return build_tiny(name, seed, default_decorrelation=True)[0]


def _same(p, q):
    assert p.keys() == q.keys()
    bad = [k for k in p if not torch.equal(p[k], q[k])]
    assert not bad, f"parameters differ: {bad[:5]}"


def _noise():
    """Other code of the process drawing random numbers."""
    torch.rand(97)
    torch.randn(13, 3)
    np.random.rand(5)
    random.random()


def test_train_leaves_the_callers_generators_alone():
    algo = _build("FastPPO")
    torch.manual_seed(123)
    np.random.seed(123)
    random.seed(123)
    before = (torch.get_rng_state(), np.random.get_state()[1].copy(), random.getstate())
    algo.train()
    algo.evaluate()
    assert torch.equal(before[0], torch.get_rng_state())
    assert np.array_equal(before[1], np.random.get_state()[1])
    assert before[2] == random.getstate()
    algo.stop()


@pytest.mark.parametrize("name", EXACT)
def test_interleaved_runs_equal_a_run_alone(name):
    alone = _build(name)
    for _ in range(K + 1):
        ref = counters(alone.train())
    ref_params = params(alone)
    alone.stop()

    _noise()
    a = _build(name)
    _noise()
    b = _build(name)
    for _ in range(K + 1):
        _noise()
        ra = counters(a.train())
        _noise()
        rb = counters(b.train())
    _same(ref_params, params(a))
    _same(ref_params, params(b))
    assert ra == ref and rb == ref
    a.stop()
    b.stop()


@pytest.mark.parametrize("name", EXACT)
def test_in_process_restore_continues_exactly(name, tmp_path):
    algo = _build(name)
    for _ in range(K):
        algo.train()
    path = str(tmp_path / "ckpt")
    algo.save_to_path(path)
    ref = counters(algo.train())
    ref_params = params(algo)

    # 1. Algorithm.from_checkpoint in the same process, other draws in between
    _noise()
    restored = type(algo).from_checkpoint(path)
    _noise()
    assert counters(restored.train()) == ref
    _same(ref_params, params(restored))
    restored.stop()

    # 2. restore_from_path into a freshly built (live) algorithm
    fresh = _build(name, seed=7)   # another seed: the checkpoint's goes on
    fresh.restore_from_path(path)
    _noise()
    assert counters(fresh.train()) == ref
    _same(ref_params, params(fresh))
    fresh.stop()

    # 3. restore_from_path into the algorithm that trained on (a rollback)
    algo.train()
    algo.restore_from_path(path)
    _noise()
    assert counters(algo.train()) == ref
    _same(ref_params, params(algo))
    algo.stop()
