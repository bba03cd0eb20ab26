"""Vectorised population vs K sequential agents vs K parallel processes (Flajolet et al. §4.1),
and PBT-8 vs 8 independent seeds on Pendulum (§5.1).

Measured for K in {1, 2, 4, 8, 16} (TD3, small MLPs: overhead-bound on a CPU):

* **update**: wall time of one update step of the whole population (sampling from
  replay included), steady state, after a warm-up; and the compile time when
  ``--compile`` is given (reported separately, never inside the step time);
* **budget**: wall time of a fixed training budget (``--budget-steps`` env steps per
  member, one update per env step) including acting and storage;
* **peak memory**: peak RSS of the measuring process (vectorised, sequential) or
  the sum over the K processes (parallel), and the increase over an idle process
  with the same imports (``delta``).

Arms, each in a fresh child process:

* ``vectorised``: one ``PopTD3`` with K members (one stacked network);
* ``sequential``: K ``PopTD3`` agents with one member each, stepped in turn in
  one process (the paper's "Torch (Sequential)");
* ``parallel``: K processes with one agent each, started together (what K Tune
  trials on one machine amount to, minus Ray's own overhead; the paper's
  "Parallel"); ``--tune`` additionally runs real Tune trials for K <= 4.

PBT arm: PopTD3 with 8 members, in-trial PBT (bottom 30% <- top 30%,
hyperparameters resampled from the paper's prior) vs the same 8 members with
PBT off (8 independent seeds, default hyperparameters); reported: member env
steps and wall time until the best member's fitness (mean of its last 3
returns) reaches the threshold.

    python benchmarks/population.py                  # all parts, modest budgets
    python benchmarks/population.py --parts update --ks 1,2,4,8,16
    python benchmarks/population.py --parts pbt --pbt-max-steps 12000

Writes ``benchmarks/results/population.{md,json,png}``. Numbers depend on the
machine's load; the script records the 1-minute load average next to them.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")


# ----------------------------------------------------------------------------------------------
# child side
# ----------------------------------------------------------------------------------------------
def _peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _config(K: int, hidden: List[int], batch: int, seed: int, **kw):
    from rllib_fast.algorithms.population import PopTD3Config

    base = dict(population_size=K, hidden_sizes=hidden, batch_size=batch, pbt_init="config", learning_starts=200,
                rollout_length=100, buffer_size=20_000, checkpoint_replay=False, validate_env_on_setup=False)
    base.update(kw)
    return PopTD3Config().environment("Pendulum").training(**base).debugging(seed=seed)


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def child(args) -> Dict[str, Any]:
    import torch

    torch.set_num_threads(1)
    import rllib_fast  # noqa: F401  (imports counted in the idle baseline)

    idle = _peak_rss_mb()
    K, hidden, batch = args.k, [int(h) for h in args.hidden.split(",")], args.batch
    if args.mode == "idle":
        return {"peak_rss_mb": idle}
    dev = {"env_device": args.device}
    agents = ([_config(K, hidden, batch, args.seed, compile=args.compile, **dev).build_algo()]
              if args.mode == "vectorised" else [_config(1, hidden, batch, args.seed + i, **dev).build_algo()
                                                 for i in range(K)])
    for a in agents:                        # fill replay (random actions), then warm up the update path
        a._rollout(200)
    out: Dict[str, Any] = {}
    t0 = time.perf_counter()
    for a in agents:
        a.run_updates(2)
    out["first_update_s"] = time.perf_counter() - t0
    out["compile_time_s"] = agents[0]._fused.compile_time_s
    # min over blocks: robust to load spikes from other processes on a shared machine
    reps, blocks = args.reps, 5
    best, best_cpu = float("inf"), float("inf")
    per = max(1, reps // blocks)
    for _ in range(blocks):
        _sync(args.device)
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(per):
            for a in agents:
                a.update_step()
        _sync(args.device)
        best = min(best, (time.perf_counter() - t0) / per)
        best_cpu = min(best_cpu, (time.process_time() - c0) / per)
    out["update_ms"] = best * 1e3
    out["update_cpu_ms"] = best_cpu * 1e3
    # fixed training budget: act + store + 1 update per member env step
    steps = args.budget_steps
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(max(1, steps // 100)):
        for a in agents:
            a._rollout(100)
            a.run_updates(100)
    _sync(args.device)
    out["budget_s"] = time.perf_counter() - t0
    out["budget_cpu_s"] = time.process_time() - c0
    out["peak_rss_mb"] = _peak_rss_mb()
    if args.device.startswith("cuda"):
        import torch

        out["peak_cuda_mb"] = torch.cuda.max_memory_allocated() / 2 ** 20
    out["idle_rss_mb"] = idle
    return out


def pbt_child(args) -> Dict[str, Any]:
    import math

    import torch

    torch.set_num_threads(1)
    kw = dict(rollout_length=100, learning_starts=500, gamma=0.98, tau=0.01, actor_lr=1e-3, critic_lr=1e-3,
              fitness_window=3, checkpoint_replay=False, buffer_size=50_000)
    if args.mode == "pbt":
        kw.update(pbt_interval=args.pbt_interval, pbt_fraction=0.3, pbt_resample_probability=1.0,
                  hyperparam_mutations={"actor_lr": {"loguniform": [3e-4, 3e-3]},
                                        "critic_lr": {"loguniform": [3e-4, 3e-3]},
                                        "exploration_noise": {"uniform": [0.05, 0.5]},
                                        "gamma": {"uniform": [0.95, 0.995]}})
    algo = _config(8, [64, 64], 128, args.seed, **kw).build_algo()
    t0, c0 = time.perf_counter(), time.process_time()
    curve = []
    reached = None
    while algo.member_env_steps < args.pbt_max_steps:
        r = algo.train()["env_runners"]["episode_return_mean"]
        curve.append((algo.member_env_steps, time.perf_counter() - t0, r, time.process_time() - c0))
        if reached is None and not math.isnan(r) and r >= args.threshold:
            reached = curve[-1]
            break
    return {"curve": curve, "reached": reached, "pbt_rounds": algo.pbt.rounds}


# ----------------------------------------------------------------------------------------------
# parent side
# ----------------------------------------------------------------------------------------------
def _run_child(argv: List[str], timeout: float) -> Dict[str, Any]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    p = subprocess.run([sys.executable, __file__, "--child", *argv], capture_output=True, text=True,
                       timeout=timeout, env=env)
    for line in reversed(p.stdout.splitlines()):
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(f"child {argv} failed:\n{p.stderr[-3000:]}")


def _parallel(K: int, common: List[str], timeout: float) -> Dict[str, Any]:
    """K one-agent processes started together: wall = the slowest, memory = the sum."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    t0 = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, __file__, "--child", "--mode", "sequential", "--k", "1",
                               "--seed", str(i), *common], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              text=True, env=env) for i in range(K)]
    res = []
    for p in procs:
        out, _ = p.communicate(timeout=timeout)
        res.append(next(json.loads(l[7:]) for l in reversed(out.splitlines()) if l.startswith("RESULT ")))
    return {"update_ms": max(r["update_ms"] for r in res), "budget_s": max(r["budget_s"] for r in res),
            "update_cpu_ms": sum(r["update_cpu_ms"] for r in res), "budget_cpu_s": sum(r["budget_cpu_s"] for r in res),
            "peak_rss_mb": sum(r["peak_rss_mb"] for r in res), "idle_rss_mb": sum(r["idle_rss_mb"] for r in res),
            "wall_s": time.perf_counter() - t0}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--mode", default="vectorised")
    p.add_argument("--k", type=int, default=1)
    p.add_argument("--device", default="cpu", help="env/learner device, e.g. cuda")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--parts", default="update,pbt", help="comma list of: update, pbt")
    p.add_argument("--ks", default="1,2,4,8,16")
    p.add_argument("--arms", default="vectorised,sequential,parallel")
    p.add_argument("--hidden", default="64,64")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--reps", type=int, default=50, help="update steps timed per measurement (min of 5 blocks)")
    p.add_argument("--budget-steps", type=int, default=300, help="env steps per member in the training budget")
    p.add_argument("--compile", action="store_true", help="torch.compile the vectorised update (inductor)")
    p.add_argument("--pbt-max-steps", type=int, default=10_000)
    p.add_argument("--pbt-interval", type=int, default=1000)
    p.add_argument("--pbt-seeds", default="0")
    p.add_argument("--threshold", type=float, default=-250.0)
    p.add_argument("--timeout", type=float, default=900.0)
    p.add_argument("--out", default=os.path.join(RESULTS, "population"))
    args = p.parse_args()
    if args.child:
        res = pbt_child(args) if args.mode in ("pbt", "seeds") else child(args)
        print("RESULT " + json.dumps(res), flush=True)
        return
    ks = [int(k) for k in args.ks.split(",")]
    common = ["--hidden", args.hidden, "--batch", str(args.batch), "--reps", str(args.reps), "--budget-steps",
              str(args.budget_steps), "--device", args.device]
    report: Dict[str, Any] = {"load_avg_1min_start": os.getloadavg()[0], "cpu_count": os.cpu_count(),
                              "device": args.device,
                              "hidden": args.hidden, "batch": args.batch, "budget_steps": args.budget_steps}
    if "update" in args.parts:
        idle = _run_child(["--mode", "idle", *common], args.timeout)["peak_rss_mb"]
        report["idle_rss_mb"] = idle
        rows = {}
        for K in ks:
            for arm in args.arms.split(","):
                if arm == "parallel":
                    r = _parallel(K, common, args.timeout)
                else:
                    extra = ["--compile"] if (args.compile and arm == "vectorised") else []
                    r = _run_child(["--mode", arm, "--k", str(K), *common, *extra], args.timeout)
                rows[f"{arm}/{K}"] = r
                print(f"{arm:10s} K={K:2d} update {r['update_ms']:8.2f} ms (cpu {r['update_cpu_ms']:8.2f})  budget "
                      f"{r['budget_s']:7.2f} s (cpu {r['budget_cpu_s']:7.2f})  peak {r['peak_rss_mb']:8.0f} MB",
                      flush=True)
        report["update"] = rows
    if "pbt" in args.parts:
        pbt = {}
        for seed in [int(s) for s in args.pbt_seeds.split(",")]:
            for mode in ("pbt", "seeds"):
                r = _run_child(["--mode", mode, "--seed", str(seed), "--pbt-max-steps", str(args.pbt_max_steps),
                                "--pbt-interval", str(args.pbt_interval), "--threshold", str(args.threshold)],
                               args.timeout * 3)
                pbt[f"{mode}/{seed}"] = r
                print(f"{mode:6s} seed {seed}: reached {r['reached']}  (pbt rounds {r['pbt_rounds']})", flush=True)
        report["pbt"] = pbt
    report["load_avg_1min_end"] = os.getloadavg()[0]
    write(report, args.out, ks)


def write(report: Dict[str, Any], out: str, ks: List[int]) -> None:
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out + ".json", "w") as f:
        json.dump(report, f, indent=1)
    lines = ["# Population benchmark (PopTD3, Pendulum)", "",
             f"Device: {report.get('device', 'cpu')}. CPU cores: {report['cpu_count']}; 1-min load average {report['load_avg_1min_start']:.1f} at start, "
             f"{report['load_avg_1min_end']:.1f} at end (other sessions share this machine: numbers taken under "
             "contention). hidden=" + report["hidden"] + f", batch={report['batch']}, budget="
             f"{report['budget_steps']} env steps (and updates) per member.", ""]
    up = report.get("update")
    if up:
        base = up.get("vectorised/1", {}).get("update_cpu_ms")
        base_w = up.get("vectorised/1", {}).get("update_ms")
        lines += ["CPU ms = process CPU time (summed over the K processes for `parallel`): the cost, robust to "
                  "other sessions' load; wall ms = min over 5 timed blocks.", "",
                  "| K | arm | update CPU ms | x single agent (CPU) | update wall ms | x single agent (wall) | "
                  "budget CPU s | budget wall s | peak RSS (MB) | RSS over idle (MB) |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        idle = report["idle_rss_mb"]
        for K in ks:
            for arm in ("vectorised", "sequential", "parallel"):
                r = up.get(f"{arm}/{K}")
                if not r:
                    continue
                over = r["peak_rss_mb"] - (idle * (K if arm == "parallel" else 1))
                lines.append(f"| {K} | {arm} | {r['update_cpu_ms']:.2f} | {r['update_cpu_ms'] / base:.2f} | "
                             f"{r['update_ms']:.2f} | {r['update_ms'] / base_w:.2f} | {r['budget_cpu_s']:.2f} | "
                             f"{r['budget_s']:.2f} | {r['peak_rss_mb']:.0f} | {over:.0f} |")
        lines.append("")
    if report.get("pbt"):
        lines += ["| arm | seed | reached threshold at (member env steps, wall s, CPU s, best return) | PBT rounds |",
                  "|---|---|---|---|"]
        for key, r in report["pbt"].items():
            arm, seed = key.split("/")
            reached = r["reached"]
            txt = (f"{reached[0]} steps, {reached[1]:.1f} s wall, {reached[3]:.1f} s CPU, {reached[2]:.0f}"
                   if reached else f"not reached in {r['curve'][-1][0]} steps")
            lines.append(f"| {'PBT-8' if arm == 'pbt' else '8 independent seeds'} | {seed} | {txt} | "
                         f"{r['pbt_rounds']} |")
    with open(out + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    _plot(report, out + ".png", ks)
    print("\n".join(lines))


def _plot(report: Dict[str, Any], path: str, ks: List[int]) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    up = report.get("update") or {}
    for arm in ("vectorised", "sequential", "parallel"):
        xs = [K for K in ks if f"{arm}/{K}" in up]
        if xs:
            axes[0].plot(xs, [up[f"{arm}/{K}"]["update_cpu_ms"] for K in xs], "o-", label=arm)
            axes[1].plot(xs, [up[f"{arm}/{K}"]["peak_rss_mb"] for K in xs], "o-", label=arm)
    axes[0].set(xlabel="K", ylabel="CPU ms per population update", xscale="log", yscale="log", title="update step")
    axes[1].set(xlabel="K", ylabel="peak RSS (MB)", xscale="log", title="memory")
    for key, r in (report.get("pbt") or {}).items():
        c = r["curve"]
        axes[2].plot([x[3] for x in c], [x[2] for x in c], label=key)
    axes[2].axhline(-250, color="gray", ls="--")
    axes[2].set(xlabel="CPU s", ylabel="best member return", title="PBT-8 vs 8 seeds")
    for ax in axes:
        ax.legend()
    fig.suptitle("PopTD3 on Pendulum (2-core CPU, under contention)")
    fig.tight_layout()
    fig.savefig(path, dpi=80)


if __name__ == "__main__":
    main()
