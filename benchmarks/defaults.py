"""Do the defaults learn? Every algorithm x each built-in task of its kind, DEFAULT config.

Each run builds ``<Algo>Config().environment(task).debugging(seed=s)`` with
nothing else set, trains until the mean return reported by the algorithm
(``env_runners/episode_return_mean``, last 100 episodes, counted once 100
episodes have finished; populations: their reported return) reaches the task's threshold, or the wall-clock cap runs out,
and records env steps, wall-clock and CPU seconds (process + children) to the
threshold. Every run is its own child process (one torch thread), one after
another (``--jobs J``: J at a time, one core each), so runs do not share a core.

    python benchmarks/defaults.py                       # everything, seeds 0-2
    python benchmarks/defaults.py --algos FastPPO,PQL --tasks CartPole,Pendulum --seeds 0
    python benchmarks/defaults.py --replot              # rewrite docs/defaults.md from the JSON

Writes ``benchmarks/results/defaults.json`` (records merged by (algo, task,
seed), so partial runs accumulate) and the table ``docs/defaults.md``.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "results", "defaults.json")
DOC = os.path.join(ROOT, "docs", "defaults.md")

#: built-in task -> (kind, return threshold). Thresholds: gymnasium's "solved"
#: levels where it has one (CartPole-v1 475, Acrobot -100), the usual bars for
#: Pendulum (-200) and MountainCarContinuous (90).
TASKS: Dict[str, tuple] = {
    "CartPole": ("discrete", 475.0),
    "Acrobot": ("discrete", -100.0),
    "Pendulum": ("continuous", -200.0),
    "MountainCarContinuous": ("continuous", 90.0),
}
#: episodes that must have finished before a mean return counts (the window size)
MIN_EPISODES = 100
#: algorithm -> kinds of action space it supports.
ALGOS: Dict[str, tuple] = {
    "FastPPO": ("discrete", "continuous"),
    "FastA2C": ("discrete", "continuous"),
    "HTSPPO": ("discrete", "continuous"),
    "HTSA2C": ("discrete", "continuous"),
    "FastAPPO": ("discrete", "continuous"),
    "FastA3C": ("discrete", "continuous"),
    "FastDQN": ("discrete",),
    "Rainbow": ("discrete",),
    "EpsRainbow": ("discrete",),
    "PopDQN": ("discrete",),
    "PQL": ("continuous",),
    "DDPGN": ("continuous",),
    "SACN": ("continuous",),
    "PopTD3": ("continuous",),
    "PopSAC": ("continuous",),
    "CEMRL": ("continuous",),
    "DvD": ("continuous",),
}


def resource_fit(algo: str, cores: int) -> Dict[str, Any]:
    """The one non-learning setting a default run may need on a small machine:
    FastAPPO/FastA3C reserve one CPU per learner actor (8 / 4 by default), which a
    2-core machine cannot place; their learners then share the cores
    (``num_cpus_per_async_learner = cores / learners``). The learners, envs and
    hyperparameters stay the defaults'; the rows name the reservation."""
    from rllib_fast.algorithms import CONFIGS

    cfg = CONFIGS[algo]()
    n = getattr(cfg, "num_async_learners", None)
    if n is None or n * cfg.num_cpus_per_async_learner <= cores:
        return {}
    return {"num_cpus_per_async_learner": round(cores / n, 4)}


def pairs(algos: List[str], tasks: List[str]) -> List[tuple]:
    return [(a, t) for a in algos for t in tasks if TASKS[t][0] in ALGOS[a]]


def run_one(algo: str, task: str, seed: int, budget_s: float, overrides: Optional[Dict[str, Any]] = None
            ) -> Dict[str, Any]:
    """Child process: train ``algo`` with its defaults (plus ``overrides``, for
    comparing candidate defaults) on ``task`` until the threshold or the cap."""
    import torch

    torch.set_num_threads(1)
    import rllib_fast  # noqa: F401  (registers everything)
    from rllib_fast.algorithms import CONFIGS

    threshold = TASKS[task][1]
    cfg = CONFIGS[algo]().environment(task).debugging(seed=seed)
    fit = resource_fit(algo, os.cpu_count() or 1)
    if fit or overrides:
        cfg = cfg.training(**fit, **(overrides or {}))
    t0, c0 = time.perf_counter(), _cpu()
    algo_obj = cfg.build_algo()
    rec: Dict[str, Any] = dict(algo=algo, task=task, seed=seed, threshold=threshold, budget_s=budget_s,
                               reached=False, best=None, iterations=0, overrides=overrides or {},
                               resources=fit)
    try:
        while time.perf_counter() - t0 < budget_s:
            r = algo_obj.train()
            rec["iterations"] += 1
            ret = r.get("env_runners", {}).get("episode_return_mean")
            steps = r.get("num_env_steps_sampled_lifetime", 0)
            if ret is not None and ret == ret:
                rec["best"] = ret if rec["best"] is None else max(rec["best"], ret)
            rec["env_steps"] = int(steps)
            # the mean must be over a full window of 100 episodes: on a task whose early
            # episodes end only on success (MountainCarContinuous) the first few finished
            # episodes are the lucky ones, and their mean says nothing about the policy
            full = r.get("env_runners", {}).get("num_episodes_lifetime", MIN_EPISODES) >= MIN_EPISODES
            if ret is not None and ret >= threshold and full:
                rec.update(reached=True, env_steps=int(steps), wall_s=time.perf_counter() - t0, cpu_s=_cpu() - c0)
                break
        else:
            rec.update(wall_s=time.perf_counter() - t0, cpu_s=_cpu() - c0)
    finally:
        algo_obj.stop()
    return rec


def _cpu() -> float:
    """CPU seconds of this process, its reaped children and its live
    descendants (Ray's raylet and worker processes, e.g. FastAPPO's learner
    actors, live until the process ends and are never reaped before this)."""
    import psutil

    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    live = 0.0
    for p in psutil.Process().children(recursive=True):
        try:
            t = p.cpu_times()
            live += t.user + t.system
        except psutil.Error:
            pass
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime + live


def _spawn(algo: str, task: str, seed: int, budget_s: float, overrides: Optional[Dict[str, Any]] = None
           ) -> Dict[str, Any]:
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    cmd = [sys.executable, os.path.abspath(__file__), "--one", algo, task, str(seed), str(budget_s),
           json.dumps(overrides or {})]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=budget_s + 240, env=env)
    except subprocess.TimeoutExpired:
        return dict(algo=algo, task=task, seed=seed, error=f"no result within {budget_s + 240:g} s")
    for line in reversed(out.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    err = (out.stderr.strip().splitlines() or ["(no output)"])[-1]
    return dict(algo=algo, task=task, seed=seed, error=err[:300])


def _load() -> Dict[str, Any]:
    if os.path.exists(RESULTS):
        with open(RESULTS) as f:
            return json.load(f)
    return {"meta": {}, "records": []}


def _merge(old: List[Dict[str, Any]], new: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    key = lambda r: (r["algo"], r["task"], r["seed"])  # noqa: E731
    merged = {key(r): r for r in old}
    merged.update({key(r): r for r in new})
    return sorted(merged.values(), key=lambda r: (list(ALGOS).index(r["algo"]) if r["algo"] in ALGOS else 99,
                                                  list(TASKS).index(r["task"]) if r["task"] in TASKS else 99,
                                                  r["seed"]))


def _fmt(xs: List[float], spec: str) -> str:
    if not xs:
        return "–"
    med = statistics.median(xs)
    return (format(med, spec) if len(xs) == 1
            else f"{format(med, spec)} [{format(min(xs), spec)}–{format(max(xs), spec)}]")


#: why the defaults are what they are, and where they do not learn (kept with the table it explains)
DECISIONS = """## What the defaults are, and where they do not reach the threshold

* **FastPPO**: rsl_rl's / Isaac Lab's PPO recipe -- lr 1e-3 held near an epoch KL of 0.01, 5 epochs
  x 4 minibatches, value loss clipped at 0.2 -- at 64 envs x 64 steps. Without the clip the three
  classic tasks learn in 1.2-1.3x fewer env steps (candidate "ppo-no-vf-clip" in
  `benchmarks/results/defaults_candidates.json`), but mjlab's Cartpole balance (rsl_rl-style run of
  `tests/envs/test_mjlab.py`) then stalls at a mean return of 36 where the clipped run reaches 45:
  the clip stays, for the simulator tasks these defaults are for.
  Two on-policy defaults are for simulators and leave these rows unchanged: `normalize_obs='auto'`
  follows the source's advice (mjlab: the task's rsl_rl config, off for Cartpole; the built-in tasks
  give none: normalised), and the start-state decorrelation's random-action phase is bounded to
  32,768 env steps (the whole time limit at these tasks' default N). With both, FastPPO's defaults
  reach 45 on mjlab's Cartpole balance at N=256 (`docs/sources.md`). The decorrelation was also
  measured as clocks only (candidate "clocks-only-decorrelation-as-default", every on-policy row,
  seeds 0-2): no better here (FastPPO CartPole 5.6 s vs 4.2 s, FastA2C Pendulum 1/3 seeds).
  **HTSPPO** has FastPPO's defaults (its value clip acts on the behaviour snapshot's values, as the
  released HTS-RL code's). Until 2026-11-26 it kept the PPO settings it was first measured with
  (16 envs x 32 steps, lr 3e-4, 4 epochs, no KL target): at about 3k env-steps/s (a thread hand-off
  per step for 16 envs) they reached CartPole in 1 seed of 3 and Pendulum in none within 60 s, but
  Acrobot and MountainCarContinuous in 3 of 3. With FastPPO's defaults CartPole and Pendulum go to
  3/3 (median 8.4 s / 12.9 s), Acrobot to 2/3 (seed 0 stays at -500; an entropy bonus of 0.01 gets
  it to -100 in 27 s) and MountainCarContinuous to 0/3.
  MountainCarContinuous is a sparse-reward exploration task: once an env reaches the goal the
  policy learns it within seconds, but FastPPO's defaults find it in no seed of 3 within 60 s
  (1 of 3 without the value clip); FastA2C's defaults, whose entropy bonus keeps the policy
  wide, find it in 2 of 3 (about 3.2M env steps, 50 s). An exploration bonus is the usual
  remedy, not a schedule.
* **FastA2C / HTSA2C**: the A2C reference's RMSProp (alpha 0.99, eps 1e-5), 5 steps per env and entropy
  bonus 0.01, at 64 envs with the paper's square-root lr rule (7e-4 at the reference's 16 envs x 5
  steps, so 1.4e-3 at 64 x 5). Until 2026-11-26 the defaults were the reference's 16 envs at a fixed
  7e-4 (FastA2C: CartPole 14.8 s, Acrobot 17.2 s, Pendulum 1 seed of 3, MountainCarContinuous none,
  60 s cap). The new defaults trade env steps for wall-clock (CartPole 160k -> 523k env steps,
  Acrobot 150k -> 389k): on a simulator whose steps are expensive, the reference's 16 envs at a
  fixed 7e-4 (`num_envs=16, lr_rule='none'`) is the more sample-efficient setting. Screened on Pendulum, seeds 0-2 (`defaults_candidates.json`): 64 envs at 7e-4 3/3
  (38.7 s), 64 envs + the sqrt rule 3/3 (24.0 s), no entropy bonus 3/3 (45.9 s), GAE lambda 0.95
  2/3. The entropy bonus stays: without it ("a2c-64envs-sqrt-ent0") CartPole, Acrobot and Pendulum
  were 10-25% faster still, but it is the reference's value for image and sparse tasks.
  FastA3C keeps a fixed lr (`lr_rule='none'`, its 4 learners x 16 envs are the paper's layout).
  HTSA2C went from CartPole 3/3, Acrobot 0/3, Pendulum 0/3 to 3/3, 3/3, 1/3. It runs at about
  19k env-steps/s here (four executor threads and the learner share 2 cores) against FastA2C's
  ~60k, and Pendulum takes A2C 1-1.7M env steps: its Pendulum and MountainCarContinuous rows are
  limited by throughput within 60 s, not by the settings (the same settings reach them under
  FastA2C).
* **FastDQN**: the settings measured to learn CartPole and Acrobot within a minute on one core
  (training intensity 4, batch 128, lr 1e-3, hard target copy every 200 updates, 3-step returns,
  [128, 128], epsilon 1 -> 0.02 over 10k env steps). The former defaults leaned on the paper's Atari
  values (intensity 8, target every 500 updates, 1-step, [256, 256], lr 5e-4) and reached 188 on
  CartPole in 60 s; image-task settings are written out in `benchmarks/dqn.py` (MinAtar).
* **Rainbow / EpsRainbow**: the same, with lr 5e-4, soft target updates (tau 0.01), PER beta annealed
  over 50k env steps and a C51 support of [-100, 100], which covers CartPole's (<= 100) and Acrobot's
  (>= -100) discounted returns and Atari's clipped ones; the paper's [-10, 10] leaves the classic
  tasks' returns off the support. The preset `preset("Rainbow", "CartPole")` narrows it to [0, 100].
  Rainbow's noisy nets act with one noise draw per env (`noise_per_env`), and C51 priorities are the
  KL divergence, as Rainbow prioritises. Rainbow's rows are measured with a 150 s cap: on CartPole
  it learns steadily (training and greedy returns rise together, no collapse) but needs about
  220k-300k env steps, and its per-update cost (noisy C51 heads, PER) holds it to ~3k env-steps/s on
  one core, so no seed got there within 60 s. Per-env against shared draws made no clear
  difference on CartPole within 60 s (best 255-283 against 197-295, candidates
  "rainbow-noise-per-env" / "rainbow-shared-noise-kl", both measured while tests ran on the other
  core); Acrobot went from 2/3 seeds within 60 s to 3/3 with per-env draws and KL priorities
  together. Candidates that did not help within 60 s (seeds 0-2, before those two changes,
  `benchmarks/results/defaults_candidates.json`): training intensity 2, batch 256, lr 1e-3, noisy
  sigma0 0.1 (1/3 seeds with lr 1e-3 and sigma0 0.1 together).
* **PQL / DDPGN / SACN**: the paper's settings, sized by `"auto"` from the env (batch 2N, replay
  1221N, [512, 256, 128] networks for observations of 16+ dims). They are built for thousands of GPU
  envs, and on this CPU they need about a minute on Pendulum, so their Pendulum rows use a 180 s
  cap: all three reach -200 in 3/3 seeds at a median of 115k env steps; PQL, whose Actor,
  V-learner and P-learner run concurrently, gets there first (median 54.5 s wall-clock, 76 CPU s)
  against DDPGN's 64.9 s and SACN's 68.3 s. `preset(algo, "Pendulum")` holds CPU-sized settings.
  MountainCarContinuous (seed 0, 60 s) is not reached: sparse reward, as for the on-policy rows.
* **Populations (PopTD3, PopSAC, PopDQN, CEMRL, DvD)**: K members trained in one program (K = 4 for
  PopTD3/PopSAC/PopDQN, 10 for CEMRL, 5 for DvD), one update per member env step, as in the paper.
  Their networks are `hidden_sizes='auto'`: the paper's [256, 256] for observations of 16+ dims,
  [128, 128] below (the rule PQL's 'auto' uses, with its own large size). With [256, 256] on
  Pendulum PopTD3 ran at 77 env-steps/s on one core and reached -1,019 to -1,448 in its first 10k
  env steps (no seed reached -200 within 60 s); with [128, 128] it runs at about 245 env-steps/s
  and PopTD3/PopSAC reach -200 in 3/3 seeds, DvD in seed 0 (rows above, 240 s cap, 2 runs at a
  time). The return is the best member's fitness (mean of its last 10 episodes). CEMRL's row is not
  reached by the table's rule, which counts a mean only once 100 episodes have finished: a CEMRL
  generation is one evaluation episode per member (10) plus as many TD3 steps as env steps, about
  32 s on one core, so 240 s held 9 generations, 90 episodes; its best member's return (-1.2) was
  above the threshold by then. PopDQN ([64, 64], 150 s cap, one run at a time) reaches CartPole
  in 3 seeds of 3 (median 68.0 s, 197k env steps) and Acrobot in 3 of 3 (19.6 s, 47k). Its four
  members start from hyperparameters drawn from the mutation prior (`pbt_init='sample'`: lr 3e-5
  to 3e-3, gamma 0.9 to 1.0, ...), and in-trial PBT replaces the worst member every 2,000 updates
  per member (`pbt_interval='auto'`, PopDQN's default since 2026-11-26). Without it (the earlier
  default, `pbt_interval=None`) a seed whose draws held no good CartPole member did not recover:
  CartPole 1 of 3 (seeds 1 and 2 stopped at 320 and 218 in 150 s) and Acrobot 3 of 3 at a median
  47.8 s (114k env steps). 'auto' needs a member to replace: a round replaces max(1,
  floor(`pbt_fraction` * K)), so populations of 2 or 3 replace one, and one member runs without
  PBT. PopTD3/PopSAC keep it off (no interval measured for them here). On a GPU the K members cost
  about one member's time (`benchmarks/population.py`).
* **FastAPPO / FastA3C** ask for 8 / 4 learner processes with one CPU each by default (the paper's
  layouts). On this 2-core machine their rows run the defaults with the learners sharing the
  cores (`num_cpus_per_async_learner` 0.25 / 0.5, the one setting `resource_fit` changes; without
  it the build stops with a one-line error naming the key), so each learner steps its 8 / 16 envs
  at a quarter / half of a core and the wall-clock includes starting the actors (about 20 s / 10 s).
  FastAPPO (the paper's PPO at lr 3e-4 / 4, 4 epochs, no KL schedule) reaches Acrobot in 3 of 3
  (43 s) and MountainCarContinuous in 2 of 3 (59 s; FastPPO's defaults in none), but CartPole
  stops at 459-469 and Pendulum at -288 to -353 within 120 s. FastA3C reaches CartPole (58.7 s)
  and Acrobot (23.3 s) in 3 of 3, MountainCarContinuous in 1 of 3 (85 and 88 in the others);
  Pendulum stays at -790 to -1060 in 120 s (FastA2C's 64 envs at the sqrt-rule lr reach it; A3C's
  16-env units at a fixed 7e-4 are the paper's). These defaults stay the paper's: they are for
  machines with a core per learner, where the learners do not take turns on two cores;
  `benchmarks/multi_learner.py` measures them with 1 and 2 learners.
"""


def table(records: List[Dict[str, Any]], meta: Dict[str, Any]) -> str:
    groups: Dict[tuple, List[Dict[str, Any]]] = {}
    fitted: Dict[str, Dict[str, Any]] = {}
    for r in records:
        groups.setdefault((r["algo"], r["task"]), []).append(r)
    lines = ["# Default configurations: do they learn?", "",
             "Every algorithm with **its default config** (`<Algo>Config().environment(task)`, nothing else set) "
             "on each built-in task of its kind. Env steps, wall-clock and CPU seconds (process and children) "
             "until the algorithm's reported mean return reaches the threshold; median [min–max] over the seeds "
             "that reached it. Each run is its own process with one torch thread; at most one run per core at a time. "
             "Written by `python benchmarks/defaults.py`.", "",
             f"Machine: {meta.get('machine', '?')}; last run {meta.get('date', '?')}"
             + (f"; note: {meta['note']}" if meta.get("note") else "") + ".", "",
             "| algorithm | task (threshold) | reached | env steps | wall-clock s | CPU s | best return (not reached) |",
             "| :--- | :--- | :--- | ---: | ---: | ---: | :--- |"]
    for (algo, task), rs in groups.items():
        ok = [r for r in rs if r.get("reached")]
        failed = [r for r in rs if not r.get("reached")]
        errs = [r["error"] for r in rs if r.get("error")]
        seeds = ",".join(str(r["seed"]) for r in rs)
        best = ", ".join(f"{r['best']:.1f} in {r.get('wall_s', 0):.0f} s" for r in failed if r.get("best") is not None)
        if errs:
            best = (best + "; " if best else "") + "error: " + errs[0]
        fit = next((r["resources"] for r in rs if r.get("resources")), None)
        if fit:
            fitted[algo] = fit
        lines.append(f"| {algo}{'†' if fit else ''} | {task} ({TASKS.get(task, ('', '?'))[1]:g}) | {len(ok)}/{len(rs)} (seeds {seeds}) | "
                     f"{_fmt([r['env_steps'] for r in ok], ',.0f')} | {_fmt([r['wall_s'] for r in ok], '.1f')} | "
                     f"{_fmt([r['cpu_s'] for r in ok], '.1f')} | {best or '–'} |")
    if fitted:
        lines += ["", "† learner actors share this machine's cores, nothing else changed: "
                  + ", ".join(f"{a} " + ", ".join(f"`{k}` = {v:g}" for k, v in fit.items())
                              for a, fit in fitted.items()) + " (`resource_fit`)."]
    measured = {(r["algo"], r["task"]) for r in records}
    missing = [f"{a} × {t}" for a, t in pairs(list(ALGOS), list(TASKS)) if (a, t) not in measured]
    if missing:
        lines += ["", "Not measured yet: " + ", ".join(missing) + "."]
    return "\n".join(lines + ["", DECISIONS]) + "\n"


def _candidates(todo: List[tuple], overrides: Dict[str, Any], args: Any) -> None:
    """Runs with ``overrides`` on top of the defaults, saved apart from the defaults' record."""
    path = os.path.join(HERE, "results", "defaults_candidates.json")
    data = json.load(open(path)) if os.path.exists(path) else {}
    runs = data.setdefault(args.label, {"overrides": overrides, "records": []})
    for i, (a, t, s) in enumerate(todo, 1):
        rec = _spawn(a, t, s, args.budget, overrides)
        runs["records"] = [r for r in runs["records"] if (r["algo"], r["task"], r["seed"]) != (a, t, s)] + [rec]
        status = (f"reached in {rec['wall_s']:.1f} s / {rec['env_steps']:,} steps" if rec.get("reached")
                  else rec.get("error") or f"best {rec.get('best')}")
        print(f"[{args.label} {i}/{len(todo)}] {a:10s} {t:22s} seed {s}: {status}", flush=True)
        with open(path, "w") as f:
            json.dump(data, f, indent=1)
    for (a, t) in sorted({(a, t) for a, t, _ in todo}):
        rs = [r for r in runs["records"] if (r["algo"], r["task"]) == (a, t)]
        ok = [r for r in rs if r.get("reached")]
        print(f"{args.label}: {a} {t}: {len(ok)}/{len(rs)} reached; median wall "
              f"{_fmt([r['wall_s'] for r in ok], '.1f')} s, env steps {_fmt([r['env_steps'] for r in ok], ',.0f')}")


def main(argv: Optional[List[str]] = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--one"]:
        algo, task, seed, budget = argv[1], argv[2], int(argv[3]), float(argv[4])
        overrides = json.loads(argv[5]) if len(argv) > 5 else {}
        print(json.dumps(run_one(algo, task, seed, budget, overrides)), flush=True)
        return
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--algos", default=",".join(ALGOS))
    p.add_argument("--tasks", default=",".join(TASKS))
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--budget", type=float, default=120.0, help="wall-clock cap per run, seconds")
    p.add_argument("--jobs", type=int, default=1,
                   help="runs at a time (each a child process with one torch thread; keep <= CPU cores)")
    p.add_argument("--note", default="", help="free text recorded with the run (e.g. machine load)")
    p.add_argument("--replot", action="store_true", help="only rewrite docs/defaults.md from the JSON")
    p.add_argument("--dry-run", action="store_true", help="list the runs and exit")
    p.add_argument("--set", default="", metavar="JSON",
                   help="candidate defaults to compare (e.g. '{\"lr\": 1e-3}'); results go to "
                        "results/defaults_candidates.json under --label, docs/defaults.md is not touched")
    p.add_argument("--label", default="candidate")
    args = p.parse_args(argv)
    data = _load()
    if not args.replot:
        algos = [a for a in args.algos.split(",") if a]
        tasks = [t for t in args.tasks.split(",") if t]
        for name, known in (("algos", ALGOS), ("tasks", TASKS)):
            bad = [x for x in (algos if name == "algos" else tasks) if x not in known]
            if bad:
                raise SystemExit(f"--{name}: unknown {bad}; allowed: {', '.join(known)}")
        seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
        todo = [(a, t, s) for a, t in pairs(algos, tasks) for s in seeds]
        if args.dry_run:
            for a, t, s in todo:
                print(a, t, s)
            return
        overrides = json.loads(args.set) if args.set else None
        if overrides:
            return _candidates(todo, overrides, args)
        from concurrent.futures import ThreadPoolExecutor, as_completed

        # --jobs children at a time, each with one torch thread: with jobs <= cores no two share a core
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            futures = {pool.submit(_spawn, a, t, s, args.budget): (a, t, s) for a, t, s in todo}
            for i, fut in enumerate(as_completed(futures), 1):
                (a, t, s), rec = futures[fut], fut.result()
                status = (f"reached {TASKS[t][1]:g} in {rec['wall_s']:.1f} s / {rec['env_steps']:,} steps"
                          if rec.get("reached") else rec.get("error")
                          or f"best {rec.get('best')} (cap {args.budget:g} s)")
                print(f"[{i}/{len(todo)}] {a:10s} {t:22s} seed {s}: {status}", flush=True)
                data["records"] = _merge(data["records"], [rec])
                os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
                with open(RESULTS, "w") as f:
                    json.dump(data, f, indent=1)
        data["meta"] = dict(date=datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
                            machine=f"{platform.machine()}, {os.cpu_count()} CPU cores, no GPU, "
                                    f"Python {platform.python_version()}", note=args.note)
        with open(RESULTS, "w") as f:
            json.dump(data, f, indent=1)
    md = table(data["records"], data.get("meta", {}))
    with open(DOC, "w") as f:
        f.write(md)
    print("\n" + md)


if __name__ == "__main__":
    main()
