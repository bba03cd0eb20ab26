"""`rllib-fast sweep --resume` after the driver was killed: the MLflow record and the
summary are what an uninterrupted sweep leaves. (A file of its own: two CLI sweeps in
fresh processes, so --dist loadfile can run it beside the rest of tests/test_sweep.py.)"""
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.usefixtures("isolated_run")


KILL_RESUME = """\
kill-resume:
    run: FastPPO
    env: CartPole
    num_samples: 2
    stop: {training_iteration: 6}
    config: {num_envs: 8, rollout_length: 16, num_minibatches: 2, decorrelate_steps: 0,
             lr: {loguniform: [1.0e-4, 1.0e-3]}, seed: {randint: [0, 1000]}}
    resources: {cpu: 1}
    callbacks: tests._sweep_kill:KillDriverOnce
    checkpoint_config: {checkpoint_frequency: 2, checkpoint_at_end: true, num_to_keep: 4}
"""


def test_killed_sweep_resumes_with_the_same_mlflow_record(tmp_path):
    """Driver SIGKILLed in iteration 4, then `sweep --resume`: the MLflow experiment is what
    an uninterrupted sweep leaves -- one FINISHED parent, one FINISHED child per trial,
    training_iteration 1..6 once each (the redone iterations are not logged twice) -- and
    the summary names the experiment and plots every trial's full curve."""
    import subprocess
    import sys

    from mlflow.tracking import MlflowClient

    from rllib_fast.tune.plots import RETURN_KEY, curve_point, read_trial_results, results_curve

    f = tmp_path / "kr.yaml"
    f.write_text(KILL_RESUME)
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI")}
    env.update(RLLIB_FAST_TEST_KILL_DIR=str(tmp_path), RLLIB_FAST_TEST_SWEEP_DIR=str(tmp_path / "runs" / "kill-resume"),
               PYTHONPATH=str(REPO), TUNE_GLOBAL_CHECKPOINT_S="0")
    cmd = [sys.executable, "-m", "rllib_fast.cli", "sweep", str(f), "--ray-num-cpus", "2", "-q",
           "--storage-path", str(tmp_path / "runs")]
    first = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    (tmp_path / "driver.pid").write_text(str(first.pid))
    out = first.communicate(timeout=600)[0]
    assert first.returncode == -9 and (tmp_path / "killed").exists(), out[-3000:]
    second = subprocess.run(cmd + ["--resume"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    out = second.stdout
    assert second.returncode == 0, (out + second.stderr)[-3000:]
    assert "trials: 2 (2 ok, 0 errored)" in out and "mlflow: experiment 'kill-resume'" in out, out[-2000:]

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.get_experiment_by_name("kill-resume")
    runs = client.search_runs([exp.experiment_id])
    parents = [r for r in runs if r.data.tags.get("rllib_fast_sweep") == "kill-resume"]
    children = [r for r in runs if "trial_id" in r.data.tags]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED", [(r.info.run_name, r.info.status) for r in runs]
    assert len(children) == 2 and len(runs) == 3
    assert len({r.data.tags["trial_id"] for r in children}) == 2
    for run in children:
        assert run.info.status == "FINISHED"
        assert run.data.tags["mlflow.parentRunId"] == parents[0].info.run_id
        it_steps = [m.step for m in client.get_metric_history(run.info.run_id, "training_iteration")]
        assert len(it_steps) == len(set(it_steps)) == 6, sorted(it_steps)
        # the return exists once an episode has ended: a trial (random seed) whose 8 envs all
        # outlive iteration 1's 16 steps has none there; never twice
        ret_steps = [m.step for m in client.get_metric_history(run.info.run_id, "env_runners/episode_return_mean")]
        assert len(ret_steps) == len(set(ret_steps)), sorted(ret_steps)
        assert set(sorted(it_steps)[1:]) <= set(ret_steps) <= set(it_steps), (sorted(ret_steps), sorted(it_steps))
        assert sorted(m.value for m in client.get_metric_history(run.info.run_id, "training_iteration")) == \
            [1, 2, 3, 4, 5, 6]
    trial_dirs = [d for d in (tmp_path / "runs" / "kill-resume").iterdir() if d.is_dir()]
    assert len(trial_dirs) == 2
    for d in trial_dirs:  # what the summary's learning_curves.png is drawn from
        results = read_trial_results(str(d))
        # every iteration once; iteration 1 only when an episode had ended in it (see above)
        with_return = {int(r["training_iteration"]) for r in results if curve_point(r, RETURN_KEY) is not None}
        assert set(range(2, 7)) <= with_return <= set(range(1, 7)), sorted(with_return)
        assert len(results_curve(results)) == len(with_return)
