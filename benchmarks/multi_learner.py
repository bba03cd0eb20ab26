"""Multiple learners: 1 vs 2 (vs more) synchronous data-parallel learners
(FastPPO, FastA2C; gradients all-reduced) and asynchronous learners around the
central parameter store (FastAPPO, FastA3C; multi-step Adam).

Stooke & Abbeel Table 2 style: wall-clock to a fixed number of env steps (and
to CartPole's 475) with the same total number of envs split over L learners.
On this 2-core CPU the ceiling is 2x; on a GPU machine run with
``--device cuda --gpus-per-learner 1`` (each learner needs its own GPU).

    python benchmarks/multi_learner.py [--steps 400000] [--learners 1 2] [--seeds 0]

Prints a markdown table and writes ``benchmarks/results/multi_learner.md``.
Each configuration runs in its own process (fresh Ray, no warm caches).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")


def run_one(algo: str, learners: int, steps: int, seed: int, device: str, gpus: float, hidden: list = (64, 64)) -> dict:
    """Child process body: train until `steps` env steps; record time to 475 too."""
    import math

    import ray
    import torch

    torch.set_num_threads(1)
    ray.init(num_cpus=max(2, learners), include_dashboard=False, log_to_driver=False)
    import rllib_fast  # noqa: F401
    from rllib_fast.algorithms.a2c import FastA2CConfig
    from rllib_fast.algorithms.appo import FastA3CConfig, FastAPPOConfig
    from rllib_fast.algorithms.ppo import FastPPOConfig

    env = dict(num_envs=64, env_device=device)
    if algo == "FastPPO":
        cfg = FastPPOConfig().environment("CartPole", **env)
    elif algo == "FastA2C":
        cfg = FastA2CConfig().environment("CartPole", **env).training(lr_rule="sqrt")
    elif algo == "FastAPPO":  # fixed lr (no KL-adaptive schedule, as the paper), tuned for CartPole
        cfg = FastAPPOConfig().environment("CartPole", **env).training(
            rollout_length=64, lr=2.5e-3, num_async_learners=learners, sync_every=2, cycles_per_iteration=2,
            num_gpus_per_async_learner=gpus)
    else:  # FastA3C: 64 envs over L A2C units, Adam at A2C's lr
        cfg = FastA3CConfig().environment("CartPole", **env).training(
            num_async_learners=learners, cycles_per_iteration=10, lr=1e-3, num_gpus_per_async_learner=gpus)
    if algo in ("FastPPO", "FastA2C"):
        cfg = cfg.learners(num_learners=learners if learners > 1 else 0, num_gpus_per_learner=gpus)
    cfg = cfg.training(hidden_sizes=list(hidden)).debugging(seed=seed)
    t0 = time.perf_counter()
    algo_obj = cfg.build_algo()
    build_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    t475, r = None, {}
    while True:
        r = algo_obj.train()
        ret = r["env_runners"]["episode_return_mean"]
        if t475 is None and not math.isnan(ret) and ret >= 475:
            t475 = time.perf_counter() - t0
        if r["num_env_steps_sampled_lifetime"] >= steps:
            break
    wall = time.perf_counter() - t0
    algo_obj.stop()
    ray.shutdown()
    return {"algo": algo, "learners": learners, "seed": seed, "build_s": build_s, "wall_s": wall,
            "env_steps": r["num_env_steps_sampled_lifetime"], "t475_s": t475,
            "final_return": r["env_runners"]["episode_return_mean"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--algos", nargs="+", default=["FastPPO", "FastA2C", "FastAPPO", "FastA3C"])
    p.add_argument("--learners", nargs="+", type=int, default=[1, 2])
    p.add_argument("--steps", type=int, default=400_000)
    p.add_argument("--seeds", nargs="+", type=int, default=[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--gpus-per-learner", type=float, default=0.0)
    p.add_argument("--hidden", nargs="+", type=int, default=[64, 64],
                   help="hidden sizes: small nets measure overhead, large ones (e.g. 512 512) compute-bound learning")
    p.add_argument("--tag", default="", help="suffix of the result files (multi_learner<tag>.md)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(run_one(**json.loads(args.child))), flush=True)
        return
    rows = []
    for algo in args.algos:
        for learners in args.learners:
            for seed in args.seeds:
                spec = dict(algo=algo, learners=learners, steps=args.steps, seed=seed, device=args.device,
                            gpus=args.gpus_per_learner, hidden=args.hidden)
                out = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec)], capture_output=True,
                                     text=True, timeout=1800)
                line = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
                if not line:
                    print(out.stderr[-2000:], file=sys.stderr)
                    continue
                rows.append(json.loads(line[-1]))
                print(f"done: {algo} L={learners} seed={seed}: {rows[-1]['wall_s']:.1f} s", flush=True)
    base = {r["algo"]: r["wall_s"] for r in rows if r["learners"] == 1}
    lines = [f"# Multiple learners on CartPole (64 envs in total, {args.steps:,} env steps, hidden {args.hidden}, "
             f"device {args.device})",
             "", "| algorithm | learners | wall-clock to N steps (s) | env-steps/s | speed-up vs 1 | time to 475 (s) |"
             " final return |", "| :--- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        speed = base.get(r["algo"], float("nan")) / r["wall_s"]
        t475 = f"{r['t475_s']:.1f}" if r["t475_s"] is not None else "not reached"
        lines.append(f"| {r['algo']} | {r['learners']} | {r['wall_s']:.1f} | {r['env_steps'] / r['wall_s']:,.0f} | "
                     f"{speed:.2f}x | {t475} | {r['final_return']:.1f} |")
    lines += ["", f"Machine: {os.cpu_count()} CPU cores; torch threads per learner: 1. Build time (Ray actors, "
              "process group) is excluded from wall-clock and reported separately in the JSON."]
    table = "\n".join(lines)
    print(table)
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, f"multi_learner{args.tag}.md"), "w") as f:
        f.write(table + "\n")
    with open(os.path.join(RESULTS, f"multi_learner{args.tag}.json"), "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
