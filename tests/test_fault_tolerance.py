"""Fault tolerance of sweeps (issue 9, item 3).

* a trial process killed by pid mid-run (SIGKILL) is restarted by Tune
  (``max_failures`` in the sweep file -> ``FailureConfig``) from its last
  checkpoint and finishes with no lost iterations or env steps: the lifetime
  counters continue from the checkpoint instead of restarting;
* an interrupted sweep (SIGINT to the driver) resumes with ``rllib-fast sweep
  FILE --resume`` (``Tuner.restore``): the finished trial is untouched, the
  unfinished one continues from its checkpoint;
* a NaN loss stops the trial with a message naming the metric, before anything
  is checkpointed (the last good checkpoint stays intact); with
  ``nonfinite_guard='skip'`` the bad update is discarded instead.
"""
import json
import os
import signal
import threading
import time

import pytest
import ray
import torch
from ray import tune

from rllib_fast.algorithms.ppo import FastPPOConfig
from rllib_fast.cli import build_parser, main
from rllib_fast.tune import sweep as sw
from rllib_fast.tune.plan import load_sweeps
from rllib_fast.core.guard import NonFiniteUpdateError

SMALL = dict(num_envs=8, rollout_length=16, num_minibatches=2, decorrelate_steps=0)
PER_ITER = 8 * 16


def _results(trial_dir):
    return [json.loads(ln) for ln in (trial_dir / "result.json").read_text().splitlines() if ln.strip()]


# -- a killed trial ----------------------------------------------------------------------------------
KILL_SWEEP = """\
killed:
    run: FastPPO
    env: CartPole
    stop: {training_iteration: 5}
    config: {num_envs: 8, rollout_length: 16, num_minibatches: 2, decorrelate_steps: 0, seed: 0}
    max_failures: 2
    checkpoint_config: {checkpoint_frequency: 1, checkpoint_at_end: true}
"""


class KillOnce(tune.Callback):
    """Kills the trial's process (by the pid it reports) after its 3rd result."""

    def __init__(self):
        self.killed = []

    def on_trial_result(self, iteration, trials, trial, result, **info):
        if result["training_iteration"] == 3 and not self.killed:
            self.killed.append(result["pid"])
            os.kill(result["pid"], signal.SIGKILL)


def test_killed_trial_restarts_from_checkpoint_and_counters_continue(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    f = tmp_path / "killed.yaml"
    f.write_text(KILL_SWEEP)
    args = build_parser().parse_args(["sweep", str(f), "--storage-path", str(tmp_path / "runs")])
    (sweep,) = load_sweeps(str(f), args)
    assert sweep.max_failures == 2
    killer = KillOnce()
    sw.init_ray(num_cpus=2)
    try:
        results = sw.build_tuner(sweep, [killer], verbose=0).fit()
        trial = results._experiment_analysis.trials[0]
    finally:
        ray.shutdown()
    assert killer.killed, "the trial was never killed"
    assert not results.errors, results.errors
    assert trial.run_metadata.num_failures == 1
    final = results[0].metrics
    assert final["training_iteration"] == 5
    assert final["num_env_steps_sampled_lifetime"] == 5 * PER_ITER  # nothing lost, nothing counted twice
    lines = _results(tmp_path / "runs" / "killed" / os.path.basename(trial.path))
    pids = {r["pid"] for r in lines}
    assert killer.killed[0] in pids and len(pids) == 2  # a new process took over
    for r in lines:  # every reported iteration, before and after the restart, has the lifetime count of
        assert r["num_env_steps_sampled_lifetime"] == r["training_iteration"] * PER_ITER  # an unbroken run


# -- an interrupted sweep --------------------------------------------------------------------------
RESUME_SWEEP = """\
interrupted:
    run: FastPPO
    env: CartPole
    stop: {training_iteration: 10}
    config:
        num_envs: 8
        rollout_length: 16
        num_minibatches: 2
        decorrelate_steps: 0
        min_time_s_per_iteration: 0.3     # every trial lasts >= 3 s on any machine: room for the interrupt
        seed: 0
        lr: {grid_search: [0.001, 0.0003]}
    max_concurrent_trials: 1
    checkpoint_config: {checkpoint_frequency: 1, checkpoint_at_end: true, num_to_keep: 2}
"""


def _interrupt_when_second_trial_runs(exp_dir, stop_event):
    """SIGINT this process (the sweep driver) once the second trial has reported."""
    while not stop_event.is_set():
        dirs = [d for d in exp_dir.glob("FastPPO_*") if (d / "result.json").is_file()]
        started = [d for d in dirs if (d / "result.json").stat().st_size > 0]
        if len(started) == 2:
            os.kill(os.getpid(), signal.SIGINT)
            return
        time.sleep(0.05)


def test_interrupted_sweep_resumes_finished_trial_untouched(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    f = tmp_path / "interrupted.yaml"
    f.write_text(RESUME_SWEEP)
    exp = tmp_path / "runs" / "interrupted"
    common = ["--storage-path", str(tmp_path / "runs"), "--no-mlflow", "-q", "--ray-num-cpus", "2"]
    stop = threading.Event()
    watcher = threading.Thread(target=_interrupt_when_second_trial_runs, args=(exp, stop), daemon=True)
    watcher.start()
    try:
        main(["sweep", str(f), *common])
    finally:
        stop.set()
    capsys.readouterr()
    trials = sorted(d for d in exp.glob("FastPPO_*") if (d / "result.json").is_file())
    assert len(trials) == 2
    done = [d for d in trials if _results(d)[-1]["training_iteration"] == 10]
    unfinished = [d for d in trials if d not in done]
    assert len(done) == 1 and len(unfinished) == 1, "the interrupt did not land while the 2nd trial ran"
    finished_before = (done[0] / "result.json").read_bytes()
    ckpts_before = sorted(p.name for p in done[0].glob("checkpoint_*"))
    at_interrupt = _results(unfinished[0])[-1]["training_iteration"]
    assert at_interrupt < 10

    rc = main(["sweep", str(f), "--resume", *common])
    out = capsys.readouterr().out
    assert rc == 0 and "trials: 2 (2 ok, 0 errored)" in out, out[-3000:]
    assert (done[0] / "result.json").read_bytes() == finished_before  # finished trial untouched
    assert sorted(p.name for p in done[0].glob("checkpoint_*")) == ckpts_before
    lines = _results(unfinished[0])
    assert lines[-1]["training_iteration"] == 10
    # resumed from its checkpoint: the lifetime counter continues (a restart from zero would make
    # the count at the first iteration after the resume smaller than before it)
    steps = {r["training_iteration"]: r["num_env_steps_sampled_lifetime"] for r in lines}
    assert sorted(steps) == list(range(1, 11))
    assert all(steps[i + 1] > steps[i] for i in range(1, 10)), steps
    assert steps[10] >= 10 * PER_ITER


# -- NaN / exploding updates -----------------------------------------------------------------------------
def _nan_hook(algo):
    """Make the policy network output NaN (so the loss and then the update are NaN)."""
    first = next(m for m in algo.module.modules() if isinstance(m, torch.nn.Linear))
    return first.register_forward_hook(lambda mod, inp, out: out * float("nan"))


def _params(algo):
    return {k: v.detach().clone() for k, v in algo.module.state_dict().items()}


def test_nan_loss_stops_with_metric_named_and_checkpoint_intact(tmp_path):
    algo = FastPPOConfig().environment("CartPole").training(**SMALL).debugging(seed=0).build_algo()
    algo.train()
    ckpt = tmp_path / "ckpt"
    algo.save_to_path(str(ckpt))
    good = _params(algo)
    stamp = {p: p.stat().st_mtime_ns for p in ckpt.rglob("*") if p.is_file()}
    handle = _nan_hook(algo)
    with pytest.raises(NonFiniteUpdateError) as err:
        algo.train()
    handle.remove()
    msg = str(err.value)
    assert msg.startswith("FastPPO: learner metric `learners/default_policy/") and "is not finite" in msg
    assert "training iteration 2" in msg and "nonfinite_guard='skip'" in msg
    algo.stop()
    assert {p: p.stat().st_mtime_ns for p in ckpt.rglob("*") if p.is_file()} == stamp
    from ray.rllib.algorithms.algorithm import Algorithm

    restored = Algorithm.from_checkpoint(str(ckpt))
    assert all(torch.equal(v, good[k]) for k, v in _params(restored).items())
    assert restored.train()["training_iteration"] == 2  # the good checkpoint trains on
    restored.stop()


def test_nan_update_skipped_when_configured():
    algo = FastPPOConfig().environment("CartPole").training(nonfinite_guard="skip", **SMALL).debugging(
        seed=0).build_algo()
    algo.train()
    before = _params(algo)
    handle = _nan_hook(algo)
    result = algo.train()
    handle.remove()
    assert result["guard"]["skipped_updates"] == 1
    assert all(torch.equal(v, before[k]) for k, v in _params(algo).items())  # the bad update was discarded
    assert result["num_env_steps_sampled_lifetime"] == 2 * PER_ITER  # the sampled steps still count
    result = algo.train()
    assert result["guard"]["skipped_updates"] == 1
    after = _params(algo)
    assert all(torch.isfinite(v).all() for v in after.values())
    assert any(not torch.equal(v, before[k]) for k, v in after.items())
    algo.stop()


def test_exploding_value_and_config_errors():
    from rllib_fast.core.guard import bad_metric

    assert bad_metric({"default_policy": {"vf_loss": 3e11, "vf_explained_var": float("nan")}}, 1e10) == (
        "default_policy/vf_loss", 3e11)
    assert bad_metric({"default_policy": {"vf_explained_var": float("nan"), "num_updates_lifetime": 1e12}},
                      1e10) is None
    assert bad_metric({"p": {"q_mean": float("inf")}}, None) == ("p/q_mean", float("inf"))
    with pytest.raises(ValueError, match="nonfinite_guard.*allowed: one of 'stop', 'skip', 'off'"):
        FastPPOConfig().environment("CartPole").training(nonfinite_guard="ignore").validate()
