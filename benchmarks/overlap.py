"""Overlapped collection and learning on a real simulator (issue 25, part 2).

FastPPO's ``learn_while_stepping`` puts mjlab's simulator in its own (forked)
process and runs each rollout's update while the simulator computes the next
rollout's first env steps (``rllib_fast/algorithms/ppo/overlap.py``). The part
asks two things of such a design at the same N and schedule as synchronous PPO:

* **the simulator never waits**: the whole training loop steps within 10% of the
  simulator's raw busy rate (``rate``: raw ``env.step`` with random actions,
  synchronous FastPPO and the overlapped FastPPO, whole ``train()`` iterations,
  in alternating rounds in one process, so machine drift cancels within a round;
  the ratio is the median of the per-round ratios);
* **the sample efficiency of synchronous PPO**: env steps to the target within
  15% of the synchronous arm's (``learn``: the median over seeds, an unreached
  seed counted as infinite).

Both arms are the task's shipped fast recipe (``tune_configs/mjlab-cartpole-
{task}-fast.yaml``) eager, with ``learn_while_stepping`` False and True; nothing
else differs. 10 s episodes (200 steps, maximum return 10), targets Balance 9.0
and Swingup 8.0 (the mean over the last 100 completed episodes, read after
every iteration). Time counts from building the algorithm, mjlab imported
before the clock (as every mjlab arm in ``benchmarks/``); the overlapped arm's
clock includes starting its simulator process.

    python benchmarks/overlap.py learn --tasks balance,swingup --seeds 0,1,2,3,4,5,6,7
    python benchmarks/overlap.py rate --tasks balance,swingup --rounds 6
    python benchmarks/overlap.py report

``learn`` runs each (task, arm, seed) in a fresh process, one at a time, and
appends to ``results/overlap_runs.jsonl`` (so seeds can be added later);
``rate`` writes ``results/overlap_rate.json``; ``report`` writes
``results/overlap.md``.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
# this folder holds benchmarks/mjlab.py, which would shadow the mjlab package
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.getcwd()) != HERE]
sys.path.insert(0, ROOT)
os.environ.setdefault("WARP_CACHE_PATH", os.path.join(ROOT, "build", "warp-cache"))
os.environ.setdefault("MJLAB_WARP_QUIET", "1")

RESULTS = os.path.join(HERE, "results")
RUNS_FILE = os.path.join(RESULTS, "overlap_runs.jsonl")
RATE_FILE = os.path.join(RESULTS, "overlap_rate.json")
REPORT_FILE = os.path.join(RESULTS, "overlap.md")
TASKS = {"balance": ("Mjlab-Cartpole-Balance", 9.0), "swingup": ("Mjlab-Cartpole-Swingup", 8.0)}
ARMS = ("sync", "overlap")
#: the part's goals: env steps at most this multiple of synchronous PPO's, loop rate at least this share of raw
SAMPLE_GOAL, RATE_GOAL = 1.15, 0.90
CAP_ENV_STEPS = 1_000_000


def recipe(task: str, arm: str) -> Dict[str, Any]:
    """The task's fast recipe as FastPPO keys (eager), with ``learn_while_stepping``
    set by the arm; ``num_envs`` included."""
    import yaml

    with open(os.path.join(ROOT, "tune_configs", f"mjlab-cartpole-{task}-fast.yaml")) as f:
        (exp,) = yaml.safe_load(f).values()
    keys = {k: v for k, v in exp["config"].items()
            if k not in ("env_config", "seed", "env_device", "evaluation_interval")}
    keys.update(compile=False, learn_while_stepping=(arm == "overlap"))
    return keys


def build(task: str, arm: str, seed: int):
    import torch
    from rllib_fast.algorithms.ppo import FastPPOConfig

    torch.set_num_threads(1)
    keys = recipe(task, arm)
    n = keys.pop("num_envs")
    name, _ = TASKS[task]
    return (FastPPOConfig().environment(f"mjlab:{name}", num_envs=n, env_config={"cfg": {"episode_length_s": 10.0}})
            .training(**keys).debugging(seed=seed).build_algo())


# ---------------------------------------------------------------------------
# learn: env steps and time to the target, one run per process
# ---------------------------------------------------------------------------
def one_run(task: str, arm: str, seed: int) -> Dict[str, Any]:
    import mjlab.tasks  # noqa: F401  (imported before the clock, as in every mjlab arm)

    _, target = TASKS[task]
    t0 = time.perf_counter()
    algo = build(task, arm, seed)
    startup = time.perf_counter() - t0
    n = algo.env.num_envs
    reached, steps, best = False, 0, float("-inf")
    try:
        while steps < CAP_ENV_STEPS:
            res = algo.train()
            steps = int(res["num_env_steps_sampled_lifetime"])
            ret = res["env_runners"].get("episode_return_mean")
            if ret is not None and ret == ret:
                best = max(best, float(ret))
                if ret >= target:
                    reached = True
                    break
        wall = time.perf_counter() - t0
    finally:
        algo.stop()
    return dict(task=task, arm=arm, seed=seed, n=n, reached=reached,
                env_steps=steps, time_s=round(wall, 2), startup_s=round(startup, 2),
                sps=round(steps / wall), best=round(best, 3), date=_now(), commit=_commit())


def learn(args) -> None:
    os.makedirs(RESULTS, exist_ok=True)
    for task in args.tasks.split(","):
        for seed in [int(s) for s in args.seeds.split(",")]:
            for arm in args.arms.split(","):
                out = subprocess.run([sys.executable, os.path.abspath(__file__), "_one", task, arm, str(seed)],
                                     capture_output=True, text=True)
                line = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
                if out.returncode or not line:
                    print(f"{task} {arm} seed {seed}: failed\n{out.stderr[-2000:]}", flush=True)
                    continue
                rec = json.loads(line[-1])
                with open(RUNS_FILE, "a") as f:
                    f.write(json.dumps(rec) + "\n")
                print(f"{task:8s} {arm:8s} seed {seed}: {'reached' if rec['reached'] else 'NOT reached'} "
                      f"{rec['env_steps']:,} env steps, {rec['time_s']} s (startup {rec['startup_s']} s)", flush=True)


# ---------------------------------------------------------------------------
# rate: raw simulator vs both loops, alternating rounds in one process
# ---------------------------------------------------------------------------
def rate(args) -> None:
    import mjlab.tasks  # noqa: F401
    import torch

    out = {"date": _now(), "commit": _commit(), "machine": _machine(), "rounds": args.rounds, "tasks": {}}
    for task in args.tasks.split(","):
        algos = {arm: build(task, arm, 0) for arm in ARMS}
        try:
            for algo in algos.values():
                for _ in range(args.warmup):
                    algo.train()
            env = algos["sync"].env
            n, horizon = env.num_envs, algos["sync"].horizon
            iters = max(1, args.env_steps // (n * horizon))
            shape = (n, *env.single_action_space.shape)
            per_round: Dict[str, List[float]] = {"raw": [], **{arm: [] for arm in ARMS}}
            # the raw arm's actions from a generator of its own: torch's global one is the algorithms' stream
            gen = torch.Generator().manual_seed(0)
            for r in range(args.rounds):
                actions = torch.rand(shape, generator=gen) * 2 - 1
                t = time.perf_counter()
                for _ in range(iters * horizon):
                    env.step(actions)
                per_round["raw"].append(iters * horizon * n / (time.perf_counter() - t))
                for arm, algo in algos.items():
                    t = time.perf_counter()
                    for _ in range(iters):
                        algo.train()
                    per_round[arm].append(iters * horizon * n / (time.perf_counter() - t))
                print(f"{task} round {r}: " + ", ".join(f"{k} {v[-1]:,.0f}" for k, v in per_round.items()), flush=True)
            out["tasks"][task] = dict(n=n, horizon=horizon, iters_per_round=iters, per_round=per_round)
        finally:
            for algo in algos.values():
                algo.stop()
    os.makedirs(RESULTS, exist_ok=True)
    with open(RATE_FILE, "w") as f:
        json.dump(out, f, indent=1)


# ---------------------------------------------------------------------------
# report
# ---------------------------------------------------------------------------
def median_steps(recs: List[Dict[str, Any]]) -> Optional[float]:
    """Median env steps to the target over seeds, an unreached seed counted as infinite
    (None when the median itself is unreached or there are no runs)."""
    if not recs:
        return None
    vals = sorted(r["env_steps"] if r["reached"] else float("inf") for r in recs)
    m = statistics.median(vals)
    return None if m == float("inf") else m


def paired(recs: List[Dict[str, Any]], task: str) -> Dict[str, List[Dict[str, Any]]]:
    """The task's runs per arm, restricted to the seeds both arms ran (last run of a seed wins)."""
    by: Dict[str, Dict[int, Dict[str, Any]]] = {arm: {} for arm in ARMS}
    for r in recs:
        if r["task"] == task and r["arm"] in by:
            by[r["arm"]][r["seed"]] = r
    seeds = sorted(set.intersection(*(set(v) for v in by.values()))) if all(by.values()) else []
    return {arm: [by[arm][s] for s in seeds] for arm in ARMS}


def rate_ratio(per_round: Dict[str, List[float]], arm: str) -> float:
    return statistics.median(a / r for a, r in zip(per_round[arm], per_round["raw"]))


def _k(x: Optional[float]) -> str:
    return "–" if x is None else f"{x / 1e3:.0f}k"


def report(args) -> str:
    recs = []
    if os.path.exists(RUNS_FILE):
        with open(RUNS_FILE) as f:
            recs = [json.loads(line) for line in f if line.strip()]
    lines = [f"# Overlapped collection and learning vs synchronous FastPPO on mjlab Cartpole (issue 25, part 2)", "",
             f"Generated {_now()} by `benchmarks/overlap.py report` ({_machine()}). Arms: the task's fast recipe "
             "(`tune_configs/mjlab-cartpole-<task>-fast.yaml`) eager, `learn_while_stepping` False (`sync`) or True "
             "(`overlap`: the simulator in a forked process, each update run in the shadow of the next rollout's "
             f"first env steps). Goals: env steps to the target at most {SAMPLE_GOAL}x the synchronous arm's (median "
             f"over the seeds both arms ran); whole-loop env-steps/s at least {RATE_GOAL:.0%} of the raw simulator's "
             "at the same N. 10 s episodes; targets Balance 9.0, Swingup 8.0.", ""]
    for task in TASKS:
        runs = paired(recs, task)
        if not runs["sync"]:
            continue
        lines += [f"## {task.capitalize()} (N={runs['sync'][0]['n']}, seeds "
                  f"{', '.join(str(r['seed']) for r in runs['sync'])})", "",
                  "| arm | reached | median env steps | per seed | median time to target (s) | startup (s) |",
                  "| :--- | ---: | ---: | :--- | ---: | ---: |"]
        for arm in ARMS:
            rs = runs[arm]
            times = sorted(r["time_s"] if r["reached"] else float("inf") for r in rs)
            lines.append(f"| {arm} | {sum(r['reached'] for r in rs)}/{len(rs)} | {_k(median_steps(rs))} | "
                         + ", ".join(_k(r["env_steps"]) if r["reached"] else "–" for r in rs)
                         + f" | {statistics.median(times):.1f} | {statistics.median(r['startup_s'] for r in rs):.1f} |")
        s, o = median_steps(runs["sync"]), median_steps(runs["overlap"])
        if s and o:
            verdict = "met" if o <= SAMPLE_GOAL * s else "not met"
            lines += ["", f"- Env steps, overlap / sync: **{o / s:.3f}x** (goal <= {SAMPLE_GOAL}x: {verdict})."]
        lines.append("")
    if os.path.exists(RATE_FILE):
        with open(RATE_FILE) as f:
            rt = json.load(f)
        lines += [f"## Loop rate against the raw simulator ({rt['date']}, {rt['rounds']} alternating rounds, "
                  f"commit {rt['commit']})", "",
                  "| task | N | T | raw env-steps/s | sync | overlap | sync / raw | overlap / raw | goal |",
                  "| :--- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | :--- |"]
        for task, t in rt["tasks"].items():
            pr = t["per_round"]
            med = {k: statistics.median(v) for k, v in pr.items()}
            ro = rate_ratio(pr, "overlap")
            lines.append(f"| {task} | {t['n']} | {t['horizon']} | {med['raw']:,.0f} | {med['sync']:,.0f} | "
                         f"{med['overlap']:,.0f} | {rate_ratio(pr, 'sync'):.2f} | **{ro:.2f}** | "
                         f"{'met' if ro >= RATE_GOAL else 'not met'} |")
        lines.append("")
    text = "\n".join(lines)
    os.makedirs(RESULTS, exist_ok=True)
    with open(REPORT_FILE, "w") as f:
        f.write(text)
    print(text)
    return text


def _now() -> str:
    return datetime.datetime.now().strftime("%Y-%m-%d %H:%M")


def _commit() -> str:
    try:
        return subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True).stdout.strip() or "?"
    except OSError:
        return "?"


def _machine() -> str:
    return f"{platform.machine()}, {os.cpu_count()} CPU cores, no GPU, 1 torch thread"


def main(argv: Optional[List[str]] = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_one"]:
        print(json.dumps(one_run(argv[1], argv[2], int(argv[3]))), flush=True)
        return
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    pl = sub.add_parser("learn")
    pl.add_argument("--tasks", default="balance,swingup")
    pl.add_argument("--arms", default=",".join(ARMS))
    pl.add_argument("--seeds", default="0,1,2,3,4,5,6,7")
    pr = sub.add_parser("rate")
    pr.add_argument("--tasks", default="balance,swingup")
    pr.add_argument("--rounds", type=int, default=6)
    pr.add_argument("--warmup", type=int, default=5)
    pr.add_argument("--env-steps", type=int, default=8192, help="env steps per arm per round")
    sub.add_parser("report")
    args = p.parse_args(argv)
    {"learn": learn, "rate": rate, "report": report}[args.cmd](args)


if __name__ == "__main__":
    main()
