"""Benchmark: a 16-trial PBT sweep of FastPPO vs the same sweep of RLlib's built-in PPO.

    python benchmarks/sweep.py                     # both arms, 16 trials, 4096 env steps per trial
    python benchmarks/sweep.py --trials 8 --steps 8192 --arms fastppo

Both arms: CartPole (FastPPO: the built-in torch task; RLlib PPO: the same
task through ``rllib-fast-gym:CartPole``), 1024 env steps per iteration, PBT
over ``lr`` every 2 iterations (quantile 0.25), one CPU per trial on a
``ray.init(num_cpus=2)`` local cluster (two trials at a time), a checkpoint
every 2 iterations, every result recorded by ``MLflowRecorder`` to a local
SQLite store. FastPPO reuses trial actors (``reuse_actors=True``: its
``reset_config`` applies PBT's new config in place); RLlib's PPO cannot
(``Algorithm.reset_config`` returns False), so Tune starts a new actor for it
after every exploit -- that cost is part of what is measured.

Each arm runs in its own child process (``--child ARM``). Measured:

* sweep wall-clock (``Tuner.fit``), trials per minute, total env steps/s;
* actor start: a fresh 1-CPU Ray actor of the algorithm, from ``.remote()``
  to its first result minus that iteration's ``time_this_iter_s`` (process
  start, imports, algorithm setup), median of 3, outside the sweep;
* first-result overhead inside the sweep: Tune's ``on_trial_start`` to the
  trial's first result minus ``time_this_iter_s`` (setup once the actor is
  up), median and max over trials;
* checkpoint save and restore of one trained algorithm (``save_to_path`` /
  ``restore_from_path``, median of 5, outside the sweep);
* MLflow logging time per result (``MLflowRecorder.log_trial_result``), median.

Writes ``benchmarks/results/sweep.{md,json,png}``. On a shared machine the
numbers are noisy: the table carries the machine's load average.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
RESULTS = os.path.join(HERE, "results")
ITER_STEPS = 1024


def _fastppo_space(seed_domain):
    from ray import tune

    from rllib_fast.algorithms.ppo import FastPPOConfig

    cfg = FastPPOConfig().environment("CartPole", num_envs=16).training(
        rollout_length=64, num_epochs=4, num_minibatches=4).resources(num_cpus_for_main_process=1)
    space = cfg.to_dict()
    space["lr"] = tune.loguniform(3e-4, 3e-3)
    space["seed"] = seed_domain
    return "FastPPO", space, True


def _rllib_space(seed_domain):
    from ray import tune
    from ray.rllib.algorithms.ppo import PPOConfig

    cfg = (PPOConfig().environment("rllib-fast-gym:CartPole")
           .env_runners(num_env_runners=0, num_envs_per_env_runner=16, rollout_fragment_length=64,
                        gym_env_vectorize_mode="vector_entry_point")
           .training(train_batch_size_per_learner=ITER_STEPS, minibatch_size=256, num_epochs=4)
           .resources(num_cpus_for_main_process=1))
    space = cfg.to_dict()
    space["lr"] = tune.loguniform(3e-4, 3e-3)
    space["seed"] = seed_domain
    return "PPO", space, False


ARMS = {"fastppo": _fastppo_space, "rllib-ppo": _rllib_space}


def child(arm: str, trials: int, steps: int, out: str) -> None:
    import torch

    torch.set_num_threads(1)
    import ray
    from ray import tune
    from ray.tune.schedulers import PopulationBasedTraining

    import rllib_fast
    from rllib_fast.tune.mlflow import MLflowRecorder

    t0 = time.time()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    rllib_fast.register()
    ray_init_s = time.time() - t0
    tmp = tempfile.mkdtemp(prefix=f"sweep-bench-{arm}-")

    class TimedRecorder(MLflowRecorder):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            self.log_s: List[float] = []

        def log_trial_result(self, iteration, trial, result):
            t = time.perf_counter()
            super().log_trial_result(iteration, trial, result)
            self.log_s.append(time.perf_counter() - t)

    class Overhead(tune.Callback):
        def __init__(self):
            self.start: Dict[str, float] = {}
            self.first: Dict[str, float] = {}
            self.results = 0

        def on_trial_start(self, iteration, trials, trial, **info):
            self.start.setdefault(trial.trial_id, time.time())

        def on_trial_result(self, iteration, trials, trial, result, **info):
            self.results += 1
            if trial.trial_id not in self.first:
                self.first[trial.trial_id] = time.time() - self.start[trial.trial_id] - result["time_this_iter_s"]

    name, space, reuse = ARMS[arm](tune.randint(0, 10_000))
    recorder = TimedRecorder(f"sqlite:///{tmp}/mlflow.db", experiment_name=f"bench-{arm}", save_plot=False)
    overhead = Overhead()
    pbt = PopulationBasedTraining(time_attr="training_iteration", perturbation_interval=2,
                                  hyperparam_mutations={"lr": tune.loguniform(1e-4, 5e-3)}, quantile_fraction=0.25)
    tuner = tune.Tuner(name, param_space=space, tune_config=tune.TuneConfig(
        scheduler=pbt, metric="env_runners/episode_return_mean", mode="max", num_samples=trials,
        reuse_actors=reuse), run_config=tune.RunConfig(
        name=f"bench-{arm}", storage_path=tmp, stop={"num_env_steps_sampled_lifetime": steps}, verbose=0,
        callbacks=[overhead, recorder],
        checkpoint_config=tune.CheckpointConfig(checkpoint_frequency=2, checkpoint_at_end=True, num_to_keep=4)))
    t = time.time()
    results = tuner.fit()
    wall = time.time() - t
    env_steps = sum(r.metrics.get("num_env_steps_sampled_lifetime", 0) for r in results)
    best = max((r.metrics.get("env_runners", {}).get("episode_return_mean", float("nan")) for r in results),
               default=float("nan"))

    # checkpoint save/restore of one trained algorithm, outside the sweep
    from rllib_fast.cli import resolve_algorithm

    cls = resolve_algorithm(name)
    cfg_dict = {k: v for k, v in space.items() if k not in ("lr", "seed")}
    cfg = cls.get_default_config().update_from_dict(cfg_dict)
    # actor start: a fresh 1-CPU actor of the algorithm, to its first result, minus that iteration
    remote_cls = ray.remote(num_cpus=1)(cls)
    starts = []
    for _ in range(3):
        s = time.perf_counter()
        actor = remote_cls.remote(config=cfg)
        first = ray.get(actor.train.remote())
        starts.append(time.perf_counter() - s - first["time_this_iter_s"])
        ray.get(actor.stop.remote())
        ray.kill(actor)
    algo = cfg.build_algo()
    algo.train()
    saves, restores = [], []
    for i in range(5):
        path = os.path.join(tmp, f"ckpt{i}")
        s = time.perf_counter()
        algo.save_to_path(path)
        saves.append(time.perf_counter() - s)
        s = time.perf_counter()
        algo.restore_from_path(path)
        restores.append(time.perf_counter() - s)
    algo.stop()
    rec = {"arm": arm, "algorithm": name, "trials": trials, "steps_per_trial": steps, "reuse_actors": reuse,
           "errors": len(results.errors), "sweep_wall_s": wall, "ray_init_s": ray_init_s,
           "trials_per_min": 60.0 * trials / wall, "env_steps": env_steps, "env_steps_per_s": env_steps / wall,
           "results": overhead.results, "best_return": best,
           "trial_overhead_s": statistics.median(overhead.first.values()) if overhead.first else None,
           "trial_overhead_max_s": max(overhead.first.values()) if overhead.first else None,
           "actor_start_s": statistics.median(starts),
           "checkpoint_save_s": statistics.median(saves), "checkpoint_restore_s": statistics.median(restores),
           "mlflow_log_s": statistics.median(recorder.log_s) if recorder.log_s else None,
           "loadavg": os.getloadavg()}
    with open(out, "w") as f:
        json.dump(rec, f)
    ray.shutdown()


def partial_record(arm: str, exp_root: str, cap_s: float, trials: int, steps: int) -> Dict[str, Any]:
    """What an arm that hit the time cap got done: finished trials and env steps, from its trial dirs."""
    finished, env_steps = 0, 0
    for d in os.listdir(os.path.join(exp_root, f"bench-{arm}")):
        f = os.path.join(exp_root, f"bench-{arm}", d, "result.json")
        if not os.path.isfile(f):
            continue
        lines = [ln for ln in open(f).read().splitlines() if ln.strip()]
        if lines:
            last = json.loads(lines[-1])
            env_steps += last.get("num_env_steps_sampled_lifetime", 0)
            finished += bool(last.get("done"))
    return {"arm": arm, "algorithm": {"fastppo": "FastPPO", "rllib-ppo": "PPO"}[arm], "trials": trials,
            "steps_per_trial": steps, "reuse_actors": arm == "fastppo", "errors": None, "timed_out": True,
            "finished_trials": finished, "sweep_wall_s": cap_s, "ray_init_s": None,
            "trials_per_min": 60.0 * finished / cap_s, "env_steps": env_steps, "env_steps_per_s": env_steps / cap_s,
            "results": None, "best_return": None, "trial_overhead_s": None, "trial_overhead_max_s": None,
            "actor_start_s": None, "checkpoint_save_s": None, "checkpoint_restore_s": None, "mlflow_log_s": None,
            "loadavg": os.getloadavg()}


def _newest(prefix: str):
    import glob

    dirs = sorted(glob.glob(os.path.join(tempfile.gettempdir(), prefix + "*")), key=os.path.getmtime)
    return dirs[-1] if dirs else None


def _fmt(x, nd=2):
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.{nd}f}" if abs(x) < 1000 else f"{x:,.0f}"
    return str(x)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=16)
    p.add_argument("--steps", type=int, default=4096, help="env steps per trial (1024 per iteration)")
    p.add_argument("--arms", default="fastppo,rllib-ppo")
    p.add_argument("--timeout", type=float, default=900.0, help="hard cap per arm (s)")
    p.add_argument("--merge", action="store_true", help="keep the other arms' records from results/sweep.json")
    p.add_argument("--partial-from", default=None, metavar="ARM=DIR",
                   help="record an arm that hit the cap from its sweep directory (no new run)")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        child(args.child, args.trials, args.steps, args.out)
        return 0
    records = []
    load_before = os.getloadavg()
    arms = args.arms.split(",")
    if args.partial_from:
        arm, _, root = args.partial_from.partition("=")
        records.append(partial_record(arm, root, args.timeout, args.trials, args.steps))
        arms = []
    for arm in arms:
        out = tempfile.mktemp(suffix=f"-{arm}.json")
        env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        log = os.path.join(tempfile.gettempdir(), f"sweep-bench-{arm}.log")
        print(f"[{arm}] running {args.trials} trials x {args.steps} env steps (log: {log}) ...", flush=True)
        t = time.time()
        with open(log, "w") as lf:
            try:
                subprocess.run([sys.executable, os.path.abspath(__file__), "--child", arm, "--trials",
                                str(args.trials), "--steps", str(args.steps), "--out", out],
                               stdout=lf, stderr=subprocess.STDOUT, env=env, timeout=args.timeout, check=True)
            except subprocess.TimeoutExpired:
                root = _newest(f"sweep-bench-{arm}-")
                if root and os.path.isdir(os.path.join(root, f"bench-{arm}")):
                    rec = partial_record(arm, root, args.timeout, args.trials, args.steps)
                    records.append(rec)
                    print(f"[{arm}] hit the {args.timeout:.0f} s cap: {rec['finished_trials']}/{args.trials} "
                          f"trials finished (see {log})")
                else:
                    print(f"[{arm}] hit the {args.timeout:.0f} s cap (see {log})")
                continue
            except subprocess.CalledProcessError as err:
                print(f"[{arm}] failed: {err} (see {log})")
                continue
        rec = json.load(open(out))
        rec["process_wall_s"] = time.time() - t
        records.append(rec)
        print(f"[{arm}] sweep {rec['sweep_wall_s']:.1f} s, {rec['trials_per_min']:.2f} trials/min", flush=True)
    if args.merge and os.path.isfile(os.path.join(RESULTS, "sweep.json")):  # keep arms not run now
        ran = {r["arm"] for r in records}
        old = json.load(open(os.path.join(RESULTS, "sweep.json")))["records"]
        records = [r for r in old if r["arm"] not in ran] + records
        records.sort(key=lambda r: list(ARMS).index(r["arm"]))
    if not records:
        return 1
    headers = ["arm", "trials", "steps/trial", "reuse actors", "errors", "sweep wall (s)", "trials/min",
               "env steps/s (all trials)", "best return", "actor start + setup (s)", "first-result overhead in sweep (s, median / max)",
               "ckpt save (ms)", "ckpt restore (ms)", "MLflow log per result (ms)", "ray.init (s)", "load avg"]
    rows = []
    for r in records:
        wall = _fmt(r["sweep_wall_s"], 1)
        if r.get("timed_out"):
            wall = f"> {wall} (cap; {r['finished_trials']}/{r['trials']} trials done)"
        rows.append([r["arm"], r["trials"], r["steps_per_trial"], r["reuse_actors"], _fmt(r["errors"]), wall, _fmt(r["trials_per_min"]), _fmt(r["env_steps_per_s"], 0),
                     _fmt(r["best_return"], 1), _fmt(r["actor_start_s"]),
                     f"{_fmt(r['trial_overhead_s'])} / {_fmt(r['trial_overhead_max_s'])}",
                     _fmt(1000 * r["checkpoint_save_s"], 1) if r["checkpoint_save_s"] else "-",
                     _fmt(1000 * r["checkpoint_restore_s"], 1) if r["checkpoint_restore_s"] else "-",
                     _fmt(1000 * r["mlflow_log_s"], 1) if r["mlflow_log_s"] else "-", _fmt(r["ray_init_s"], 1),
                     "{:.1f}".format(r["loadavg"][0])])
    from _report import markdown_table

    table = markdown_table(headers, rows)
    by = {r["arm"]: r for r in records}
    lines = ["# 16-trial PBT sweep: FastPPO vs RLlib PPO (CartPole)", "",
             f"`python benchmarks/sweep.py --trials {args.trials} --steps {args.steps}` on "
             f"{os.cpu_count()} cores; `ray.init(num_cpus=2)`, 1 CPU per trial (2 trials at a time).",
             f"Machine load average before the run: {load_before[0]:.1f} (values above ~1 mean other "
             "processes competed for the 2 cores: numbers taken under contention).", "", table, ""]
    if "fastppo" in by and "rllib-ppo" in by:
        f, r = by["fastppo"], by["rllib-ppo"]
        more = " (at least: RLlib PPO hit the time cap)" if r.get("timed_out") else ""
        lines.append(f"Sweep wall-clock ratio RLlib PPO / FastPPO: {r['sweep_wall_s'] / f['sweep_wall_s']:.1f}x{more}; "
                     f"trial throughput ratio FastPPO / RLlib PPO: "
                     f"{f['trials_per_min'] / r['trials_per_min']:.1f}x.")
    md = "\n".join(lines) + "\n"
    print(md)
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "sweep.md"), "w") as fh:
        fh.write(md)
    with open(os.path.join(RESULTS, "sweep.json"), "w") as fh:
        json.dump({"args": vars(args), "records": records}, fh, indent=1)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 3, figsize=(11, 3.5))
        names = [r["arm"] for r in records]
        for ax, key, label in ((axes[0], "sweep_wall_s", "sweep wall-clock (s)"),
                               (axes[1], "trials_per_min", "trials / min"),
                               (axes[2], "trial_overhead_s", "trial start overhead (s)")):
            ax.bar(names, [r.get(key) or 0 for r in records], color=["tab:blue", "tab:orange"][:len(names)])
            ax.set_title(label)
        fig.suptitle(f"{args.trials}-trial PBT sweep, {args.steps} env steps/trial "
                     f"(load avg {load_before[0]:.1f})")
        fig.tight_layout()
        fig.savefig(os.path.join(RESULTS, "sweep.png"))
    except Exception as err:  # plotting must not lose the numbers
        print(f"plot not written: {err}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
