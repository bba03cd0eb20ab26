"""HTS-RL benchmark: throughput vs sync interval alpha and step-time variance,
learning curves vs wall-clock, and scores across actor counts.

Part 1 (the paper's central claim, its Fig. 4: throughput vs step-time variance): 16 executors, each
stepping one zero-cost env (``NullEnv``) wrapped in :class:`VariableTimeEnv` (a sleep per
step drawn with mean ``--mean-ms`` and std ``k * mean`` for several ``k``:
constant, shifted exponential, exponential, gamma). HTSPPO/HTSA2C at
alpha in {1, 4, 16, 64, 128, 256} against synchronous FastPPO/FastA2C on the
*same* 16 envs stepped by 16 threads with a barrier after every step
(``ExecutorGroupEnv(parallel=True)``) and rollout length alpha (same batch,
same learner). SPS is measured over ``training_step`` calls after one
warm-up iteration (excludes RLlib's per-``train()`` bookkeeping for both).

Part 2: learning curves vs wall-clock on CartPole with exponential step
times (64 envs in ``--learn-executors`` executors): HTSPPO vs FastPPO, and HTSPPO with 1, 2 and 4
actors from one seed (the returns must be identical: full determinism).

Part 3 (``--part minatar``): learning curves vs wall-clock and vs env steps
on MinAtar Breakout (a CPU-stepped source): HTSA2C vs FastA2C and HTSPPO vs
FastPPO with identical hyperparameters, num_envs and wall-clock budget
(``--minatar-budget-s``, default 120 s per arm). HTS uses process executors
(``executor_processes=True``: one simulator process per executor); the
synchronous baseline runs the same envs in the same number of simulator
processes (``ParallelEnvCreator``), and FastA2C also in-process (the default
path). It merges into the existing results (SPS / CartPole sections kept).

Sleep-based envs burn no CPU, so the numbers are about scheduling and are
fairly robust to other load on the machine -- but executor bookkeeping is
Python and does use CPU, so label results taken on a busy machine.

    python benchmarks/hts.py                # everything (~10 min on 2 cores)
    python benchmarks/hts.py --quick        # fewer alphas / variances
    python benchmarks/hts.py --part sps     # or: learn
    python benchmarks/hts.py --part minatar # part 3 (~10 min): merged into the existing results
Writes benchmarks/results/hts.{md,json,png}.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time
from typing import Any, Dict, List

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _harness import save_json  # noqa: E402
from _report import markdown_table  # noqa: E402

from rllib_fast.algorithms.a2c import FastA2CConfig  # noqa: E402
from rllib_fast.algorithms.hts import HTSA2CConfig, HTSPPOConfig  # noqa: E402
from rllib_fast.algorithms.hts.executors import ExecutorGroupEnv  # noqa: E402
from rllib_fast.algorithms.ppo import FastPPOConfig  # noqa: E402
from rllib_fast.envs import Step, TensorVecEnv  # noqa: E402
from rllib_fast.core.seeding import worker_seed  # noqa: E402
from rllib_fast.envs.variable_time import VariableTimeCreator, VariableTimeEnv  # noqa: E402

ALPHAS = (1, 4, 16, 64, 128, 256)
# (label, std/mean, distribution)
VARIANCES = (("constant", 0.0, "constant"), ("exp std=m", 1.0, "exponential"), ("gamma std=2m", 2.0, "gamma"))


class NullEnv(TensorVecEnv):
    """A task that costs nothing to step (constant observation, reward 1, an
    episode ends every 100 steps): part 1 measures scheduling, so the only
    step cost should be the VariableTimeEnv sleep (a CartPole step costs
    ~0.2 ms of Python per call, which 16 executors would serialise on the GIL)."""

    def __init__(self, num_envs: int, device: Any = "cpu", seed: Any = None):
        import gymnasium as gym
        import numpy as np

        self.num_envs, self.device = int(num_envs), torch.device(device)
        self.single_observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
        self.single_action_space = gym.spaces.Discrete(2)
        self.max_episode_steps = 100
        self._obs = torch.zeros(self.num_envs, 4)
        self._r = torch.ones(self.num_envs)
        self._f = torch.zeros(self.num_envs, dtype=torch.bool)
        self._t = 0

    def reset(self, seed=None):
        return self._obs

    def step(self, actions):
        self._t += 1
        trunc = self._f if self._t % 100 else ~self._f
        return Step(self._obs, self._r, self._f, trunc, self._obs)


def null_env(ctx) -> NullEnv:
    return NullEnv(int(dict(ctx)["num_envs"]))


class SleepCreator:
    """``VariableTimeEnv(NullEnv)`` from an env context (seeded sleep RNG)."""

    def __init__(self, mean_s: float, std_s: float, distribution: str):
        self.mean_s, self.std_s, self.distribution = mean_s, std_s, distribution

    def __call__(self, ctx) -> VariableTimeEnv:
        ctx = dict(ctx)
        seed = ctx.get("seed")
        return VariableTimeEnv(null_env(ctx), self.mean_s, self.std_s, self.distribution,
                               seed=None if seed is None else [int(seed), 0x5EE9])


class SyncExecutors:
    """Env creator for the synchronous baselines: ``executors`` VariableTimeEnv
    parts stepped concurrently with a barrier after every step."""

    def __init__(self, name: str, executors: int, mean_s: float, std_s: float, distribution: str):
        self.name, self.E = name, executors
        self.creator = (SleepCreator(mean_s, std_s, distribution) if name == "null"
                        else VariableTimeCreator(name, mean_s, std_s, distribution))

    def __call__(self, ctx) -> ExecutorGroupEnv:
        ctx = dict(ctx)
        n, seed = int(ctx["num_envs"]) // self.E, ctx.get("seed")
        parts = [self.creator({**ctx, "num_envs": n, "seed": worker_seed(seed, e)}) for e in range(self.E)]
        return ExecutorGroupEnv(parts, parallel=True)


def build(kind: str, alpha: int, mean_s: float, k: float, dist: str, *, executors: int = 16, slots: int = 1,
          seed: int = 0, min_steps: int = 2048, **extra):
    n = executors * slots
    std = k * mean_s
    common = dict(decorrelate_steps=0, validate_env_on_setup=False, **extra)
    if kind in ("HTSPPO", "HTSA2C"):
        cfg = HTSPPOConfig() if kind == "HTSPPO" else HTSA2CConfig()
        rounds = max(1, math.ceil(min_steps / (alpha * n)))
        cfg = cfg.environment(SleepCreator(mean_s, std, dist), num_envs=n).training(
            num_executors=executors, sync_interval=alpha, rounds_per_iteration=rounds, **common)
    else:
        cfg = FastPPOConfig() if kind == "FastPPO" else FastA2CConfig()
        cfg = cfg.environment(SyncExecutors("null", executors, mean_s, std, dist), num_envs=n).training(
            rollout_length=alpha, **common)
    return cfg.debugging(seed=seed).build_algo()


def steps_of(algo) -> float:
    return algo.metrics.peek("num_env_steps_sampled_lifetime", default=0)


def measure_sps(kind: str, alpha: int, mean_s: float, k: float, dist: str, min_steps: int) -> Dict[str, Any]:
    torch.set_num_threads(1)
    algo = build(kind, alpha, mean_s, k, dist, min_steps=min_steps)
    try:
        if kind.startswith("HTS"):
            algo.train()                              # round 0 fills the pipeline (nothing to learn yet)
        s0, t0 = steps_of(algo), time.perf_counter()
        idle = []
        while steps_of(algo) - s0 < min_steps:
            algo.training_step()
            if kind.startswith("HTS"):
                idle.append((algo.metrics.peek(("hts", "learner_idle_fraction")),
                             algo.metrics.peek(("hts", "executor_idle_fraction"))))
        dt = time.perf_counter() - t0
        out = {"kind": kind, "alpha": alpha, "k": k, "dist": dist, "sps": (steps_of(algo) - s0) / dt,
               "steps": steps_of(algo) - s0, "seconds": dt}
        if idle:
            out["learner_idle"], out["executor_idle"] = idle[-1]
        return out
    finally:
        algo.stop()


def part_sps(args) -> List[Dict[str, Any]]:
    alphas = (1, 16, 64, 256) if args.quick else ALPHAS
    variances = VARIANCES[1:] if args.quick else VARIANCES
    rows = []
    pairs = [("HTSPPO", "FastPPO"), ("HTSA2C", "FastA2C")]
    for label, k, dist in variances:
        for hts, sync in pairs:
            if sync == "FastA2C" and label != "gamma std=2m":
                continue                               # A2C: the highest-variance setting only
            for alpha in alphas:
                r_h = measure_sps(hts, alpha, args.mean_ms / 1e3, k, dist, args.min_steps)
                r_s = measure_sps(sync, alpha, args.mean_ms / 1e3, k, dist, args.min_steps)
                row = {"variance": label, "pair": f"{hts}/{sync}", "alpha": alpha, "hts_sps": r_h["sps"],
                       "sync_sps": r_s["sps"], "speedup": r_h["sps"] / r_s["sps"],
                       "learner_idle": r_h.get("learner_idle"), "executor_idle": r_h.get("executor_idle")}
                rows.append(row)
                print(f"{label:14s} {hts:6s} alpha={alpha:4d}  HTS {row['hts_sps']:7.0f}  sync {row['sync_sps']:7.0f}"
                      f"  x{row['speedup']:.2f}  learner idle {row['learner_idle']:.2f}"
                      f"  executor idle {row['executor_idle']:.2f}", flush=True)
    return rows


def learning_curve(kind: str, actors: int, args) -> Dict[str, Any]:
    torch.set_num_threads(1)
    mean = args.learn_mean_ms / 1e3
    common = dict(lr=1e-3, adaptive_lr_kl_target=0.01, decorrelate_steps=50)
    if kind == "HTSPPO":
        cfg = HTSPPOConfig().environment(VariableTimeCreator("CartPole", mean, mean), num_envs=64).training(
            num_executors=args.learn_executors, num_actors=actors, sync_interval=64, rounds_per_iteration=2,
            **common)
    else:
        cfg = FastPPOConfig().environment(SyncExecutors("CartPole", args.learn_executors, mean, mean, "exponential"),
                                          num_envs=64).training(rollout_length=64, **common)
    t0 = time.perf_counter()
    algo = cfg.debugging(seed=args.seed).build_algo()
    curve, params = [], None
    try:
        while True:
            r = algo.train()
            t = time.perf_counter() - t0
            ret = r["env_runners"].get("episode_return_mean", float("nan"))
            curve.append((t, r["num_env_steps_sampled_lifetime"], ret))
            if (ret == ret and ret >= 475) or t > args.learn_budget_s:
                break
        params = torch.cat([p.detach().flatten() for p in algo.module.parameters()])
    finally:
        algo.stop()
    reached = next(((t, s) for t, s, ret in curve if ret == ret and ret >= 475), (None, None))
    return {"kind": kind, "actors": actors, "curve": curve, "time_to_475": reached[0], "steps_to_475": reached[1],
            "final_return": curve[-1][2], "param_checksum": float(params.double().sum()) if params is not None
            else None, "params": params}


def part_learn(args) -> List[Dict[str, Any]]:
    runs = [learning_curve("FastPPO", 1, args)]
    for actors in (1, 2, 4):
        runs.append(learning_curve("HTSPPO", actors, args))
    for r in runs:
        print(f"{r['kind']:7s} actors={r['actors']}  time to 475: {r['time_to_475']}  steps: {r['steps_to_475']}"
              f"  final {r['final_return']:.1f}", flush=True)
    hts = [r for r in runs if r["kind"] == "HTSPPO"]
    same = all(torch.equal(hts[0]["params"], r["params"]) and
               [c[1:] for c in hts[0]["curve"]] == [c[1:] for c in r["curve"]][:len(hts[0]["curve"])]
               for r in hts[1:] if len(r["curve"]) == len(hts[0]["curve"]))
    for r in runs:
        r.pop("params")
    print("identical returns and parameters across 1/2/4 actors:", same)
    return runs, same


# -- part 3: MinAtar learning curves vs wall-clock ------------------------------------------------------------
MINATAR_ARMS = {
    # arm: (algorithm, env layout). "procs": one simulator process per executor / worker (ParallelVecEnv);
    # "inproc": the default in-process MinAtarVecEnv stepped by the learner's thread.
    "a2c": (("FastA2C", "inproc"), ("FastA2C", "procs"), ("HTSA2C", "procs")),
    "ppo": (("FastPPO", "procs"), ("HTSPPO", "procs")),
}


class FlatObs(TensorVecEnv):
    """Presents an image source with flat observations (the synchronous
    baselines' MLP storage expects them; HTS stores observations flat itself).
    A reshape per step: no copy, no cost worth measuring."""

    def __init__(self, env: TensorVecEnv):
        import gymnasium as gym
        import numpy as np

        self.env, self.num_envs, self.device = env, env.num_envs, env.device
        space = env.single_observation_space
        self.single_observation_space = gym.spaces.Box(
            np.asarray(space.low, np.float32).reshape(-1), np.asarray(space.high, np.float32).reshape(-1),
            dtype=np.float32)
        self.single_action_space = env.single_action_space
        self.max_episode_steps = getattr(env, "max_episode_steps", None)

    def _flat(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(x.shape[0], -1)

    def reset(self, seed=None):
        return self._flat(self.env.reset(seed=seed))

    def step(self, actions):
        s = self.env.step(actions)
        return Step(self._flat(s.obs), s.reward, s.terminated, s.truncated, self._flat(s.final_obs), s.valid,
                    s.extras)

    def get_state(self):
        return self.env.get_state() if hasattr(self.env, "get_state") else None

    def set_state(self, state):
        self.env.set_state(state)

    def close(self):
        self.env.close()


class FlatMinAtar:
    """Env creator of the synchronous MinAtar baselines: the named source
    in-process, or in ``workers`` simulator processes, with flat observations."""

    def __init__(self, name: str, workers: int = 0):
        self.name, self.workers = name, workers

    def __call__(self, ctx) -> FlatObs:
        from rllib_fast.envs.parallel import ParallelEnvCreator
        from rllib_fast.envs.registry import make

        ctx = dict(ctx)
        if self.workers:
            return FlatObs(ParallelEnvCreator(self.name, num_workers=self.workers)(ctx))
        return FlatObs(make(self.name, num_envs=int(ctx["num_envs"]), device=ctx.get("device", "cpu"),
                            seed=ctx.get("seed")))


def minatar_config(kind: str, layout: str, args):
    """Same hyperparameters for the HTS arm and its synchronous baseline: num_envs,
    rollout length = alpha, network, optimizer, seed (only the loop differs)."""
    game, n, E = f"minatar:{args.minatar_game}", args.minatar_envs, args.minatar_executors
    if kind.endswith("A2C"):
        T, common = args.minatar_a2c_alpha, dict(hidden_sizes=[128, 128], activation="relu", lr=7e-4,
                                                 entropy_coeff=0.01)
        cls = HTSA2CConfig if kind == "HTSA2C" else FastA2CConfig
    else:
        # the update pinned for both arms: FastPPO's defaults adapt lr to the epoch KL and take 5 epochs,
        # HTSPPO's do not (a lag-one behaviour policy changes the KL it would adapt to)
        T, common = args.minatar_ppo_alpha, dict(hidden_sizes=[128, 128], activation="relu", lr=2.5e-4,
                                                 entropy_coeff=0.01, num_epochs=4, adaptive_lr_kl_target=None)
        cls = HTSPPOConfig if kind == "HTSPPO" else FastPPOConfig
    # normalize_obs=False: MinAtar observations are 0/1 planes already
    common.update(decorrelate_steps=0, normalize_obs=False)
    if kind.startswith("HTS"):
        rounds = max(1, 1024 // (T * n))                   # ~1k env steps per training_step call
        cfg = cls().environment(game, num_envs=n).training(
            num_executors=E, executor_processes=(layout == "procs"), sync_interval=T,
            rounds_per_iteration=rounds, **common)
    else:
        env = FlatMinAtar(game, E if layout == "procs" else 0)
        cfg = cls().environment(env, num_envs=n).training(rollout_length=T, **common)
    return cfg.debugging(seed=args.seed)


def minatar_curve(kind: str, layout: str, args) -> Dict[str, Any]:
    """Train for ``--minatar-budget-s`` seconds of wall-clock (after the
    simulator processes have started, for every arm alike), calling
    ``training_step`` directly (no per-``train()`` RLlib bookkeeping for either
    arm) and sampling (seconds, env steps, 100-episode mean return) every
    ``--minatar-sample-s`` seconds."""
    from ray.rllib.utils.metrics import EPISODE_RETURN_MEAN

    torch.set_num_threads(1)
    t_build = time.perf_counter()
    algo = minatar_config(kind, layout, args).build_algo()
    build_s = time.perf_counter() - t_build
    curve, next_sample = [], 0.0
    try:
        t0 = time.perf_counter()
        while True:
            algo.training_step()
            t = time.perf_counter() - t0
            if t >= next_sample or t >= args.minatar_budget_s:
                ret = float(algo.tracker.summary()[EPISODE_RETURN_MEAN])
                curve.append((t, int(steps_of(algo)), ret))
                next_sample = t + args.minatar_sample_s
            if t >= args.minatar_budget_s:
                break
    finally:
        algo.stop()
    finite = [c for c in curve if c[2] == c[2]]
    best = max((c[2] for c in finite), default=float("nan"))
    tail = [c[2] for c in finite if c[0] >= 0.9 * curve[-1][0]]
    row = {"kind": kind, "layout": layout, "curve": curve, "build_s": build_s, "seconds": curve[-1][0],
           "env_steps": curve[-1][1], "sps": curve[-1][1] / curve[-1][0], "final_return": curve[-1][2],
           "last10pct_return": sum(tail) / len(tail) if tail else float("nan"), "best_return": best}
    print(f"{kind:7s} {layout:6s}  {row['env_steps']:8d} steps in {row['seconds']:.0f} s "
          f"({row['sps']:.0f} SPS, build {build_s:.1f} s)  final return {row['final_return']:.2f}  "
          f"best {best:.2f}", flush=True)
    return row


def part_minatar(args) -> Dict[str, Any]:
    runs = []
    for algo_set in args.minatar_algos.split(","):
        for kind, layout in MINATAR_ARMS[algo_set]:
            runs.append(minatar_curve(kind, layout, args))
    return {"runs": runs, "game": args.minatar_game, "num_envs": args.minatar_envs,
            "executors": args.minatar_executors, "budget_s": args.minatar_budget_s, "seed": args.seed,
            "a2c_alpha": args.minatar_a2c_alpha, "ppo_alpha": args.minatar_ppo_alpha,
            "load_average_start": args.load0}


def minatar_markdown(m: Dict[str, Any]) -> List[str]:
    if not m or not m.get("runs"):
        return []
    md = [f"## MinAtar {m['game']}: learning vs wall-clock ({m['budget_s']:.0f} s per arm, {m['num_envs']} envs, "
          f"seed {m['seed']})", "",
          f"Same hyperparameters within a pair (MLP 128x128 relu, entropy 0.01, no obs normalisation; A2C: RMSProp lr 7e-4, rollout = "
          f"alpha = {m['a2c_alpha']}; PPO: lr 2.5e-4 fixed, 4 epochs, rollout = alpha = {m['ppo_alpha']}). `procs`: the "
          f"{m['num_envs']} envs in {m['executors']} simulator processes (HTS: one per executor, "
          "`executor_processes=True`; synchronous: `ParallelEnvCreator(num_workers="
          f"{m['executors']})`, a barrier every step); `inproc`: the default in-process MinAtar env. "
          "The clock starts after the simulators are up (build time listed); both arms call "
          "`training_step` directly. Return = mean of the latest 100 training episodes. "
          f"Load average at start: {m.get('load_average_start', float('nan')):.2f}.", ""]
    rows = []
    for r in m["runs"]:
        by_t = {}
        for frac in (0.25, 0.5, 1.0):
            pt = next((c for c in r["curve"] if c[0] >= frac * r["seconds"] - 1e-9), r["curve"][-1])
            by_t[frac] = _fmt(pt[2], 2)
        rows.append([r["kind"], r["layout"], f"{r['seconds']:.0f}", f"{r['env_steps']}", f"{r['sps']:.0f}",
                     by_t[0.25], by_t[0.5], by_t[1.0], _fmt(r["best_return"], 2), f"{r['build_s']:.1f}"])
    md.append(markdown_table(["algorithm", "envs", "seconds", "env steps", "SPS", "return @25% time",
                              "@50%", "final return", "best", "build (s)"], rows))
    return md


def _fmt(x, nd=0):
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{nd}f}"


def write_results(sps_rows, learn_runs, same, args, minatar=None) -> None:
    out_dir = os.path.join(HERE, "results")
    os.makedirs(out_dir, exist_ok=True)
    md = ["# HTS-RL benchmark", "",
          f"Machine: {os.cpu_count()} cores; load average at start {args.load0}. "
          f"Step times: sleep per executor step, mean {args.mean_ms} ms (16 executors x 1 zero-cost env).",
          "Label: taken on a shared machine -- when the load average exceeds the core count, other sessions "
          "compete for the cores and absolute SPS are depressed; ratios are indicative.", ""]
    if sps_rows:
        alphas = sorted({r["alpha"] for r in sps_rows})
        md += ["## SPS vs alpha and step-time variance (HTS / synchronous, speed-up)", ""]
        rows = []
        for (var, pair) in dict.fromkeys((r["variance"], r["pair"]) for r in sps_rows):
            cells = []
            for a in alphas:
                r = next((x for x in sps_rows if x["variance"] == var and x["pair"] == pair and x["alpha"] == a), None)
                cells.append("-" if r is None else f"{r['hts_sps']:.0f} / {r['sync_sps']:.0f} (x{r['speedup']:.2f})")
            rows.append([var, pair, *cells])
        md.append(markdown_table(["step time", "HTS/sync", *[f"alpha={a}" for a in alphas]], rows))
        md += ["", "Learner / executor idle fractions of HTS:", ""]
        rows = [[r["variance"], r["pair"], r["alpha"], _fmt(r["learner_idle"], 2), _fmt(r["executor_idle"], 2)]
                for r in sps_rows]
        md.append(markdown_table(["step time", "pair", "alpha", "learner idle", "executor idle"], rows))
    if learn_runs:
        md += ["", f"## CartPole learning vs wall-clock (exponential step time, mean {args.learn_mean_ms} ms, "
               "64 envs in %d executors, seed %d)" % (args.learn_executors, args.seed), ""]
        rows = [[r["kind"], r["actors"], _fmt(r["time_to_475"], 1), _fmt(r["steps_to_475"]), _fmt(r["final_return"], 1),
                 f"{r['param_checksum']:.6f}"] for r in learn_runs]
        md.append(markdown_table(["algorithm", "actors", "time to 475 (s)", "env steps to 475", "final return",
                                  "param checksum"], rows))
        md += ["", f"Identical returns and final parameters for 1, 2, 4 actors: **{same}**"]
    if minatar:
        md += [""] + minatar_markdown(minatar)
    text = "\n".join(md) + "\n"
    with open(os.path.join(out_dir, "hts.md"), "w") as f:
        f.write(text)
    save_json(os.path.join(out_dir, "hts.json"), {"sps": sps_rows, "learn": learn_runs, "identical_across_actors": same,
                                                  "minatar": minatar, "args": vars(args)})
    _plot(sps_rows, learn_runs, os.path.join(out_dir, "hts.png"), minatar)
    print(text)


def merge_minatar(minatar: Dict[str, Any], args) -> None:
    """``--part minatar``: replace only the MinAtar section of hts.md and the
    ``minatar`` key of hts.json (the SPS / CartPole results, and any notes added
    to hts.md by hand, stay as they are), and redraw hts.png from the merged data."""
    import json
    import re

    out_dir = os.path.join(HERE, "results")
    os.makedirs(out_dir, exist_ok=True)
    md_path, json_path = os.path.join(out_dir, "hts.md"), os.path.join(out_dir, "hts.json")
    old = {}
    if os.path.exists(json_path):
        with open(json_path) as f:
            old = json.load(f)
    old["minatar"] = minatar
    old["args_minatar"] = vars(args)
    save_json(json_path, old)
    text = open(md_path).read() if os.path.exists(md_path) else "# HTS-RL benchmark\n"
    text = re.sub(r"\n## MinAtar .*?(?=\n## |\Z)", "\n", text, flags=re.S).rstrip("\n")
    section = "\n".join(minatar_markdown(minatar))
    text = text + "\n\n" + section + "\n"
    with open(md_path, "w") as f:
        f.write(text)
    _plot(old.get("sps", []), old.get("learn", []), os.path.join(out_dir, "hts.png"), minatar)
    print(section)


def _plot(sps_rows, learn_runs, path, minatar=None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with_minatar = bool(minatar and minatar.get("runs"))
    fig, axes = plt.subplots(2 if with_minatar else 1, 2, figsize=(12, 9 if with_minatar else 4.5))
    if with_minatar:
        for r in minatar["runs"]:
            label = f"{r['kind']} ({r['layout']})"
            ls = "-" if r["kind"].startswith("HTS") else "--"
            axes[1][0].plot([c[0] for c in r["curve"]], [c[2] for c in r["curve"]], ls=ls, label=label)
            axes[1][1].plot([c[1] for c in r["curve"]], [c[2] for c in r["curve"]], ls=ls, label=label)
        for ax, xl in zip(axes[1], ("wall-clock (s)", "env steps")):
            ax.set_xlabel(xl)
            ax.set_ylabel(f"MinAtar {minatar['game']} return (100-episode mean)")
            ax.legend(fontsize=7)
        axes = axes[0]
    ax = axes[0]
    for (var, pair) in dict.fromkeys((r["variance"], r["pair"]) for r in sps_rows):
        rs = [r for r in sps_rows if r["variance"] == var and r["pair"] == pair]
        line, = ax.plot([r["alpha"] for r in rs], [r["hts_sps"] for r in rs], marker="o", label=f"{pair.split('/')[0]} {var}")
        ax.plot([r["alpha"] for r in rs], [r["sync_sps"] for r in rs], ls="--", color=line.get_color())
    ax.set_xscale("log", base=2)
    ax.set_xlabel("alpha (sync interval)")
    ax.set_ylabel("env steps / s (dashed: synchronous)")
    ax.legend(fontsize=7)
    ax = axes[1]
    for r in learn_runs:
        ax.plot([c[0] for c in r["curve"]], [c[2] for c in r["curve"]], label=f"{r['kind']} actors={r['actors']}")
    ax.set_xlabel("wall-clock (s)")
    ax.set_ylabel("CartPole return (100-episode mean)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--part", choices=("all", "sps", "learn", "minatar"), default="all",
                   help="'all' = sps + learn (minatar is run only on request: --part minatar)")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--mean-ms", type=float, default=10.0, help="mean step time of part 1")
    p.add_argument("--min-steps", type=int, default=2048, help="env steps measured per SPS point")
    p.add_argument("--learn-mean-ms", type=float, default=2.0, help="mean step time of part 2")
    p.add_argument("--learn-executors", type=int, default=4, help="executors of part 2 (64 envs)")
    p.add_argument("--learn-budget-s", type=float, default=60.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--minatar-game", default="breakout")
    p.add_argument("--minatar-algos", default="a2c,ppo", help="comma list of: a2c, ppo")
    p.add_argument("--minatar-budget-s", type=float, default=120.0, help="wall-clock per arm")
    p.add_argument("--minatar-envs", type=int, default=16)
    p.add_argument("--minatar-executors", type=int, default=2, help="simulator processes (HTS executors)")
    p.add_argument("--minatar-a2c-alpha", type=int, default=5, help="A2C rollout length = HTS alpha")
    p.add_argument("--minatar-ppo-alpha", type=int, default=64, help="PPO rollout length = HTS alpha")
    p.add_argument("--minatar-sample-s", type=float, default=2.0, help="seconds between curve points")
    args = p.parse_args()
    args.load0 = os.getloadavg()[0]
    if args.part == "minatar":
        merge_minatar(part_minatar(args), args)
        return
    sps_rows = part_sps(args) if args.part in ("all", "sps") else []
    learn_runs, same = part_learn(args) if args.part in ("all", "learn") else ([], None)
    old_path = os.path.join(HERE, "results", "hts.json")
    if args.part != "all" and os.path.exists(old_path):   # keep the other part's last results
        import json

        with open(old_path) as f:
            old = json.load(f)
        if args.part == "learn":
            sps_rows = old.get("sps", [])
        else:
            learn_runs, same = old.get("learn", []), old.get("identical_across_actors")
    minatar = None
    if os.path.exists(old_path):                           # keep the last MinAtar results
        import json

        with open(old_path) as f:
            minatar = json.load(f).get("minatar")
    write_results(sps_rows, learn_runs, same, args, minatar)


if __name__ == "__main__":
    main()
