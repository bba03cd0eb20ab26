"""`rllib-fast sweep` / `rllib-fast report` (rllib_fast.tune.sweep, rllib_fast.tune.report).

* every file in tune_configs/ parses and validates, and each algorithm it names
  is registered (files naming algorithms not written yet are skipped);
* YAML search spaces, schedulers (PBT/ASHA), searchers (Optuna) and resource
  packing are built from the file; mistakes are one-line errors (exit 2);
* a tiny PBT sweep runs two trials at the same time on 2 CPUs (packed by
  resources), through the CLI and the same Tuner, and `report` writes the
  Markdown table and the two PNGs.
"""
import json
from pathlib import Path

import pytest
import yaml

from rllib_fast.cli import build_parser, main
from rllib_fast.tune import sweep as sw

REPO = Path(__file__).resolve().parents[1]
TUNE_CONFIGS = REPO / "tune_configs"
FILES = sorted(TUNE_CONFIGS.glob("*.yaml")) + sorted(TUNE_CONFIGS.glob("*.py"))
#: the algorithms issue 9 asks ready-made sweep files for
SWEPT = ("FastPPO", "FastA2C", "FastDQN", "Rainbow", "PQL", "DDPGN", "SACN", "HTSPPO", "HTSA2C", "PopTD3",
         "FastAPPO", "FastA3C")

pytestmark = pytest.mark.usefixtures("isolated_run")


def _names_in(path: Path):
    if path.suffix == ".py":
        return None  # a Python file names its algorithm through its config class
    data = yaml.safe_load(path.read_text())
    return {spec.get("run") or spec.get("algo") for spec in data.values()}


def _registered(name: str) -> bool:
    from rllib_fast.cli import all_algorithm_names

    return name in all_algorithm_names()


@pytest.mark.parametrize("path", FILES, ids=[f.name for f in FILES])
def test_every_tune_config_parses_and_names_registered_algorithms(path):
    names = _names_in(path)
    missing = sorted(n for n in (names or ()) if not _registered(n))
    assert not missing, f"{path.name} names algorithms that are not registered: {missing}"
    args = build_parser("rllib-fast").parse_args(["sweep", str(path)])
    sweeps = sw.load_sweeps(str(path), args)
    assert sweeps
    for s in sweeps:
        assert _registered(s.run)
        assert s.stop, f"{path.name}: no stop criteria"
        assert s.checkpoint_config["checkpoint_at_end"] is True
        tuner = sw.build_tuner(s)  # the same file through tune.Tuner
        assert type(tuner).__name__ == "Tuner"
        if path.name.startswith("sweep-"):
            assert s.metric == sw.RETURN_KEY and s.mode == "max"


def test_a_sweep_file_for_every_algorithm_of_the_issue():
    named = set()
    for f in TUNE_CONFIGS.glob("sweep-*.yaml"):
        named |= _names_in(f)
    assert set(SWEPT) <= named, f"no sweep file for {sorted(set(SWEPT) - named)}"


def test_search_spaces_schedulers_searchers_resources():
    from ray.tune.schedulers import ASHAScheduler, PopulationBasedTraining
    from ray.tune.search import ConcurrencyLimiter
    from ray.tune.search.sample import Categorical, Float, Integer

    space = sw.to_search_space({"lr": {"loguniform": [1e-4, 1e-2]}, "clip": {"choice": [0.1, 0.2]},
                                "seed": {"randint": [0, 10]}, "hidden_sizes": [64, 64],
                                "g": {"grid_search": [1, 2]}, "nested": {"x": {"uniform": [0, 1]}}})
    assert isinstance(space["lr"], Float) and isinstance(space["clip"], Categorical)
    assert isinstance(space["seed"], Integer) and space["hidden_sizes"] == [64, 64]
    assert space["g"] == {"grid_search": [1, 2]} and isinstance(space["nested"]["x"], Float)
    pbt = sw.make_scheduler({"type": "pbt", "perturbation_interval": 2,
                             "hyperparam_mutations": {"lr": {"loguniform": [1e-4, 1e-2]}, "clip": [0.1, 0.2]}})
    assert isinstance(pbt, PopulationBasedTraining)
    assert isinstance(sw.make_scheduler({"type": "asha", "max_t": 10}), ASHAScheduler)
    assert isinstance(sw.make_searcher({"type": "optuna", "seed": 0}, max_concurrent=2), ConcurrencyLimiter)
    assert sw.make_searcher("random") is None
    # packing: whole CPUs, fractional GPUs only when the cluster has a GPU
    assert sw.resource_overrides({"cpu": 1, "gpu": "auto", "trials_per_gpu": 4}, gpus_available=0) == {
        "num_cpus_for_main_process": 1}
    assert sw.resource_overrides({"cpu": 1, "gpu": "auto", "trials_per_gpu": 4}, gpus_available=1) == {
        "num_cpus_for_main_process": 1, "num_gpus_per_learner": 0.25}
    from rllib_fast.algorithms import FastPPO

    cfg = {"env": "CartPole", **sw.resource_overrides({"cpu": 1, "gpu": 0.25}, 1)}
    assert FastPPO.default_resource_request(cfg).bundles == [{"CPU": 1, "GPU": 0.25}]
    for bad, msg in (({"type": "hyperband"}, "allowed: fifo, pbt, asha, median"),
                     ({"type": "pbt"}, "hyperparam_mutations")):
        with pytest.raises(sw.SweepError, match=msg):
            sw.make_scheduler(bad)
    with pytest.raises(sw.SweepError, match="allowed: random, optuna"):
        sw.make_searcher({"type": "hyperopt"})
    with pytest.raises(sw.SweepError, match="allowed: cpu, gpu, trials_per_gpu"):
        sw.resource_overrides({"cpus": 1}, 0)


def test_bad_sweep_file_one_line_exit_2(tmp_path, capsys):
    f = tmp_path / "bad.yaml"
    f.write_text("s:\n  run: FastPPO\n  env: CartPole\n  config: {lr: {loguniform: [1.0e-4, 1.0e-2]}}\n"
                 "  scheduler: {type: pbt2}\n")
    assert main(["sweep", str(f)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "scheduler type 'pbt2' is not allowed" in err[0]
    f.write_text("s:\n  run: FastPPO\n  env: CartPole\n  config: {lr: {loguniform: [1.0e-4, 1.0e-2]}, nm_envs: 3}\n")
    assert main(["sweep", str(f)]) == 2
    assert "nm_envs" in capsys.readouterr().err
    assert main(["sweep", str(tmp_path / "none.yaml"), "--resume"]) == 2


def test_rerun_into_existing_sweep_folder_refused(tmp_path, capsys):
    import ray

    f = tmp_path / "s.yaml"
    f.write_text("s:\n  run: FastPPO\n  env: CartPole\n  config: {lr: 1.0e-3}\n")
    (tmp_path / "runs" / "s").mkdir(parents=True)
    (tmp_path / "runs" / "s" / "tuner.pkl").write_bytes(b"an earlier sweep")
    assert main(["sweep", str(f), "--storage-path", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "already holds sweep 's': use --resume or a new name" in err[0], err
    assert not ray.is_initialized()


def test_pbt_mutation_key_and_dashboard_checked_before_ray(tmp_path, capsys):
    import ray

    f = tmp_path / "pbt.yaml"
    f.write_text("s:\n  run: FastPPO\n  env: CartPole\n  config: {lr: 1.0e-3}\n"
                 "  scheduler: {type: pbt, hyperparam_mutations: {clip_parm: [0.1, 0.2]}}\n")
    assert main(["sweep", str(f)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "hyperparam_mutations key 'clip_parm' is not a hyperparameter of FastPPO" in err[0]
    assert "Did you mean 'clip_param'?" in err[0] and "Allowed:" in err[0] and not ray.is_initialized()
    with pytest.raises(sw.SweepError, match="'lrr'"):
        sw.check_mutation_keys({"lrr": [1e-3]}, "PPO")  # RLlib built-ins: their config keys
    sw.check_mutation_keys({"lr": [1e-3], "clip_param": [0.2]}, "PPO")
    from rllib_fast.tune.session import dashboard_missing

    if dashboard_missing() is None:
        pytest.skip("ray[default] is installed here: the dashboard would start")
    f.write_text("s:\n  run: FastPPO\n  env: CartPole\n  config: {lr: 1.0e-3}\n")
    assert main(["sweep", str(f), "--dashboard"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pip install 'ray[default]'" in err[0] and not ray.is_initialized()


TINY_PBT = """\
tiny-pbt:
    run: FastPPO
    env: CartPole
    num_samples: 2
    stop: {training_iteration: 4}
    config:
        num_envs: 8
        rollout_length: 16
        num_minibatches: 2
        decorrelate_steps: 0
        lr: {loguniform: [1.0e-4, 1.0e-3]}
        seed: {randint: [0, 1000]}
    scheduler:
        type: pbt
        perturbation_interval: 2
        quantile_fraction: 0.5
        resample_probability: 1.0
        hyperparam_mutations: {lr: {loguniform: [1.0e-4, 1.0e-3]}}
    resources: {cpu: 1}
    reuse_actors: true
    checkpoint_config: {checkpoint_frequency: 2, checkpoint_at_end: true, num_to_keep: 4}
"""


def test_pbt_sweep_packs_two_trials_then_report(tmp_path, capsys):
    f = tmp_path / "tiny.yaml"
    f.write_text(TINY_PBT)
    rc = main(["sweep", str(f), "--ray-num-cpus", "2", "--no-mlflow", "--storage-path", str(tmp_path / "runs"),
               "-q"])
    out = capsys.readouterr().out
    assert rc == 0, out[-3000:]
    assert "trials: 2 (2 ok, 0 errored)" in out
    exp = tmp_path / "runs" / "tiny-pbt"
    trials = sorted(p for p in exp.iterdir() if (p / "result.json").is_file())
    assert len(trials) == 2
    spans = []
    for t in trials:
        results = [json.loads(ln) for ln in (t / "result.json").read_text().splitlines() if ln.strip()]
        assert results[-1]["training_iteration"] == 4
        spans.append((results[0]["timestamp"] - results[0]["time_this_iter_s"], results[-1]["timestamp"]))
    # packed: each trial asks for 1 of the 2 CPUs, so both ran at the same time
    (a0, a1), (b0, b1) = spans
    assert a0 < b1 and b0 < a1, f"trials did not overlap: {spans}"

    assert main(["report", str(exp)]) == 0
    md = (exp / "report.md").read_text()
    rows = [ln for ln in md.splitlines() if ln.startswith("| FastPPO_")]
    assert len(rows) == 2 and "| lr |" in md and "steps to 475" in md
    for png in ("curves_env_steps.png", "curves_wallclock.png"):
        data = (exp / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
