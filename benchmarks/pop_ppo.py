"""PopPPO sweep vs today's ways to sweep PPO, side by side (issue 27).

Two tasks, each arm in its own child process (``_harness.py``), seeds 0-2:

**mjlab Cartpole balance, 10 s episodes** (200 steps, maximum return 10, target 9.0):

* ``popppo4-<n>``: PopPPO, K = 4 members of ``n`` envs each sharing ONE mjlab
  simulator of 4n envs, in-trial PBT on, members drawn from the same spread as
  the Tune PBT arm (lr, entropy_coeff, clip_param) around the rsl_rl-style start;
  time to target = until the *best member's* recent mean return reaches it;
  ``popppo4-<n/4>``: the same with 4 members of n/4 envs (one simulator of n envs);
  the goal ratio takes the faster of the two;
* ``pbt-<n>``: today's way, Ray Tune PBT over 4 FastPPO trials of ``n`` envs each,
  each trial its own simulator (``benchmarks/mjlab.py:arm_pbt``, both cores);
* ``fastppo_rsl-<n>``: one FastPPO run, rsl_rl-style (``mjlab.py:arm_fastppo``);
* ``rsl_rl-<m>``: one rsl_rl run (mjlab's own runner and registered config,
  ``mjlab.py:arm_rsl_rl``) at m = 64, 128, 256 and 1024 — the cost of a single
  configuration at rsl_rl's best N (the goal's reference is the fastest of the four);
* throughput ``tput:raw-<N>``: the simulator alone at n and 4n envs (env-steps/s of
  one shared simulator vs K separate ones).

**built-in Pendulum** (target -200): ``popppo8-pend`` (K = 8), ``popppo4-pend``,
``fastppo-pend`` (FastPPO defaults), ``pbt-pend`` (Tune PBT over 4 FastPPO trials).

Goals (issue 27): a K = 4 PopPPO sweep reaches 9.0 on mjlab in at most 1.5x the time of
one rsl_rl run at its best N, and at least 2.5x faster than Tune PBT over 4 trials; on
Pendulum, K = 8 within 2x one FastPPO run. The report prints these ratios, env steps to
target (load-independent) and peak memory.

Full run (on a quiet machine; about an hour)::

    python benchmarks/pop_ppo.py --seeds 0,1,2 --budget 600

Smoke run (small budgets, report in the log dir)::

    python benchmarks/pop_ppo.py --quick --arms popppo4-256,popppo8-pend
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time
from typing import Any, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)
import _harness as H  # noqa: E402
import _report as R  # noqa: E402

NAME = "pop_ppo"
MJLAB_TASK = "Mjlab-Cartpole-Balance"
EPISODE_S = 10.0
MJLAB_TARGET, PENDULUM_TARGET = 9.0, -200.0
#: members' envs on mjlab (the shared simulator has K x this); rsl_rl/FastPPO/PBT arms run at this N too
MJLAB_N = 256
#: PopPPO's settings on mjlab: the rsl_rl-style start of benchmarks/mjlab.py (RSL_STYLE) per member, PBT
#: every POP_PBT_INTERVAL iterations, members drawn from the Tune PBT arm's mutation ranges
POP_PBT_INTERVAL = 8
MJLAB_MUTATIONS = {"lr": {"loguniform": [3e-4, 3e-3]}, "entropy_coeff": {"uniform": [0.0, 0.01]},
                   "clip_param": [0.1, 0.2, 0.3]}
#: Pendulum: FastPPO's defaults per member, 16 envs per member
PENDULUM_N = 16
FN = "pop_ppo:"
MJ = "mjlab:"


def _mjlab_env_config() -> Dict[str, Any]:
    return {"cfg": {"episode_length_s": EPISODE_S}}


def _train_loop(ctx: H.ArmContext, algo) -> None:
    try:
        while True:
            r = algo.train()
            ret = r["env_runners"].get("episode_return_mean")
            members = {m: v.get("episode_return_mean") for m, v in (r.get("population") or {}).items()
                       if m.startswith("member_")}
            if ctx.report(r["num_env_steps_sampled_lifetime"], ret, members=members,
                          pbt_rounds=(r.get("population") or {}).get("pbt_rounds")):
                break
    finally:
        algo.stop()


def arm_popppo(ctx: H.ArmContext, num_envs: int, members: int = 4, task: str = "mjlab",
               overrides: Optional[Dict[str, Any]] = None) -> None:
    """PopPPO with ``members`` members of ``num_envs`` envs each on one shared env."""
    if task == "mjlab":
        import mjlab as _bench_mjlab  # noqa: F401 - this folder's mjlab.py: its RSL_STYLE and unshadowing
        _bench_mjlab._unshadow()
        kw = dict(_bench_mjlab.RSL_STYLE, pbt_interval=POP_PBT_INTERVAL, hyperparam_mutations=MJLAB_MUTATIONS)
        source, env_config = f"mjlab:{MJLAB_TASK}", _mjlab_env_config()
    else:
        kw, source, env_config = {"pbt_interval": POP_PBT_INTERVAL}, task, {}
    kw.update(overrides or {})
    from rllib_fast.algorithms.pop_ppo import PopPPOConfig

    ctx.note(hyperparameters=kw, members=members, shared_envs=members * num_envs)
    cfg = (PopPPOConfig().environment(source, env_config=env_config)
           .training(population_size=members, num_envs_per_member=num_envs, **kw).debugging(seed=ctx.seed))
    ctx.start_clock()
    algo = cfg.build_algo()
    ctx.timed(algo, "_rollout", lambda out, a, k: algo.horizon * members * num_envs)
    _train_loop(ctx, algo)


def arm_fastppo_builtin(ctx: H.ArmContext, num_envs: int, task: str = "Pendulum") -> None:
    """One FastPPO run with its defaults on a built-in task."""
    from rllib_fast.algorithms.ppo import FastPPOConfig

    cfg = FastPPOConfig().environment(task, num_envs=num_envs).debugging(seed=ctx.seed)
    ctx.start_clock()
    algo = cfg.build_algo()
    ctx.timed(algo, "_rollout", lambda out, a, k: algo.horizon * num_envs)
    _train_loop(ctx, algo)


def arm_pbt_builtin(ctx: H.ArmContext, num_envs: int, task: str = "Pendulum", trials: int = 4,
                    interval: int = POP_PBT_INTERVAL) -> None:
    """Tune PBT over ``trials`` FastPPO trials (defaults) on a built-in task, as
    ``mjlab.py:arm_pbt`` runs it on mjlab (same preset, watcher and CPU split)."""
    import shutil
    import tempfile

    import mjlab as _bench_mjlab
    _bench_mjlab._unshadow()
    from ray import tune
    from ray.tune.registry import get_trainable_cls

    from rllib_fast.algorithms.ppo import FastPPOConfig
    from rllib_fast.tune import session
    from rllib_fast.tune.pbt import RETURN_KEY, paper_pbt

    cpus = _bench_mjlab.PBT_RAY_CPUS
    session.init_ray(num_cpus=cpus)
    m = _bench_mjlab.PBT_MUTATIONS
    mutations = {"lr": tune.loguniform(*m["lr"]), "entropy_coeff": tune.uniform(*m["entropy_coeff"]),
                 "clip_param": list(m["clip_param"])}
    seeds = [100 * ctx.seed + i for i in range(trials)]
    ctx.note(trials=trials, perturbation_interval=interval, trial_seeds=seeds)
    space = FastPPOConfig().environment(task, num_envs=num_envs).to_dict()
    space["seed"] = tune.grid_search(seeds)
    storage = tempfile.mkdtemp(prefix="bench_pop_ppo_pbt_")
    trainable = tune.with_resources(get_trainable_cls("FastPPO"), {"cpu": cpus / trials})
    try:
        ctx.start_clock()
        tune.Tuner(trainable, param_space=space,
                   tune_config=tune.TuneConfig(scheduler=paper_pbt(mutations, perturbation_interval=interval,
                                                                   metric=None, mode=None),
                                               metric=RETURN_KEY, mode="max", num_samples=1, reuse_actors=True),
                   run_config=tune.RunConfig(storage_path=storage, stop=_bench_mjlab._pbt_watch(ctx), verbose=0,
                                             checkpoint_config=tune.CheckpointConfig(
                                                 checkpoint_frequency=interval))).fit()
    finally:
        import ray

        ray.shutdown()
        shutil.rmtree(storage, ignore_errors=True)


def rsl_ns(n: int = MJLAB_N) -> List[int]:
    """rsl_rl's N candidates (its best is the reference): n/4, n/2, n and 4n (64-1024)."""
    return [n // 4, n // 2, n, 4 * n]


def mjlab_arms(n: int = MJLAB_N) -> List[H.Arm]:
    return [
        H.Arm(f"popppo4-{n}", "PopPPO-4", f"PopPPO K=4 (PBT), one simulator of {4 * n} envs, {n} per member",
              FN + "arm_popppo", {"num_envs": n, "members": 4}, num_envs=4 * n),
        H.Arm(f"popppo4-{n // 4}", "PopPPO-4", f"PopPPO K=4 (PBT), one simulator of {n} envs, {n // 4} per member",
              FN + "arm_popppo", {"num_envs": n // 4, "members": 4}, num_envs=n),
        H.Arm(f"pbt-{n}", "FastPPO-PBT", f"Tune PBT, 4 FastPPO trials of {n} envs (both cores)", MJ + "arm_pbt",
              {"num_envs": n, "interval": POP_PBT_INTERVAL}, num_envs=n),
        H.Arm(f"fastppo_rsl-{n}", "FastPPO", f"one FastPPO run, rsl_rl-style, N={n}", MJ + "arm_fastppo",
              {"num_envs": n, "preset": "rsl"}, num_envs=n),
        *[H.Arm(f"rsl_rl-{m}", "rsl_rl", f"one rsl_rl run (mjlab's runner and config), N={m}", MJ + "arm_rsl_rl",
                {"num_envs": m}, num_envs=m) for m in rsl_ns(n)],
        H.Arm(f"raw-{n}", "raw", "mjlab simulator alone, zero actions", MJ + "arm_raw", {"num_envs": n},
              num_envs=n, mode="throughput"),
        H.Arm(f"raw-{4 * n}", "raw", "mjlab simulator alone, zero actions", MJ + "arm_raw", {"num_envs": 4 * n},
              num_envs=4 * n, mode="throughput"),
    ]


def pendulum_arms(n: int = PENDULUM_N) -> List[H.Arm]:
    return [
        H.Arm("popppo8-pend", "PopPPO-8", f"PopPPO K=8 (PBT), {n} envs per member", FN + "arm_popppo",
              {"num_envs": n, "members": 8, "task": "Pendulum"}, num_envs=8 * n),
        H.Arm("popppo4-pend", "PopPPO-4", f"PopPPO K=4 (PBT), {n} envs per member", FN + "arm_popppo",
              {"num_envs": n, "members": 4, "task": "Pendulum"}, num_envs=4 * n),
        H.Arm("fastppo-pend", "FastPPO", "one FastPPO run (defaults, N=64)", FN + "arm_fastppo_builtin",
              {"num_envs": 64}, num_envs=64),
        H.Arm("pbt-pend", "FastPPO-PBT", "Tune PBT, 4 FastPPO trials (defaults, N=64)", FN + "arm_pbt_builtin",
              {"num_envs": 64}, num_envs=64),
    ]


def _row(rows: List[Dict[str, Any]], key: str) -> Optional[Dict[str, Any]]:
    return next((r for r in rows if r["key"] == key), None)


def _t(row: Optional[Dict[str, Any]]) -> Optional[float]:
    return row["t_reach"] if row and row["n_reached"] else None


def goals(rows: List[Dict[str, Any]], n: int = MJLAB_N) -> List[List[str]]:
    """The issue's three ratios from the learn rows (None where an arm is missing or did not reach)."""
    rsl = [t for t in (_t(_row(rows, f"rsl_rl-{m}")) for m in rsl_ns(n)) if t is not None]
    best_rsl = min(rsl) if rsl else None
    pop4s = [t for t in (_t(_row(rows, f"popppo4-{n}")), _t(_row(rows, f"popppo4-{n // 4}"))) if t is not None]
    pop4 = min(pop4s) if pop4s else None   # the faster K=4 layout (members of n or n/4 envs)
    pbt = _t(_row(rows, f"pbt-{n}"))
    pop8 = _t(_row(rows, "popppo8-pend"))
    fast = _t(_row(rows, "fastppo-pend"))
    out = []
    r = R.ratio(pop4, best_rsl)
    out.append(["mjlab: PopPPO K=4 time / one rsl_rl run at its best N", R.fmt_ratio(r), "<= 1.5x",
                "–" if r is None else ("met" if r <= 1.5 else "not met")])
    r = R.ratio(pbt, pop4)
    out.append(["mjlab: Tune PBT (4 trials) time / PopPPO K=4 time", R.fmt_ratio(r), ">= 2.5x",
                "–" if r is None else ("met" if r >= 2.5 else "not met")])
    r = R.ratio(pop8, fast)
    out.append(["Pendulum: PopPPO K=8 time / one FastPPO run", R.fmt_ratio(r), "<= 2x",
                "–" if r is None else ("met" if r <= 2.0 else "not met")])
    return out


def shared_vs_separate(records: List[Dict[str, Any]], n: int = MJLAB_N, K: int = 4) -> Optional[str]:
    """One simulator of K*n envs vs K simulators of n envs (each at its own rate, run one after another)."""
    tp = R.aggregate_throughput(records).get("raw", {})
    one, shared = tp.get(n), tp.get(K * n)
    if not one or not shared or one.get("tput_overall") is None or shared.get("tput_overall") is None:
        return None
    return (f"mjlab simulator alone: one instance of {K * n} envs steps {R.fmt_sps(shared['tput_overall'])} "
            f"env-steps/s; {K} separate instances of {n} envs, each at {R.fmt_sps(one['tput_overall'])} and "
            f"sharing the cores, step at most that together: the shared simulator is "
            f"{R.fmt_ratio(R.ratio(shared['tput_overall'], one['tput_overall']))} faster.")


def build_report(records: List[Dict[str, Any]], meta: Dict[str, Any]) -> str:
    rows = R.aggregate_learn(records)
    lines = [f"# PopPPO vs Tune PBT, FastPPO and rsl_rl ({meta.get('date')})", "",
             f"Machine: {meta.get('machine')}; torch threads per arm: {meta.get('threads')}; seeds "
             f"{meta.get('seeds')}; time cap {meta.get('budget')} s per run"
             + ("; **quick smoke run, not a measurement**" if meta.get("quick") else "") + ".",
             f"Targets: mjlab Cartpole balance (10 s episodes) {MJLAB_TARGET}, Pendulum {PENDULUM_TARGET}. "
             "Time to target counts from building the algorithm (envs included); for populations it is "
             "the best member's recent mean return; env steps are all members' (all trials') together.",
             ""]
    if meta.get("under_load"):
        lines += [f"Other load while measuring: {meta['under_load']}", ""]
    for title, prefix in (("mjlab Cartpole balance", "mjlab"), ("Pendulum", "pendulum")):
        group = [r for r in rows if r["key"].endswith("-pend") == (prefix == "pendulum")]
        if group:
            lines += [f"## {title}", "", R.learn_table(group), ""]
    lines += ["## Goals", "", R.markdown_table(["ratio", "measured", "goal", ""], goals(rows)), ""]
    shared = shared_vs_separate(records)
    if shared:
        lines += ["## Shared simulator", "", shared, ""]
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    H.add_common_args(p, budget=600.0, target=MJLAB_TARGET)
    p.add_argument("--under-load", default="", help="say so in the report (what else ran)")
    args = p.parse_args(argv)
    import mjlab as _bench_mjlab  # this folder's mjlab.py (its arms run in the children)

    # every mjlab arm (ours and mjlab.py's) runs 10 s episodes; the children inherit this
    os.environ[_bench_mjlab.EPISODE_S_ENV] = repr(EPISODE_S)
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    root = os.path.dirname(HERE)
    os.environ["PYTHONPATH"] = os.pathsep.join([root] + [q for q in os.environ.get("PYTHONPATH", "").split(
        os.pathsep) if q and os.path.abspath(q) != root])
    groups = [(mjlab_arms(), MJLAB_TARGET), (pendulum_arms(), PENDULUM_TARGET)]
    if args.list:
        for arms, _ in groups:
            for a in arms:
                print(f"{a.key if a.mode == 'learn' else 'tput:' + a.key:20s} {a.mode:10s} {a.label}")
        return
    if args.replot:
        with open(args.replot) as f:
            payload = json.load(f)
        records, meta = payload["records"], payload["meta"]
        out_dir = args.out_dir or os.path.dirname(os.path.abspath(args.replot))
    else:
        if args.quick:
            args.budget = min(args.budget, 60.0)
            args.throughput_s = min(args.throughput_s, 3.0)
            args.quiet_timeout = min(args.quiet_timeout, 10.0)
        seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
        logdir = args.logdir or H.default_logdir(NAME)
        out_dir = args.out_dir or (logdir if args.quick else os.path.join(HERE, "results"))
        t0 = time.time()
        records = []
        everything = [a for arms, _ in groups for a in arms]
        wanted = H.select_arms(everything, args.arms)
        for arms, target in groups:
            chosen = [a for a in arms if a in wanted and not (args.no_throughput and a.mode == "throughput")
                      and not (args.no_learn and a.mode == "learn")]
            if not chosen:
                continue
            print(f"{len(chosen)} arms, seeds {seeds}, target {target:g}, budget {args.budget:g}s, logs in {logdir}",
                  flush=True)
            records += H.run_arms_with_args(chosen, seeds, args, target=target, logdir=logdir)
        meta = dict(date=datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
                    machine=f"{platform.machine()}, {os.cpu_count()} CPU cores, no GPU, "
                            f"Python {platform.python_version()}",
                    threads=args.threads, seeds=seeds, budget=args.budget, total_min=(time.time() - t0) / 60,
                    quick=args.quick, under_load=args.under_load)
        if args.update:
            records, meta, saved_dir = H.merge_update(args.update, records, meta, seeds)
            out_dir = args.out_dir or saved_dir
    os.makedirs(out_dir, exist_ok=True)
    md = build_report(records, meta)
    with open(os.path.join(out_dir, NAME + ".md"), "w") as f:
        f.write(md + "\n")
    if not args.replot or args.update:
        H.save_json(os.path.join(out_dir, NAME + ".json"), dict(meta=meta, records=records))
    print("\n" + md)
    print(f"\nwrote {os.path.join(out_dir, NAME + '.md')}")


if __name__ == "__main__":
    main()
