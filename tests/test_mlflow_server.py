"""Recording to a real MLflow tracking server (issue 9, item 5).

The test starts ``mlflow server`` on 127.0.0.1 (an SQLite backend and served
artifacts in tmp), runs a two-trial sweep with ``MLFLOW_TRACKING_URI`` pointing
at it over HTTP, and checks what a user would look at in the UI: one parent run
named after the sweep, one child run per trial named after the trial and
nested under the parent (``mlflow.parentRunId``), the trial's metrics with the
env-step axis, and the trial's checkpoint uploaded as an artifact through the
server.
"""
import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from rllib_fast.cli import main

SWEEP = """\
recorded:
    run: FastPPO
    env: CartPole
    num_samples: 2
    stop: {training_iteration: 2}
    config: {num_envs: 8, rollout_length: 16, num_minibatches: 2, decorrelate_steps: 0, seed: {randint: [0, 100]}}
    resources: {cpu: 1}
    checkpoint_config: {checkpoint_at_end: true}
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    """One server for the module (it takes a while to start)."""
    tmp_path = tmp_path_factory.mktemp("mlflow-server")
    port = _free_port()
    log = open(tmp_path / "server.log", "w")
    exe = os.path.join(os.path.dirname(sys.executable), "mlflow")
    cmd = [exe if os.path.exists(exe) else "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
           "--backend-store-uri", f"sqlite:///{tmp_path}/server.db",
           "--artifacts-destination", f"file://{tmp_path}/served-artifacts", "--workers", "1"]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 180
    while True:
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        if proc.poll() is not None or time.time() > deadline:
            proc.kill()
            log.close()
            pytest.fail("mlflow server did not start:\n" + (tmp_path / "server.log").read_text()[-3000:])
        time.sleep(0.5)
    yield url, port, tmp_path
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


def test_sweep_records_nested_runs_and_checkpoints_to_a_real_server(tmp_path, monkeypatch, capsys, mlflow_server):
    url, port, server_dir = mlflow_server
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", url)
    f = tmp_path / "recorded.yaml"
    f.write_text(SWEEP)
    rc = main(["sweep", str(f), "--ray-num-cpus", "2", "-q", "--storage-path", str(tmp_path / "runs")])
    out = capsys.readouterr().out
    assert rc == 0 and "trials: 2 (2 ok, 0 errored)" in out, out[-3000:]
    assert not (tmp_path / "mlflow.db").exists()  # nothing went to a local store

    from mlflow.tracking import MlflowClient

    client = MlflowClient(url)
    exp = client.get_experiment_by_name("recorded")
    runs = client.search_runs([exp.experiment_id])
    parents = [r for r in runs if r.info.run_name == "recorded"]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    children = [r for r in runs if r is not parents[0] and r.info.run_name != "recorded"]
    trial_dirs = sorted(d.name for d in (tmp_path / "runs" / "recorded").iterdir() if d.is_dir())
    assert len(children) == 2 and len(trial_dirs) == 2
    for run in children:
        assert run.data.tags["mlflow.parentRunId"] == parents[0].info.run_id
        trial_id = run.data.tags["trial_id"]
        assert run.info.run_name.startswith("FastPPO_") and run.info.run_name.endswith(trial_id)
        assert f"FastPPO_{trial_id}" in trial_dirs  # named after the trial
        assert run.info.status == "FINISHED"
        assert run.data.params["num_envs"] == "8"
        hist = client.get_metric_history(run.info.run_id, "num_env_steps_sampled_lifetime")
        assert [m.step for m in hist] == [128, 256]
        arts = [a.path for a in client.list_artifacts(run.info.run_id, "checkpoint")]
        assert "checkpoint/rllib_checkpoint.json" in arts
        assert run.info.artifact_uri.startswith("mlflow-artifacts:")  # uploaded through the server
    served = list((server_dir / "served-artifacts").rglob("rllib_checkpoint.json"))
    assert len(served) == 2


def test_server_started_by_tests_binds_loopback_only(mlflow_server):
    """What the project starts listens on 127.0.0.1, not on the machine's other addresses."""
    _, port, _ = mlflow_server
    addrs = set()
    try:
        import psutil

        addrs = {a.address for nic in psutil.net_if_addrs().values() for a in nic if a.family == socket.AF_INET}
    except ImportError:
        pass
    try:
        addrs |= {ai[4][0] for ai in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)}
    except OSError:
        pass
    outside = [a for a in addrs if not a.startswith("127.")]
    if not outside:
        pytest.skip("this machine has no non-loopback IPv4 address")
    with pytest.raises(OSError):
        socket.create_connection((outside[0], port), timeout=2).close()


def test_resumed_sweep_continues_its_runs(tmp_path):
    """A new recorder (a restarted driver: `sweep --resume`) finds the sweep's parent run and each
    trial's run again instead of creating duplicates (no server needed for this part)."""
    from mlflow.tracking import MlflowClient

    from rllib_fast.tune.mlflow import MLflowRecorder
    from tests.test_mlflow import _FakeTrial

    uri = f"sqlite:///{tmp_path}/m.db"
    trial = _FakeTrial("abc12_00000", {"env": "CartPole"})
    first = MLflowRecorder(uri, parent_run_name="my-sweep", save_plot=False)
    first.log_trial_start(trial)
    first.log_trial_result(1, trial, {"training_iteration": 1, "num_env_steps_sampled_lifetime": 100})
    again = MLflowRecorder(uri, parent_run_name="my-sweep", save_plot=False)
    again.log_trial_start(trial)
    again.log_trial_result(2, trial, {"training_iteration": 2, "num_env_steps_sampled_lifetime": 200})
    again.log_trial_end(trial)
    again.on_experiment_end([trial])
    assert again.run_ids == first.run_ids
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("fake-exp").experiment_id])
    assert sorted(r.info.run_name for r in runs) == ["FastPPO_abc12_00000", "my-sweep"]
    hist = client.get_metric_history(first.run_ids[trial.trial_id], "training_iteration")
    assert [m.step for m in hist] == [100, 200]
