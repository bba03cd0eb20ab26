"""Exact resume, for every registered algorithm (issue 9, item 4).

train k iterations -> checkpoint -> restore in a NEW process -> one more
iteration must equal k+1 iterations without interruption: bit-identical
parameters and identical counters/returns on CPU. Algorithms whose class says
``RESUME_EXACT = False`` (concurrent back-ends, where thread/actor timing
decides the interleaving) are held to what is well defined for them: the
restored parameters equal the saved ones bit for bit, and the lifetime
counters continue from the checkpoint (iteration k+1, more env steps than at
the checkpoint), not from zero.

Parametrized over ``rllib_fast.algorithms.ALGORITHMS``, so algorithms added
later are covered automatically. Replay is checkpointed wherever the algorithm
has ``checkpoint_replay``. One subprocess restores every algorithm's
checkpoint (a new process per algorithm would cost seconds each).
"""
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rllib_fast.algorithms import ALGORITHMS
from tests._resume_worker import build_tiny, counters, params

K = 2
ROOT = Path(__file__).resolve().parents[1]


def _exact(name):
    return getattr(ALGORITHMS[name], "RESUME_EXACT", True)


_DONE = {}


def _resumed(group, tmp_path_factory):
    """For every algorithm of ``group`` (exact / concurrent): the uninterrupted
    run (in this process) and the restored run (in one fresh subprocess).
    Cached per group for the module."""
    if group in _DONE:
        return _DONE[group]
    import ray

    names = [n for n in ALGORITHMS if _exact(n) == (group == "exact")]
    base = tmp_path_factory.mktemp(f"resume-{group}")
    runs, jobs = {}, []
    if group != "exact":  # concurrent back-ends may run their components as Ray actors: one local Ray
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    for name in names:
        d = base / name
        d.mkdir()
        rec = {"dir": d}
        runs[name] = rec
        try:
            algo, env = build_tiny(name)
            for _ in range(K):
                last = algo.train()
            algo.save_to_path(str(d / "ckpt"))
            rec["saved_params"] = params(algo)
            rec["saved_counters"] = counters(last)
            result = algo.train()
            rec["counters"] = counters(result)
            rec["params"] = params(algo)
            rec["env"] = env
            algo.stop()
        except Exception as err:
            import traceback

            rec["error"] = f"{type(err).__name__}: {err}\n{traceback.format_exc()[-3000:]}"
            continue
        jobs.append({"checkpoint": str(d / "ckpt"), "restored_params": str(d / "restored.pt"),
                     "after_params": str(d / "after.pt"), "out": str(d / "out.json")})
    if ray.is_initialized():
        ray.shutdown()
    job_file = base / "jobs.json"
    job_file.write_text(json.dumps(jobs))
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-m", "tests._resume_worker", str(job_file)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    _DONE[group] = runs
    return runs


def _same(a, b):
    if a is None or b is None:
        return a is b
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


# concurrent back-ends start Ray actors (tens of seconds on 2 busy cores): marked slow, kept in CI
PARAMS = [n if _exact(n) else pytest.param(n, marks=pytest.mark.slow) for n in ALGORITHMS]


@pytest.mark.parametrize("name", PARAMS)
def test_resume_in_new_process_equals_uninterrupted(tmp_path_factory, name):
    rec = _resumed("exact" if _exact(name) else "concurrent", tmp_path_factory)[name]
    assert "error" not in rec, f"{name} did not train/save with a tiny config:\n{rec['error']}"
    out = json.loads((rec["dir"] / "out.json").read_text())
    assert "error" not in out, f"{name} failed to restore/train in a new process:\n{out['error']}"
    restored = torch.load(rec["dir"] / "restored.pt")
    after = torch.load(rec["dir"] / "after.pt")
    saved = rec["saved_params"]
    assert saved, f"{name}: no module parameters found in stateful_components()"
    # the checkpoint holds exactly what was saved, in every case
    assert restored.keys() == saved.keys()
    for k in saved:
        assert torch.equal(restored[k], saved[k]), f"{name}: restored {k} differs from the saved one"
    got, want = out["counters"], rec["counters"]
    assert got["training_iteration"] == K + 1
    if _exact(name):
        for k in want:
            assert _same(got[k], want[k]), f"{name}: {k} after resume {got[k]!r} != uninterrupted {want[k]!r}"
        assert after.keys() == rec["params"].keys()
        for k in after:
            assert torch.equal(after[k], rec["params"][k]), f"{name}: {k} differs after resume + 1 iteration"
    else:  # concurrent back-end: lifetime counters continue, not restart
        at_save = rec["saved_counters"]["env_steps"]
        assert got["env_steps"] is not None and at_save
        assert got["env_steps"] > at_save, f"{name}: env-step counter restarted: {got['env_steps']} <= {at_save}"
