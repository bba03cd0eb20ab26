"""The restored `rllib` / `rllib-fast` command line (rllib_fast.cli).

Each test runs in its own tmp dir; the CLI starts (and stops) Ray itself with
the default local cluster; trials are tiny (8 envs x 16 steps, 1-2 iterations).
"""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rllib_fast.cli import main, plan_from_file, build_parser

REPO = Path(__file__).resolve().parents[1]
TUNE_CONFIGS = REPO / "tune_configs"
SMALL = {"num_envs": 8, "rollout_length": 16, "decorrelate_steps": 0, "num_minibatches": 2}
PPO_SMALL = {"num_env_runners": 0, "train_batch_size_per_learner": 128, "minibatch_size": 64, "num_epochs": 1}
RAY_ARGS = ["--ray-num-cpus", "2"]


pytestmark = pytest.mark.usefixtures("isolated_run")


def _lines(text, prefix):
    return [ln for ln in text.splitlines() if ln.startswith(prefix)]


def _summary(out):
    """Parse the end-of-run summary lines printed by `train`."""
    best = _lines(out, "best trial: ")
    ret = _lines(out, "final return: ")
    ckpt = _lines(out, "checkpoint: ")
    png = _lines(out, "learning curve: ")
    assert best and ret and ckpt and png, out[-3000:]
    return {"final_return": float(ret[-1].split()[2]), "checkpoint": ckpt[-1].split(": ", 1)[1],
            "png": png[-1].split(": ", 1)[1]}


def _write_yaml(path, text):
    path.write_text(text)
    return str(path)


# -- user errors: one line on stderr, exit 2, no Ray started -----------------------------------
def test_unknown_algorithm_one_line_exit_2(capsys):
    assert main(["train", "--algo", "FastPP0", "--env", "CartPole"]) == 2
    err = capsys.readouterr().err.strip()
    assert "unknown algorithm 'FastPP0'. Did you mean 'FastPPO'? Allowed: FastPPO" in err
    assert "PPO" in err.split("Allowed:")[1] and "SAC" in err
    assert len(err.splitlines()) == 1 and "Traceback" not in err


def test_bad_json_exit_2(capsys):
    assert main(["train", "--algo", "FastPPO", "--env", "CartPole", "--config", '{"lr": 0.1']) == 2
    err = capsys.readouterr().err.strip()
    assert "invalid JSON for --config" in err and len(err.splitlines()) == 1
    assert main(["train", "--algo", "FastPPO", "--env", "CartPole", "--stop", "[1, 2]"]) == 2
    assert "--stop must be a JSON object" in capsys.readouterr().err


def test_config_validation_error_exit_2(capsys):
    rc = main(["train", "--algo", "FastPPO", "--env", "CartPole", "--config", '{"clip_param": 2.0}'])
    assert rc == 2
    err = capsys.readouterr().err.strip()
    assert "clip_param" in err and "(0.0, 1.0]" in err
    assert "Traceback" not in err and len(err.splitlines()) == 1
    # also for values inside a grid_search of an experiment file, and for RLlib built-ins
    path = _write_yaml(Path("bad.yaml"), "bad:\n  run: FastPPO\n  env: CartPole\n"
                                         "  config:\n    num_envs: {grid_search: [4, 0]}\n")
    assert main(["train", "file", path]) == 2
    assert "num_envs" in capsys.readouterr().err
    assert main(["train", "--algo", "PPO", "--env", "CartPole-v1", "--config", '{"lr": "fast"}']) == 2
    assert "lr" in capsys.readouterr().err


def _one_line_no_ray(capsys, *needles):
    import ray

    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    for n in needles:
        assert n in err, err
    assert not ray.is_initialized()  # rejected while planning, before Ray started
    return err


def test_misspelled_stop_key_rejected_before_ray(capsys):
    assert main(["train", "--algo", "FastPPO", "--env", "CartPole", "--stop", '{"training_iteratoin": 2}']) == 2
    _one_line_no_ray(capsys, "unknown stop key 'training_iteratoin'", "Did you mean 'training_iteration'?",
                     "Allowed: training_iteration", "env_runners/episode_return_mean")
    # nested form and file form too; RLlib built-ins still accept their own result groups
    path = _write_yaml(Path("stop.yaml"), "s:\n  run: FastPPO\n  env: CartPole\n"
                                          "  stop: {env_runners: {episode_reward_mean: 100}}\n")
    assert main(["train", "file", path]) == 2
    _one_line_no_ray(capsys, "'env_runners/episode_reward_mean'")
    from rllib_fast.tune.stop_keys import stop_key_error

    assert stop_key_error({"env_runners/episode_return_mean": 1, "training_iteration": 2}, True) is None
    assert stop_key_error({"learners/default_policy/total_loss": 0.1}, False) is None
    assert stop_key_error({"episode_reward_mean": 1}, False) is not None  # the old API stack's name


def test_unknown_top_level_key_rejected_before_ray(capsys):
    path = _write_yaml(Path("typo.yaml"), "s:\n  run: FastPPO\n  env: CartPole\n  stopp: {training_iteration: 1}\n")
    assert main(["train", "file", path]) == 2
    _one_line_no_ray(capsys, "unknown key 'stopp'", "Did you mean 'stop'?")


def test_cuda_env_device_without_cuda_fails_at_validation(capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert main(["train", "--algo", "FastPPO", "--env", "CartPole", "--config", '{"env_device": "cuda"}']) == 2
    from rllib_fast.core.devices import unavailable_reason

    # the reason build_algo() gives (core/devices.py), with the devices this machine has
    _one_line_no_ray(capsys, "env_device='cuda'", unavailable_reason("cuda"), "available here: 'auto', 'cpu'")
    assert main(["train", "--algo", "FastPPO", "--env", "CartPole",
                 "--config", '{"env_device": {"grid_search": ["cpu", "cuda:0"]}}']) == 2
    _one_line_no_ray(capsys, "env_device='cuda:0'")
    assert main(["train", "--algo", "FastPPO", "--env", "CartPole", "--config", '{"num_gpus_per_learner": 0.5}']) == 2
    _one_line_no_ray(capsys, "num_gpus_per_learner=0.5")
    from rllib_fast.tune.session import device_error

    assert device_error({"env_device": "cuda"}, local=False) is None  # a cluster may have GPU nodes


def test_local_ray_listens_on_loopback_only(tmp_path):
    """The console command re-executes itself with Ray's loopback switch; every socket
    the driver, GCS, raylet and workers listen on is 127.0.0.1 (none on 0.0.0.0/::/eth)."""
    import time

    import psutil

    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")}
    cmd = [sys.executable, "-m", "rllib_fast.cli", "train", "--algo", "FastPPO", "--env", "CartPole",
           "--config", json.dumps(SMALL), "--stop", '{"training_iteration": 4}', "--no-mlflow", "-q",
           "--ray-num-cpus", "1", "--checkpoint-at-end", "--storage-path", str(tmp_path / "runs")]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen = {}
    try:
        while proc.poll() is None:
            try:
                procs = [psutil.Process(proc.pid)] + psutil.Process(proc.pid).children(recursive=True)
            except psutil.Error:
                break
            for p in procs:
                try:
                    for c in p.net_connections(kind="inet"):
                        if c.status == psutil.CONN_LISTEN:
                            seen[(p.name(), c.laddr.ip, c.laddr.port)] = True
                except psutil.Error:
                    pass
            time.sleep(0.2)
        out = proc.communicate(timeout=600)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out[-3000:]
    names = {name for name, _, _ in seen}
    assert "gcs_server" in names and "raylet" in names, (seen, out[-2000:])
    exposed = [k for k in seen if k[1] not in ("127.0.0.1", "::ffff:127.0.0.1", "::1")]
    assert not exposed, exposed


def test_loopback_switch_only_for_local_ray(monkeypatch):
    from rllib_fast.tune import session

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert not session.wants_cluster(["train", "--algo", "X"])
    assert session.wants_cluster(["sweep", "f.yaml", "--address", "auto"])
    assert session.wants_cluster(["train", "--ray-address=10.0.0.1:6379"])
    assert not session.wants_cluster(["sweep", "f.yaml", "--address", "local"])
    monkeypatch.setenv("RAY_ADDRESS", "local")
    assert not session.wants_cluster([])
    monkeypatch.setenv("RAY_ADDRESS", "auto")
    assert session.wants_cluster([])


def test_list(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "FastPPO" in out
    for name in ("PPO", "SAC", "DQN", "APPO"):
        assert name in out
    for env in ("CartPole", "Pendulum", "gym:<id>"):
        assert env in out
    assert main(["list", "envs"]) == 0
    out = capsys.readouterr().out
    assert "CartPole" in out and "FastPPO" not in out


def test_parser_aliases():
    p = build_parser()
    for flag in ("--algo", "--run", "-a", "-r"):
        args = p.parse_args(["train", flag, "FastPPO", "-e", "CartPole", "-c", "{}"])
        assert args.algo == "FastPPO" and args.env == "CartPole" and args.config == "{}"
    args = p.parse_args(["train", "--algo", "X"])
    assert args.mlflow is True and args.checkpoint_at_end is None and args.storage_path is None  # ./runs unless a file says
    args = p.parse_args(["train", "-f", "x.yaml", "--no-mlflow", "--no-checkpoint-at-end", "-v"])
    assert args.file == "x.yaml" and args.mlflow is False and args.checkpoint_at_end is False
    assert args.verbose == 2


def test_shipped_experiment_files_parse():
    """Every file in tune_configs/ loads and validates (no training)."""
    p = build_parser()
    files = sorted(TUNE_CONFIGS.glob("*.yaml")) + sorted(TUNE_CONFIGS.glob("*.py"))
    names = {f.name for f in files}
    assert {"cartpole-fastppo.yaml", "pendulum-fastppo.yaml", "cartpole-fastppo-grid.yaml",
            "cartpole-ppo-rllib.yaml", "cartpole-fastppo-optuna.py"} <= names
    for f in files:
        plan = plan_from_file(str(f), p.parse_args(["train", "file", str(f)]))
        assert plan.experiments, f
        for spec in plan.experiments.values():
            assert spec["stop"], f"{f.name}: every shipped experiment has a stop criterion"
    grid = plan_from_file(str(TUNE_CONFIGS / "cartpole-fastppo-grid.yaml"), p.parse_args(["train"]))
    (spec,) = grid.experiments.values()
    assert len(spec["config"]["lr"]["grid_search"]) == 2
    optuna = plan_from_file(str(TUNE_CONFIGS / "cartpole-fastppo-optuna.py"), p.parse_args(["train"]))
    assert type(optuna.tune_kwargs["search_alg"]).__name__ == "ConcurrencyLimiter"
    assert optuna.tune_kwargs["metric"] == "env_runners/episode_return_mean"


def test_plan_options_and_multi_experiment_yaml(tmp_path):
    """Flag/file merging without training: checkpoint flags, legacy keys, overrides."""
    from rllib_fast.cli import plan_from_flags

    p = build_parser()
    args = p.parse_args(["train", "--algo", "FastPPO", "--env", "Pendulum", "--config", '{"num_envs": 4}',
                         "--checkpoint-freq", "3", "--no-checkpoint-at-end", "--num-samples", "2",
                         "--seed", "7", "--experiment-name", "my exp"])
    (name, spec), = plan_from_flags(args).experiments.items()
    assert name == "my exp" and spec["run"] == "FastPPO" and spec["num_samples"] == 2
    assert spec["config"] == {"num_envs": 4, "env": "Pendulum", "seed": 7}
    assert spec["checkpoint_config"] == {"checkpoint_frequency": 3, "checkpoint_at_end": False}
    assert spec["storage_path"] == str(tmp_path / "runs")
    path = _write_yaml(tmp_path / "two.yaml", """
a:
    run: FastPPO
    env: CartPole
    checkpoint_freq: 2          # legacy keys
    local_dir: elsewhere
    stop: {training_iteration: 3}
b:
    run: PPO
    env: CartPole-v1
    num_samples: 3
    config: {num_env_runners: 0}
""")
    plan = plan_from_file(path, p.parse_args(["train", "file", path, "--config", '{"gamma": 0.9}']))
    assert list(plan.experiments) == ["a", "b"]
    a, b = plan.experiments["a"], plan.experiments["b"]
    assert a["checkpoint_config"] == {"checkpoint_frequency": 2, "checkpoint_at_end": True}
    assert a["storage_path"] == str(tmp_path / "elsewhere") and a["stop"] == {"training_iteration": 3}
    assert a["config"] == {"env": "CartPole", "gamma": 0.9}
    assert b["num_samples"] == 3 and b["config"]["gamma"] == 0.9 and b["config"]["env"] == "CartPole-v1"


# -- training ------------------------------------------------------------------------------------
def test_train_flags_fastppo(capsys, tmp_path):
    rc = main(["train", "--algo", "FastPPO", "--env", "CartPole", "--config", json.dumps(SMALL),
               "--stop", '{"training_iteration": 2}', "--seed", "1", *RAY_ARGS])
    out = capsys.readouterr().out
    assert rc == 0, out[-3000:]
    # progress: Tune's CLIReporter status tables while it runs. Which tables a 2-iteration run prints
    # depends on timing (at most one per 10 s, plus one at the end, possibly none with the metric
    # columns), so the metric check is on the summary, which says how far the best trial got.
    assert "== Status ==" in out and "Number of trials: 1/1" in out, out[-3000:]
    assert "trained: 256 env steps, 2 iterations" in out, out[-3000:]
    s = _summary(out)
    assert s["final_return"] > 0
    assert os.path.isfile(os.path.join(s["checkpoint"], "rllib_checkpoint.json"))
    assert s["checkpoint"].startswith(str(tmp_path / "runs" / "FastPPO_CartPole"))
    assert os.path.isfile(s["png"]) and s["png"].endswith(".png")
    db = tmp_path / "mlflow.db"
    assert f"mlflow ui --backend-store-uri sqlite:///{db}" in out and db.is_file()

    # evaluate the checkpoint (rllib_fast algorithms need no Ray for this)
    assert main(["evaluate", s["checkpoint"], "--episodes", "3"]) == 0
    line = _lines(capsys.readouterr().out, "mean_return: ")
    assert line and line[0].split()[2:5] == ["over", "3", "episodes"], line
    assert float(line[0].split()[1]) > 0
    # a trial directory resolves to its latest checkpoint
    assert main(["evaluate", os.path.dirname(s["checkpoint"]), "--episodes", "2"]) == 0
    assert "over 2 episodes" in capsys.readouterr().out
    # the console: the best-trial line names the swept keys only (here none: lr), not the whole config;
    # evaluate prints its result without RLlib's deprecation notices about RLModule(config=...)
    best = [ln for ln in out.splitlines() if ln.startswith("Current best trial:")]
    assert all(len(ln) <= 200 and "parameters={'lr': " in ln for ln in best), best
    proc = subprocess.run([sys.executable, "-m", "rllib_fast.cli", "evaluate", s["checkpoint"], "--episodes", "2"],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0 and "over 2 episodes" in proc.stdout, proc.stderr[-2000:]
    assert "deprecated" not in proc.stderr.lower() and "DeprecationWarning" not in proc.stderr, proc.stderr
    # a progress bar of finished episodes on stderr (off with --no-progress)
    assert "evaluating" in proc.stderr and "2/2" in proc.stderr, proc.stderr[-2000:]


def test_failed_trial_summary_png_and_real_error_last(capsys, tmp_path):
    """A trial that fails (here: the env rejects an env_config key) is summarised while Ray is
    still up: the PNG is written and the last line printed is the trial's real error."""
    cfg = dict(SMALL, env_config={"bogus_key": 1})
    rc = main(["train", "--algo", "FastPPO", "--env", "CartPole", "--config", json.dumps(cfg),
               "--stop", '{"training_iteration": 1}', "--no-mlflow", "-q", *RAY_ARGS])
    out = capsys.readouterr().out
    assert rc == 1, out[-3000:]
    assert "trials: 1 (0 ok, 1 errored)" in out and "Ray must be initialized" not in out, out[-3000:]
    assert (tmp_path / "runs" / "FastPPO_CartPole" / "learning_curves.png").is_file()
    last = out.strip().splitlines()[-1]
    assert "errored:" in last and "unexpected keyword argument 'bogus_key'" in last, out[-3000:]


def test_train_flags_rllib_ppo_and_evaluate(capsys, tmp_path):
    rc = main(["train", "--algo", "PPO", "--env", "CartPole-v1", "--config", json.dumps(PPO_SMALL),
               "--stop", '{"training_iteration": 1}', "--no-mlflow", *RAY_ARGS])
    out = capsys.readouterr().out
    assert rc == 0, out[-3000:]
    s = _summary(out)
    assert "(PPO, TERMINATED)" in out and s["final_return"] > 0
    assert not (tmp_path / "mlflow.db").exists() and "mlflow ui" not in out
    assert main(["evaluate", s["checkpoint"], "--episodes", "2", *RAY_ARGS]) == 0
    line = _lines(capsys.readouterr().out, "mean_return: ")
    assert line and float(line[0].split()[1]) > 0 and "episodes" in line[0]


def test_train_file_yaml_grid_search(capsys, tmp_path):
    cfg = "\n".join(f"        {k}: {v}" for k, v in SMALL.items())
    path = _write_yaml(tmp_path / "grid.yaml", f"""
grid-exp:
    run: FastPPO
    env: CartPole
    stop:
        training_iteration: 1
    checkpoint_config:
        checkpoint_at_end: true
    config:
{cfg}
        lr:
            grid_search: [0.001, 0.0003]
""")
    rc = main(["train", "file", path, *RAY_ARGS])
    out = capsys.readouterr().out
    assert rc == 0, out[-3000:]
    assert "trials: 2 (2 ok, 0 errored)" in out
    exp_dir = tmp_path / "runs" / "grid-exp"
    trial_dirs = [d for d in exp_dir.iterdir() if d.is_dir() and d.name.startswith("FastPPO")]
    assert len(trial_dirs) == 2
    assert all(list(d.glob("checkpoint_*/rllib_checkpoint.json")) for d in trial_dirs)
    assert (exp_dir / "learning_curves.png").is_file()
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.get_experiment_by_name("grid-exp")
    runs = client.search_runs([exp.experiment_id])
    assert sorted(float(r.data.params["lr"]) for r in runs) == [0.0003, 0.001]


def test_train_dash_f_shipped_yaml_with_overrides(capsys, tmp_path):
    """`train -f` on the shipped config, with --stop/--config overrides and --no-mlflow."""
    rc = main(["train", "-f", str(TUNE_CONFIGS / "cartpole-fastppo.yaml"), "--stop", '{"training_iteration": 1}',
               "--config", json.dumps(SMALL), "--no-mlflow", "--storage-path", "out", *RAY_ARGS])
    out = capsys.readouterr().out
    assert rc == 0, out[-3000:]
    s = _summary(out)
    assert s["checkpoint"].startswith(str(tmp_path / "out" / "cartpole-fastppo"))
    result = next((Path(s["checkpoint"]).parent).glob("result.json")).read_text().splitlines()
    assert len(result) == 1  # --stop override: 1 iteration, not the file's return/env-step stop
    assert json.loads(result[0])["config"]["num_envs"] == 8  # --config override
    assert not (tmp_path / "mlflow.db").exists()


def test_train_py_file_with_optuna(capsys, tmp_path):
    """A .py experiment file: `config` + `stop` + `tune_config` (OptunaSearch)."""
    src = TUNE_CONFIGS / "cartpole-fastppo-optuna.py"
    rc = main(["sweep", str(src), "--num-samples", "2", "--stop", '{"training_iteration": 1}',
               "--config", json.dumps(SMALL), *RAY_ARGS])
    out = capsys.readouterr().out
    assert rc == 0, out[-3000:]
    assert "trials: 2 (2 ok, 0 errored)" in out
    best = _lines(out, "best config: ")
    assert best and set(json.loads(best[0].split(": ", 1)[1])) == {"lr", "clip_param"}
    _summary(out)


def test_train_py_file_plain(capsys, tmp_path):
    """A .py experiment file with only `config` and `stop`, via `train file`."""
    py = tmp_path / "plain.py"
    py.write_text("from rllib_fast.algorithms.ppo import FastPPOConfig\n"
                  f"config = FastPPOConfig().environment('CartPole').training(**{SMALL!r})\n"
                  "stop = {'training_iteration': 1}\n")
    rc = main(["train", "file", str(py), "--no-mlflow", *RAY_ARGS])
    out = capsys.readouterr().out
    assert rc == 0 and "trials: 1 (1 ok, 0 errored)" in out, out[-3000:]
    assert (tmp_path / "runs" / "plain").is_dir()


# -- the console scripts --------------------------------------------------------------------------
def test_console_scripts_subprocess(tmp_path):
    exe = shutil.which("rllib") or os.path.join(os.path.dirname(sys.executable), "rllib")
    if not os.path.exists(exe):
        pytest.skip("console script `rllib` not installed (pip install -e . --no-deps)")
    proc = subprocess.run([exe, "list"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "FastPPO" in proc.stdout and "PPO" in proc.stdout
    proc = subprocess.run([exe, "train", "--algo", "FastPP0", "--env", "CartPole"], capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 2
    assert "unknown algorithm 'FastPP0'. Did you mean 'FastPPO'?" in proc.stderr
    assert "Traceback" not in proc.stderr
    fast = shutil.which("rllib-fast") or os.path.join(os.path.dirname(sys.executable), "rllib-fast")
    proc = subprocess.run([fast, "--help"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0 and "evaluate" in proc.stdout and "sweep" in proc.stdout


# -- readable console ------------------------------------------------------------------------------
def test_demo_console_is_short_and_narrow(tmp_path):
    """The demo (tiny variant) prints a few progress lines per trial with the mutated
    hyperparameters only: fewer than 150 lines in all, none over 200 characters, and none
    of Ray's start-up notices (the token-authentication one was 245 characters: the demo
    starts Ray with RAY_AUTH_MODE=token, see tune/session.py) or RLlib's build notices."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_MODE")}
    proc = subprocess.run([sys.executable, "-m", "rllib_fast.demo", "--tasks", "CartPole", "--trials", "2",
                           "--num-envs", "8", "--env-steps", "40000", "--perturbation-interval", "2",
                           "--out", str(tmp_path / "runs")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    lines = (proc.stdout + proc.stderr).splitlines()
    assert proc.returncode == 0, "\n".join(lines[-40:])
    assert len(lines) < 150, len(lines)
    long = [ln for ln in lines if len(ln) > 200]
    assert not long, long
    for noise in ("Token authentication", "new API stack", "DeprecationWarning", "gputil", "Result logdir"):
        assert not [ln for ln in lines if noise in ln], (noise, lines)
    progress = [ln for ln in lines if ln.startswith("[CartPole] trial ")]
    assert any("env steps (" in ln and "%), return " in ln and "lr=" in ln and "clip_param=" in ln
               for ln in progress), lines
    assert sum(": finished, return " in ln for ln in progress) == 2, lines
    assert any("best trial: mean return" in ln for ln in lines)


def test_train_file_with_algo_or_env_flag_is_refused(capsys):
    path = _write_yaml(Path("f.yaml"), "s:\n  run: FastPPO\n  env: CartPole\n")
    assert main(["train", "-f", path, "--env", "Pendulum"]) == 2
    _one_line_no_ray(capsys, "--algo/--env name a run given by flags")


def test_read_only_rllib_property_in_config_is_one_line(capsys):
    assert main(["train", "--algo", "PPO", "--env", "CartPole-v1", "--config",
                 '{"model_config": {"fcnet_hiddens": [32]}}']) == 2
    _one_line_no_ray(capsys, "model_config")


def test_no_false_warning_for_settable_rllib_properties(capsys):
    from rllib_fast.tune.plan import _warn_unknown_rllib_keys, resolve_algorithm

    _warn_unknown_rllib_keys(resolve_algorithm("PPO"), {"train_batch_size_per_learner": 1234})
    assert "warning" not in capsys.readouterr().err


def test_evaluate_corrupted_checkpoint_is_one_line(capsys, tmp_path):
    from rllib_fast.algorithms import FastPPOConfig

    algo = FastPPOConfig().environment("CartPole", num_envs=4).training(rollout_length=8).build_algo()
    algo.train()
    path = algo.save_to_path(str(tmp_path / "ckpt"))
    algo.stop()
    state = Path(path) / "algorithm_state.pkl"
    state.write_bytes(state.read_bytes()[:100])
    assert main(["evaluate", path, "--episodes", "1", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err


# -- found by a review: runs that waited forever or reported success they did not have ---------
def test_a_trial_asking_more_cpus_than_the_local_ray_has_fails_before_ray_starts(capsys, tmp_path):
    import ray

    # FastAPPO's defaults: the driver and 8 learner actors, 9 CPUs (Tune kept it pending forever)
    rc = main(["train", "--algo", "FastAPPO", "--env", "CartPole", "--stop", '{"training_iteration": 1}',
               "--storage-path", str(tmp_path), "--no-mlflow", *RAY_ARGS])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "asks for 9 CPUs" in err[0] and "the local Ray has 2" in err[0], err
    assert not ray.is_initialized()


def test_fractional_trial_cpus_are_kept():
    from rllib_fast.algorithms.ppo import FastPPO

    pgf = FastPPO.default_resource_request({"num_cpus_for_main_process": 0.5})
    assert pgf.bundles[0]["CPU"] == 0.5        # two trials per core, as `resources: {cpu: 0.5}` asks


def test_an_interrupted_run_is_not_reported_as_a_success(capsys, tmp_path, monkeypatch):
    from rllib_fast.tune.plan import Plan
    from rllib_fast.tune.run import summarize

    class Trial:
        def __init__(self, name, status):
            self.name, self.status, self.trial_id = name, status, name
            self.path, self.last_result, self.checkpoint, self.trainable_name = None, {}, None, "FastPPO"

        def __str__(self):
            return self.name

    monkeypatch.chdir(tmp_path)
    trials = [Trial("done", "TERMINATED"), Trial("waiting", "PENDING"), Trial("cut", "RUNNING")]
    rc = summarize(trials, Plan(), None, None, {})
    out = capsys.readouterr().out
    assert rc == 1 and "trials: 3 (1 ok, 0 errored, 2 unfinished)" in out
    assert "trial waiting did not finish (PENDING)" in out
    assert summarize(trials[:1], Plan(), None, None, {}) == 0
