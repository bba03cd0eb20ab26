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
from tests._resume_worker import VARIANTS, build_tiny, counters, params

K = 2
ROOT = Path(__file__).resolve().parents[1]


def _exact(name):
    return getattr(ALGORITHMS[VARIANTS.get(name, (name,))[0]], "RESUME_EXACT", True)


CASES = [*ALGORITHMS, *VARIANTS]


_DONE = {}


def _resumed(group, tmp_path_factory):
    """For every algorithm of ``group`` (exact / concurrent): the uninterrupted
    run (in this process) and the restored run (in one fresh subprocess).
    Cached per group for the module."""
    if group in _DONE:
        return _DONE[group]
    import ray

    names = [n for n in CASES if _exact(n) == (group == "exact")]
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
            rec["lr_at_save"] = algo.optimizers()[0].param_groups[0]["lr"] if algo.optimizers() else None
            rec["config_lr"] = algo.config.lr
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


# concurrent back-ends start Ray actors or learner processes: marked slow, kept in CI
PARAMS = [n if _exact(n) else pytest.param(n, marks=pytest.mark.slow) for n in CASES]


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


def test_adaptive_kl_run_adapted_its_lr_before_the_checkpoint(tmp_path_factory):
    """The adaptive-KL case only tests something if the lr in effect at the
    checkpoint is not the configured one (a restore that reset it to
    ``config.lr`` changes the next iteration's parameters and ``curr_lr``)."""
    rec = _resumed("exact", tmp_path_factory)["FastPPO[adaptive_lr_kl]"]
    assert "error" not in rec, rec.get("error")
    assert rec["lr_at_save"] != rec["config_lr"]


def _lr(algo):
    return algo.optimizers()[0].param_groups[0]["lr"]


def test_lr_in_effect_is_kept_unless_the_configured_lr_changes():
    """One owner of the lr: a restore or a PBT ``reset_config`` keeps the lr
    the algorithm adapted, unless the configured lr itself changed."""
    algo, _ = build_tiny("FastPPO[adaptive_lr_kl]")
    try:
        algo.train()
        adapted = _lr(algo)
        assert adapted != algo.config.lr
        state = algo.get_state()
        # a reused actor (reset_config) starts the trial fresh, at the configured lr; the
        # restore that follows for a trial with a checkpoint (PBT's exploit) brings back
        # the lr in effect when the configured lr is the one the state was trained under
        algo.reset_config({**algo.config.to_dict(), "clip_param": 0.25})
        assert _lr(algo) == algo.config.lr
        algo.set_state(state)
        assert _lr(algo) == adapted
        # restoring the state into the same config: the saved lr in effect
        algo.set_lr(1.0)
        algo.set_state(state)
        assert _lr(algo) == adapted
        # a mutated lr (PBT) is applied, by reset_config and by a restore of a state trained under another lr
        algo.reset_config({**algo.config.to_dict(), "lr": 2e-3})
        assert _lr(algo) == 2e-3
        algo.set_lr(adapted)
        algo.set_state(state)
        assert _lr(algo) == 2e-3
    finally:
        algo.stop()


def test_configured_lr_applies_the_batch_rules():
    """FastA2C's sqrt rule and FastDQN's batch rule come from the algorithm's one
    lr method, which builds the optimizer."""
    from rllib_fast.algorithms.dqn.rules import dqn_lr
    from tests._resume_worker import tiny_config

    cfg = tiny_config("FastA2C", "CartPole").training(lr_rule="sqrt")  # batch 8 * 4 = 32 < base 80
    algo = cfg.build_algo()
    try:
        assert algo.configured_lr() == pytest.approx(cfg.lr * math.sqrt(32 / 80))
        assert _lr(algo) == algo.configured_lr()
    finally:
        algo.stop()
    cfg = tiny_config("FastDQN", "CartPole").training(batch_rule="dqn", batch_size=512, buffer_size=1024)
    algo = cfg.build_algo()
    try:
        assert _lr(algo) == algo.configured_lr() == pytest.approx(dqn_lr(512))
        result = algo.train()
        assert result["learners"]["default_policy"]["curr_lr"] == pytest.approx(dqn_lr(512))
    finally:
        algo.stop()
