"""MLflowRecorder (rllib_fast.tune.mlflow) and the plotting helper (rllib_fast.tune.plots)."""
import os
import types

import pytest

from rllib_fast.algorithms.ppo import FastPPOConfig
from rllib_fast.tune.mlflow import (MLflowRecorder, algorithm_hyperparameters, default_tracking_uri,
                                    sanitize_key, select_metrics, ui_command)
from rllib_fast.tune.plots import CurveCollector, curve_point, env_step, plot_curves

RETURN = "env_runners/episode_return_mean"


pytestmark = pytest.mark.usefixtures("isolated_run")


@pytest.fixture
def ray_2cpu():
    import ray

    from rllib_fast.cli import ensure_registered

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    ensure_registered()  # rllib_fast.register() + re-registration after an earlier ray.shutdown()
    yield
    ray.shutdown()


def _small_config(**training):
    return (FastPPOConfig().environment("CartPole", num_envs=8)
            .training(rollout_length=16, decorrelate_steps=0, num_minibatches=2, **training))


class _CountingClient:
    """Wraps MlflowClient and counts requests (to prove batching)."""

    def __init__(self, client):
        self._client = client
        self.calls = []

    def __getattr__(self, name):
        attr = getattr(self._client, name)
        if callable(attr):
            def wrapped(*a, **kw):
                self.calls.append((name, a, kw))
                return attr(*a, **kw)
            return wrapped
        return attr


# -- pure helpers --------------------------------------------------------------------------------
def test_sanitize_key():
    assert sanitize_key("env_runners/episode_return_mean") == "env_runners/episode_return_mean"
    assert sanitize_key("learners/__all_modules__/x") == "learners/__all_modules__/x"
    assert sanitize_key("a//b/") == "a/b"
    assert sanitize_key("/lead") == "lead"
    assert sanitize_key("w[0]{x}=1,y@z") == "w_0__x__1_y_z"
    assert sanitize_key("a/../b") == "a/__/b"
    assert sanitize_key("x" * 300) == "x" * 250
    # cut where a '/' or a '.' part falls at the end: still a valid name (was 'a/xxx.../')
    for key in ("a/" + "x" * 247 + "/y", "a/" + "x" * 246 + "/./y", "a/" + "x" * 245 + "/../y"):
        cut = sanitize_key(key)
        assert len(cut) <= 250 and not cut.endswith("/") and not cut.split("/")[-1] in (".", ".."), cut
    from mlflow.utils.validation import _validate_metric_name

    for k in ("a//b/", "/lead", "w[0]{x}=1", "a/../b", "./a", "a/./b", "ü:é", "a/" + "x" * 247 + "/y",
              "a/" + "x" * 246 + "/./y"):
        _validate_metric_name(sanitize_key(k))  # raises if invalid


def test_default_tracking_uri(tmp_path, monkeypatch):
    assert default_tracking_uri() == f"sqlite:///{tmp_path}/mlflow.db"
    assert default_tracking_uri("sub") == f"sqlite:///{tmp_path}/sub/mlflow.db"
    assert default_tracking_uri().startswith("sqlite:////")  # absolute path
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://mlflow.example:5000")
    assert default_tracking_uri() == "http://mlflow.example:5000"
    assert MLflowRecorder().tracking_uri == "http://mlflow.example:5000"
    assert MLflowRecorder("sqlite:////x/y.db").tracking_uri == "sqlite:////x/y.db"
    assert ui_command("sqlite:////x/y.db") == "mlflow ui --backend-store-uri sqlite:////x/y.db"


def test_select_metrics_curated_numeric_flat():
    result = {
        "training_iteration": 3, "num_env_steps_sampled_lifetime": 1024.0, "time_total_s": 1.5,
        "env_runners": {"episode_return_mean": 20.0, "episode_len_mean": float("nan"),
                        "module_episode_returns_mean": {"default_policy": 20.0}},
        "learners": {"default_policy": {"vf_loss": 0.5, "curr_lr": __import__("numpy").float64(3e-4)}},
        "config": {"lr": 0.1}, "hostname": "h", "done": False, "pid": 1234, "date": "2026",
        "weird key!": 1.0,
    }
    m = select_metrics(result)
    assert m[RETURN] == 20.0 and m["learners/default_policy/vf_loss"] == 0.5
    assert m["learners/default_policy/curr_lr"] == pytest.approx(3e-4)
    assert m["num_env_steps_sampled_lifetime"] == 1024.0 and m["training_iteration"] == 3
    assert "env_runners/episode_len_mean" not in m  # NaN dropped
    assert not any(k.startswith("config") for k in m) and "pid" not in m and "done" not in m
    assert not any("module_episode_returns" in k for k in m)
    assert env_step(result) == 1024 and curve_point(result) == (1024, 20.0)
    assert env_step({"training_iteration": 7}) == 7


def test_hyperparameters_ours_and_rllib():
    ours = algorithm_hyperparameters(__import__("rllib_fast.algorithms", fromlist=["FastPPO"]).FastPPO,
                                     {"env": "CartPole", "num_envs": 4, "__trial_info__": object()})
    assert ours == FastPPOConfig().environment("CartPole", num_envs=4).hyperparameters()
    from ray.rllib.algorithms.ppo import PPO

    theirs = algorithm_hyperparameters(PPO, {"env": "CartPole-v1", "lr": 1e-3, "num_env_runners": 0})
    assert theirs["lr"] == 1e-3 and theirs["env"] == "CartPole-v1" and "gamma" in theirs
    assert "clip_param" in theirs and "num_epochs" in theirs  # PPO's own defaults differ from AlgorithmConfig
    assert 10 < len(theirs) < 60  # not the ~300 keys of the whole config
    assert not any(k.startswith("_") for k in theirs)


def test_plot_curves_several_trials(tmp_path):
    png = plot_curves({"a": [(100, 1.0), (200, 3.0)], "b": [(100, 2.0), (300, 2.5)], "empty": []},
                      str(tmp_path / "sub" / "curves.png"), title="t")
    assert os.path.getsize(png) > 1000 and open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    assert os.path.getsize(plot_curves({}, str(tmp_path / "none.png"))) > 0
    col = CurveCollector()
    trial = types.SimpleNamespace(trial_id="t1", __str__=lambda self: "T1")
    col.on_trial_result(1, [], trial, {RETURN: 5.0, "num_env_steps_sampled_lifetime": 64})
    col.on_trial_result(2, [], trial, {RETURN: float("nan"), "num_env_steps_sampled_lifetime": 128})
    assert col.curves == {"t1": [(64, 5.0)]}
    assert os.path.isfile(col.plot(str(tmp_path / "c.png")))


class _FakeTrial:
    trainable_name = "FastPPO"

    def __init__(self, trial_id, config, checkpoint_dir=None):
        self.trial_id = trial_id
        self.config = config
        self.checkpoint = types.SimpleNamespace(path=checkpoint_dir) if checkpoint_dir else None
        self.storage = types.SimpleNamespace(experiment_dir_name="fake-exp")

    def get_trainable_cls(self):
        from rllib_fast.algorithms import FastPPO

        return FastPPO

    def __str__(self):
        return f"FastPPO_{self.trial_id}"


def test_recorder_without_tune_failed_status_and_batching(tmp_path):
    """Driving the hooks directly: status FAILED, one params request, one metrics request per result."""
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path}/m.db"
    rec = MLflowRecorder(uri)
    rec._client = counting = _CountingClient(MlflowClient(uri))
    rec.setup()
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "state.txt").write_text("x")
    ok, bad = _FakeTrial("ok1", {"env": "CartPole", "lr": 1e-3}, str(ckpt)), _FakeTrial("bad1", {"env": "CartPole"})
    for t in (ok, bad):
        rec.log_trial_start(t)
        for i in (1, 2, 3):
            rec.log_trial_result(i, t, {"training_iteration": i, "num_env_steps_sampled_lifetime": 100 * i,
                                        "env_runners": {"episode_return_mean": float(i), "weird[x]": 1.0}})
    rec.log_trial_end(ok, failed=False)
    rec.log_trial_end(bad, failed=True)
    names = [c[0] for c in counting.calls]
    assert "log_param" not in names and "log_metric" not in names
    param_batches = [c for c in counting.calls if c[0] == "log_batch" and c[2].get("params")]
    metric_batches = [c for c in counting.calls if c[0] == "log_batch" and c[2].get("metrics")]
    assert len(param_batches) == 2 and len(metric_batches) == 6
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("fake-exp")
    assert exp.artifact_location == f"file://{tmp_path}/mlartifacts"
    runs = {r.info.run_name: r for r in client.search_runs([exp.experiment_id])}
    assert runs["FastPPO_ok1"].info.status == "FINISHED" and runs["FastPPO_bad1"].info.status == "FAILED"
    assert runs["FastPPO_ok1"].data.params["lr"] == "0.001"
    hist = client.get_metric_history(runs["FastPPO_ok1"].info.run_id, RETURN)
    assert [(m.step, m.value) for m in hist] == [(100, 1.0), (200, 2.0), (300, 3.0)]
    assert "env_runners/weird_x_" in runs["FastPPO_ok1"].data.metrics
    arts = {a.path for a in client.list_artifacts(runs["FastPPO_ok1"].info.run_id, "checkpoint")}
    assert arts == {"checkpoint/state.txt"}
    plots = {a.path for a in client.list_artifacts(runs["FastPPO_bad1"].info.run_id, "plots")}
    assert plots == {"plots/learning_curve.png"}


def test_a_refused_metrics_batch_is_a_warning_not_the_end_of_the_experiment(tmp_path, caplog):
    # a run deleted under the recorder (or any store error) makes log_batch raise: the
    # trial's other hooks and the experiment go on
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path}/m.db"
    rec = MLflowRecorder(uri)
    rec.setup()
    t = _FakeTrial("gone1", {"env": "CartPole", "lr": 1e-3})
    rec.log_trial_start(t)
    rec.log_trial_result(1, t, {"training_iteration": 1, "num_env_steps_sampled_lifetime": 100,
                                "env_runners": {"episode_return_mean": 1.0}})
    client = MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("fake-exp").experiment_id])
    client.delete_run(run.info.run_id)
    with caplog.at_level("WARNING", logger="rllib_fast.tune.mlflow"):
        rec.log_trial_result(2, t, {"training_iteration": 2, "num_env_steps_sampled_lifetime": 200,
                                    "env_runners": {"episode_return_mean": 2.0}})
    assert any("not recorded" in r.getMessage() for r in caplog.records)


def test_redone_iterations_logged_once_after_recover_and_resume(tmp_path):
    """A trial restarted from its checkpoint redoes iterations: after on_trial_recover (same
    driver) and for a run found again by a new driver (sweep --resume), each step is logged
    once; the parent run found again is closed; the curve collector keeps one point per
    iteration."""
    from mlflow.tracking import MlflowClient

    def result(i):
        return {"training_iteration": i, "num_env_steps_sampled_lifetime": 100 * i,
                "env_runners": {"episode_return_mean": float(i)}}

    uri = f"sqlite:///{tmp_path}/m.db"
    rec, curves = MLflowRecorder(uri, parent_run_name="sweep"), CurveCollector()
    t = _FakeTrial("t1", {"env": "CartPole", "lr": 1e-3})
    rec.log_trial_start(t)
    for i in (1, 2, 3):
        rec.log_trial_result(i, t, result(i))
        curves.on_trial_result(i, [t], t, result(i))
    rec.on_trial_recover(3, [t], t)  # restored from the checkpoint of iteration 2
    for i in (3, 4):
        rec.log_trial_result(i, t, result(i))
        curves.on_trial_result(i, [t], t, result(i))
    assert curves.curves["t1"] == [(100, 1.0), (200, 2.0), (300, 3.0), (400, 4.0)]
    # a new driver (sweep --resume) restores from iteration 2 again
    rec2 = MLflowRecorder(uri, parent_run_name="sweep")
    rec2.log_trial_start(t)
    for i in (3, 4, 5):
        rec2.log_trial_result(i, t, result(i))
    rec2.log_trial_end(t)
    rec2.on_experiment_end([t])
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("fake-exp").experiment_id])
    (child,) = [r for r in runs if "trial_id" in r.data.tags]
    (parent,) = [r for r in runs if r.data.tags.get("rllib_fast_sweep") == "sweep"]
    assert parent.info.status == "FINISHED" and child.info.status == "FINISHED"
    hist = client.get_metric_history(child.info.run_id, RETURN)
    assert sorted((m.step, m.value) for m in hist) == [(100 * i, float(i)) for i in range(1, 6)]
    assert rec2.curves["t1"] == [(100 * i, float(i)) for i in range(1, 6)]


# -- with Tune -----------------------------------------------------------------------------------
def test_tuner_one_run_per_trial(tmp_path, ray_2cpu):
    from mlflow.tracking import MlflowClient
    from ray import tune

    uri = f"sqlite:///{tmp_path}/store/mlflow.db"
    os.makedirs(tmp_path / "store")
    rec = MLflowRecorder(uri, experiment_name="tuner-exp")
    tuner = tune.Tuner(
        "FastPPO",
        param_space=_small_config(lr=tune.grid_search([1e-3, 3e-4])),
        run_config=tune.RunConfig(name="tuner", storage_path=str(tmp_path / "runs"),
                                  stop={"training_iteration": 3}, callbacks=[rec], verbose=0,
                                  checkpoint_config=tune.CheckpointConfig(checkpoint_at_end=True)),
    )
    results = tuner.fit()
    assert not results.errors
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("tuner-exp")
    runs = client.search_runs([exp.experiment_id])
    assert len(runs) == 2 == len(results)
    expected = set(_small_config().hyperparameters())
    assert sorted(float(r.data.params["lr"]) for r in runs) == [3e-4, 1e-3]
    for run in runs:
        assert run.info.status == "FINISHED"
        params = run.data.params
        assert set(params) == expected  # the algorithm's own hyperparameters only
        assert {"clip_param", "num_envs", "rollout_length", "env"} <= set(params)
        assert params["num_envs"] == "8" and params["env"] == "CartPole"
        assert len(params) < 60 and "num_env_runners" not in params and "evaluation_interval" not in params
        hist = client.get_metric_history(run.info.run_id, RETURN)
        steps = [m.step for m in hist]
        assert len(steps) >= 2 and steps == sorted(set(steps)) and steps[-1] > 3  # env steps, not iterations
        iters = client.get_metric_history(run.info.run_id, "num_env_steps_sampled_lifetime")
        assert [m.step for m in iters] == [int(m.value) for m in iters]
        assert "learners/default_policy/policy_loss" in run.data.metrics
        arts = {a.path for a in client.list_artifacts(run.info.run_id)}
        assert {"checkpoint", "plots"} <= arts
        ckpt = {a.path for a in client.list_artifacts(run.info.run_id, "checkpoint")}
        assert "checkpoint/rllib_checkpoint.json" in ckpt
        assert {a.path for a in client.list_artifacts(run.info.run_id, "plots")} == {"plots/learning_curve.png"}
        local = client.download_artifacts(run.info.run_id, "plots/learning_curve.png", str(tmp_path / run.info.run_id))
        assert open(local, "rb").read(4) == b"\x89PNG"
    assert (tmp_path / "store" / "mlartifacts").is_dir()


def test_tune_run_respects_MLFLOW_TRACKING_URI(tmp_path, monkeypatch, ray_2cpu):
    from mlflow.tracking import MlflowClient
    from ray import tune

    uri = f"sqlite:///{tmp_path}/from_env.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    rec = MLflowRecorder(experiment_name="env-exp")
    assert rec.tracking_uri == uri
    analysis = tune.run("FastPPO", config=_small_config().to_dict(), stop={"training_iteration": 1},
                        storage_path=str(tmp_path / "runs"), name="legacy", callbacks=[rec], verbose=0)
    assert analysis.trials[0].status == "TERMINATED"
    client = MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("env-exp").experiment_id])
    assert run.info.status == "FINISHED" and "clip_param" in run.data.params
    assert not (tmp_path / "mlflow.db").exists()  # the cwd default was not used
