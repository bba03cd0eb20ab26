"""Sampler throughput: serial vs parallel processes vs alternating groups (Stooke & Abbeel 2018, §4.1).

Samples/s (env steps per second, acting included) of a CPU-simulated source with
batched inference of a small Q network in the main process, for 1..32 envs per
simulator process:

* ``serial``: one process steps all ``N = 2k`` envs (``make(name, num_envs=N)``)
  and runs inference on the whole batch: ``sim(N) + inf(N)`` per step.
* ``parallel``: :class:`~rllib_fast.envs.parallel.ParallelVecEnv`, 2 simulator
  processes x ``k`` envs, one barrier: ``sim(k) + inf(N)`` + IPC per step.
* ``alternating``: :class:`~rllib_fast.envs.alternating.AlternatingVecEnv`, 2 groups x
  1 process x ``k`` envs, driven by ``alternating_steps``: inference on group A
  overlaps simulation of group B, ~``max(sim(k) + inf(k), 2 inf(k))`` + IPC.
* ``alternating-2x2`` (``--modes`` to add it): 2 groups x 2 processes x ``k``
  envs (N = 4k), the paper's "two simulators per core" layout.
* ``parallel-noinf``: the parallel sampler with precomputed actions (no
  inference): the inference-free speed the paper compares against.

Layout for 2 cores (the default arms): the alternating sampler uses 2 groups x 1
process, so at any moment one simulator process and the inferring main process
are busy -- exactly the 2 cores; worker ``j`` of each group is pinned to core
``j`` (``affinity="auto"``), the main process is not pinned (it alternates
between the cores with the groups). With 2 groups x 2 processes three or more
processes want a core whenever the main process runs inference, which the
``alternating-2x2`` arm measures. The paper's rule "reserve one core per GPU"
needs a GPU; here inference runs on the CPU.

The policy (``/cnn``) is ``rllib_fast.core.qnets.QNetwork(obs_shape, A, trunk="auto")``
(MinAtar CNN for 10x10 MinAtar frames, Nature CNN for Atari) or (``/mlp``) a
64-64 MLP on the flattened frame, greedy with 5 % random actions, under ``torch.inference_mode()`` with ``torch.set_num_threads(1)``
in every process. Each arm: build the env (not timed), one warm-up chunk, then
chunks of ``T=32`` steps (``alternating_steps(env, policy, 32)`` for the
alternating arms: both groups idle between chunks, as between an algorithm's
rollouts) until ``--seconds`` have passed. Also measured in-process: ``sim(k)``
(one source stepping ``k`` envs, ms/step) and ``inf(n)`` (one forward, ms).

    python benchmarks/samplers.py                  # minatar:breakout, CNN and MLP policy, k = 1..32, ~4 min
    python benchmarks/samplers.py --atari          # + atari:Pong (ALE, one 104x80 frame, Nature CNN), k <= 32
    python benchmarks/samplers.py --atari --ks 1,2,4,8,16,32,64,128   # the published run (plateau search)
    python benchmarks/samplers.py --quick          # k = 1, 8, 32, 1 s per arm
    python benchmarks/samplers.py --suites minatar:breakout/cnn --modes serial,parallel,alternating,alternating-2x2

Before measuring, and again before every arm, it waits (``--wait-for``, polling
every 30 s, at most ``--wait-max`` s in all) until ``pgrep -f`` finds no other
benchmark and until other processes use less than ``--quiet-cores`` (0.3) cores
(at most ``--quiet-timeout`` s per arm), and records the
CPU used by processes outside this benchmark during every arm (``other load``;
arms above 0.25 cores are marked ``*``). Results: ``benchmarks/results/samplers.md``
and ``samplers.png`` (``--out`` to change), one section / row of panels per suite.
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _harness as H  # noqa: E402
import _report as R  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
T_CHUNK = 32
EPS = 0.05
MODES = ("serial", "parallel", "alternating", "parallel-noinf")
ALL_MODES = ("serial", "parallel", "alternating", "alternating-2x2", "parallel-noinf")
LABEL = {"serial": "serial (1 process)", "parallel": "parallel (2 processes, sync)",
         "alternating": "alternating (2 groups x 1 process)",
         "alternating-2x2": "alternating (2 groups x 2 processes)",
         "parallel-noinf": "parallel, no inference"}


def _procs(mode: str) -> int:
    return {"serial": 1, "parallel": 2, "alternating": 2, "alternating-2x2": 4, "parallel-noinf": 2}[mode]


def wait_for_others(pattern: str, max_s: float, poll_s: float = 30.0, quiet_log: bool = True) -> float:
    """Poll ``pgrep -f pattern`` until it finds nothing (or ``max_s``); returns the wait."""
    t0 = time.time()
    me = os.getpid()
    while True:
        out = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout.split()
        others = [p for p in out if int(p) != me]
        if not others:
            return time.time() - t0
        if time.time() - t0 >= max_s:
            if quiet_log or max_s > 0:
                print(f"[samplers] still running after {max_s:.0f} s: pids {others}; measuring anyway",
                      flush=True)
            return time.time() - t0
        print(f"[samplers] waiting for other benchmarks (pids {' '.join(others)}) ...", flush=True)
        time.sleep(poll_s)


def _tree_cpu(pids: List[int]) -> float:
    import psutil

    total = 0.0
    for pid in pids:
        try:
            t = psutil.Process(pid).cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


def make_net(env: Any, kind: str):
    """``cnn``: ``QNetwork(trunk="auto")`` (MinAtar CNN / Nature CNN); ``mlp``: a
    64-64 ``QNetwork(trunk="mlp")`` on the flattened frame (a light policy, so the
    simulation dominates the step)."""
    import numpy as np

    from rllib_fast.core.qnets import QNetwork

    n_act = int(env.single_action_space.n)
    if kind == "cnn":
        return QNetwork(env.obs_shape, n_act, trunk="auto").eval(), False
    if kind == "mlp":
        d = int(np.prod(env.obs_shape))
        return QNetwork((d,), n_act, trunk="mlp", hidden_sizes=(64, 64)).eval(), True
    raise ValueError(f"policy must be cnn or mlp, got {kind!r}")


def make_policy(env: Any, net: Any, flat: bool):
    import torch

    n_act = int(env.single_action_space.n)

    def policy(obs: "torch.Tensor", g: int = 0) -> "torch.Tensor":
        a = net(obs.flatten(1).float() if flat else obs).argmax(-1)
        explore = torch.rand(a.shape[0]) < EPS
        if explore.any():
            a = torch.where(explore, torch.randint(0, n_act, a.shape), a)
        return a

    return policy


def build_env(mode: str, name: str, k: int, seed: int, env_kwargs: Dict[str, Any]):
    from rllib_fast.envs import make
    from rllib_fast.envs.alternating import AlternatingVecEnv
    from rllib_fast.envs.parallel import ParallelVecEnv

    common = dict(seed=seed, affinity="auto", context="forkserver", env_kwargs=env_kwargs)
    if mode == "serial":
        return make(name, num_envs=2 * k, seed=seed, **env_kwargs)
    if mode in ("parallel", "parallel-noinf"):
        return ParallelVecEnv.from_name(name, 2 * k, 2, **common)
    if mode == "alternating":
        return AlternatingVecEnv.from_name(name, 2 * k, num_workers=2, **common)
    if mode == "alternating-2x2":
        return AlternatingVecEnv.from_name(name, 4 * k, num_workers=4, **common)
    raise ValueError(mode)


def run_arm(mode: str, name: str, k: int, seconds: float, seed: int, env_kwargs: Dict[str, Any],
            policy_kind: str = "cnn") -> Dict[str, Any]:
    import psutil
    import torch

    from rllib_fast.envs.alternating import alternating_steps, split_groups

    torch.manual_seed(seed)
    env = build_env(mode, name, k, seed, env_kwargs)
    N = env.num_envs
    alternating = mode.startswith("alternating")
    if mode == "parallel-noinf":  # precomputed actions, no inference
        fixed = [torch.randint(0, int(env.single_action_space.n), (N,)) for _ in range(T_CHUNK)]
        ctr = [0]

        def policy(obs, g=0):
            ctr[0] += 1
            return fixed[ctr[0] % T_CHUNK]
    else:
        policy = make_policy(env, *make_net(env, policy_kind))

    worker_pids = list(getattr(env, "worker_pids", []))
    me = psutil.Process()

    def chunk(state):
        if alternating:
            obs = state
            for g, _, _, st, _ in alternating_steps(env, policy, T_CHUNK, obs=obs):
                obs[g] = st.obs
            return obs
        obs = state
        for _ in range(T_CHUNK):
            obs = env.step(policy(obs)).obs
        return obs

    try:
        with torch.inference_mode():
            obs = env.reset(seed=seed)
            state = split_groups(env, obs) if alternating else obs
            state = chunk(state)  # warm-up
            busy0, cpu_self0, cpu_w0 = H._busy_cpu_s(), sum(me.cpu_times()[:2]), _tree_cpu(worker_pids)
            t0 = time.perf_counter()
            chunks = 0
            while True:
                state = chunk(state)
                chunks += 1
                dt = time.perf_counter() - t0
                if dt >= seconds:
                    break
            busy = H._busy_cpu_s() - busy0
            own = (sum(me.cpu_times()[:2]) - cpu_self0) + (_tree_cpu(worker_pids) - cpu_w0)
    finally:
        env.close()
    steps = chunks * T_CHUNK * N
    return dict(mode=mode, k=k, N=N, procs=_procs(mode), sps=steps / dt, seconds=dt, steps=steps,
                step_ms=dt / (chunks * T_CHUNK) * 1e3, other_load=max(0.0, (busy - own) / dt),
                own_cores=own / dt)


def micro(name: str, ks: List[int], seed: int, env_kwargs: Dict[str, Any], policy_kind: str = "cnn",
          reps_s: float = 0.4) -> Dict[int, Dict[str, float]]:
    """In-process ``sim(k)`` (ms per step of one source with k envs) and ``inf(n)`` (ms per forward)."""
    import torch

    from rllib_fast.envs import make

    out: Dict[int, Dict[str, float]] = {}

    def timeit(fn) -> float:
        fn()
        n, t0 = 0, time.perf_counter()
        while True:
            fn()
            n += 1
            if time.perf_counter() - t0 >= reps_s:
                return (time.perf_counter() - t0) / n * 1e3

    with torch.inference_mode():
        for k in ks:
            env = make(name, num_envs=k, seed=seed, **env_kwargs)
            env.reset()
            a = env.sample_actions()
            sim = timeit(lambda: env.step(a))
            net, flat = make_net(env, policy_kind)
            pol = make_policy(env, net, flat)
            o1 = env.reset()
            o2 = torch.cat([o1, o1])
            inf_k = timeit(lambda: pol(o1))
            inf_2k = timeit(lambda: pol(o2))
            env.close()
            out[k] = dict(sim_k=sim, inf_k=inf_k, inf_2k=inf_2k)
    return out


def plateau(rows: List[Dict[str, Any]], mode: str) -> Optional[Dict[str, Any]]:
    rs = [r for r in rows if r["mode"] == mode]
    if not rs:
        return None
    best = max(rs, key=lambda r: r["sps"])
    first = min((r for r in rs if r["sps"] >= 0.9 * best["sps"]), key=lambda r: r["k"])
    prev = [r for r in rs if r["k"] < best["k"]]
    gain = best["sps"] / max(prev, key=lambda r: r["k"])["sps"] - 1 if prev else None
    rising = best["k"] == max(r["k"] for r in rs) and gain is not None and gain > 0.1
    return dict(best=best, first90=first, gain=gain, rising=rising)


def section(suite: Dict[str, Any], rows: List[Dict[str, Any]], micro_rows: Dict[int, Dict[str, float]]) -> str:
    """Markdown section of one suite (env x policy)."""
    ks = sorted({r["k"] for r in rows})
    modes = [m for m in ALL_MODES if any(r["mode"] == m for r in rows)]
    by = {(r["mode"], r["k"]): r for r in rows}

    def cell(m: str, k: int) -> str:
        r = by.get((m, k))
        if r is None:
            return "–"
        flag = " \\*" if r["other_load"] > R.FOREIGN_FLAG else ""
        return f"{R.fmt_sps(r['sps'])}{flag}"

    headers = ["k (N=2k)"] + [LABEL[m] for m in modes]
    ratios = [(n, d) for n, d in (("alternating", "parallel"), ("parallel", "serial"), ("alternating", "serial"))
              if n in modes and d in modes]
    headers += [f"{n} / {d}" for n, d in ratios]
    if micro_rows:
        headers += ["sim(k) ms", "inf(k) ms", "inf(2k) ms"]
    body = []
    for k in ks:
        row: List[Any] = [k] + [cell(m, k) for m in modes]
        for n, d in ratios:
            a, b = by.get((n, k)), by.get((d, k))
            row.append(R.fmt_ratio(R.ratio(a and a["sps"], b and b["sps"])))
        if micro_rows:
            mr = micro_rows.get(k, {})
            row += [R.fmt_num(mr.get("sim_k"), 3), R.fmt_num(mr.get("inf_k"), 3), R.fmt_num(mr.get("inf_2k"), 3)]
        body.append(row)
    pl_rows = []
    for m in modes:
        pl = plateau(rows, m)
        if pl:
            gain = "–" if pl["gain"] is None else f"{100 * pl['gain']:+.0f} %"
            pl_rows.append([LABEL[m], R.fmt_sps(pl["best"]["sps"]), pl["best"]["k"], pl["first90"]["k"],
                            gain + (" (still rising)" if pl["rising"] else ""),
                            R.fmt_num(pl["best"]["step_ms"], 3), R.fmt_num(pl["best"]["own_cores"], 2)])
    lines = [f"## `{suite['env']}`, {suite['policy']} policy", "",
             f"Policy: {POLICY_DESC[suite['policy']]}.", "",
             R.markdown_table(headers, body), "",
             R.markdown_table(["sampler", "plateau samples/s (max over k)", "at k", "first k >= 90 % of max",
                               "gain over the k before", "ms per step there", "cores used there"], pl_rows), ""]
    pa, pp, ps = plateau(rows, "alternating"), plateau(rows, "parallel"), plateau(rows, "serial")
    facts = []
    if pa and pp:
        facts.append(f"alternating / parallel at the plateau: **{R.fmt_ratio(R.ratio(pa['best']['sps'], pp['best']['sps']))}**")
    if pp and ps:
        facts.append(f"parallel / serial: {R.fmt_ratio(R.ratio(pp['best']['sps'], ps['best']['sps']))}")
    if pa and ps:
        facts.append(f"alternating / serial: {R.fmt_ratio(R.ratio(pa['best']['sps'], ps['best']['sps']))}")
    pn = plateau(rows, "parallel-noinf")
    if pn and pa:
        facts.append(f"alternating reaches {100 * pa['best']['sps'] / pn['best']['sps']:.0f} % of the "
                     f"inference-free parallel plateau")
    if facts:
        lines += ["Plateau ratios: " + "; ".join(facts) + ".", ""]
    return "\n".join(lines)


POLICY_DESC = {
    "cnn": "`QNetwork(obs_shape, A, trunk=\"auto\")` (MinAtar CNN: conv 16x3x3 + 128-unit head; Atari: "
           "Nature CNN + 512), greedy with 5 % random actions",
    "mlp": "`QNetwork((H*W*C,), A, trunk=\"mlp\", hidden_sizes=(64, 64))` on the flattened frame, greedy with "
           "5 % random actions (a light policy: the simulation dominates the step)",
}


def report(sections: List[str], all_rows: List[Dict[str, Any]], args: Any, meta: Dict[str, Any]) -> str:
    lines = ["# Sampler throughput: serial vs parallel processes vs alternating groups", "",
             f"{meta['date']} · {meta['machine']} · python {meta['python']} · torch {meta['torch']} · "
             f"{args.seconds:g} s per arm after a warm-up chunk, chunks of {T_CHUNK} steps · "
             f"waited {meta['waited_s']:.0f} s for other benchmarks to finish first.", "",
             "Env steps per second **including** batched inference in the main process, "
             "`torch.set_num_threads(1)` in every process. `k` = envs per simulator process; serial, "
             "parallel and alternating all step `N = 2k` envs (alternating 2x2: `N = 4k`). "
             "`sim(k)`: one source stepping k envs in one process, ms per step; `inf(n)`: one policy "
             "forward (+ argmax/exploration) on n observations, ms. `*` = other processes used more than "
             f"{R.FOREIGN_FLAG} cores during that arm.", "",
             "Model of one step of all N envs: serial `sim(2k) + inf(2k)`; parallel (one barrier) "
             "`sim(k) + inf(2k)` + IPC; alternating (2 groups) about `max(sim(k) + inf(k), 2 inf(k))` + "
             "IPC. Parallel pays off when the simulation it splits is a large part of the step; "
             "alternating additionally hides the smaller of simulation and inference, but gives up half "
             "of the inference batch.", "",
             "Layout on 2 cores: parallel = 2 processes, worker j pinned to core j; alternating = 2 groups x "
             "1 process, worker j of each group pinned to core j (`affinity=\"auto\"`), main process "
             "unpinned, so one simulator plus the inferring main process keep the 2 cores busy. Workers are "
             "forked from a forkserver (start-up is not timed).", ""]
    lines += sections
    lines += ["## Arms (raw)", "", R.markdown_table(
        ["suite", "sampler", "k", "N", "samples/s", "ms per step", "cores used (own)", "other load (cores)"],
        [[f"{r['env']} / {r['policy']}", LABEL[r["mode"]], r["k"], r["N"], f"{r['sps']:.0f}",
          f"{r['step_ms']:.3f}", f"{r['own_cores']:.2f}", f"{r['other_load']:.2f}"] for r in all_rows]), ""]
    lines += ["Reproduce: `python benchmarks/samplers.py " + " ".join(meta["argv"]) + "`", ""]
    return "\n".join(lines)


def plot(suites: List[Dict[str, Any]], path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(suites), 2, figsize=(13, 4.6 * len(suites)), squeeze=False)
    for row, suite in zip(axes, suites):
        rows = suite["rows"]
        ax = row[0]
        for m in ALL_MODES:
            rs = sorted((r for r in rows if r["mode"] == m), key=lambda r: r["k"])
            if rs:
                ls = ":" if m == "parallel-noinf" else "-"
                ax.plot([r["k"] for r in rs], [r["sps"] for r in rs], ls, marker="o", label=LABEL[m])
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("envs per simulator process k")
        ax.set_ylabel("samples/s (env steps incl. inference)")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
        ax.set_title(f"{suite['env']}, {suite['policy']} policy: throughput")
        ax = row[1]
        by = {(r["mode"], r["k"]): r["sps"] for r in rows}
        for num, den, lab in (("alternating", "parallel", "alternating / parallel"),
                              ("parallel", "serial", "parallel / serial"),
                              ("alternating", "serial", "alternating / serial"),
                              ("alternating-2x2", "alternating", "alt 2x2 / alt 2x1")):
            ks = sorted(k for (m, k) in by if m == num and (den, k) in by)
            if ks:
                ax.plot(ks, [by[(num, k)] / by[(den, k)] for k in ks], marker="o", label=lab)
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("envs per simulator process k")
        ax.set_ylabel("ratio of samples/s")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        ax.set_title(f"{suite['env']}, {suite['policy']} policy: ratios")
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--suites", default="minatar:breakout/cnn,minatar:breakout/mlp",
                   help="comma list of ENV/POLICY (POLICY: cnn or mlp), e.g. atari:Pong/cnn")
    p.add_argument("--atari", action="store_true", help="add atari:Pong/cnn (k up to --atari-max-k)")
    p.add_argument("--atari-max-k", type=int, default=32)
    p.add_argument("--ks", default="1,2,4,8,16,32", help="envs per simulator process")
    p.add_argument("--modes", default=",".join(MODES), help=f"comma list of {', '.join(ALL_MODES)}")
    p.add_argument("--seconds", type=float, default=3.0, help="measured seconds per arm")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="k = 1, 8, 32 and 1 s per arm")
    p.add_argument("--out", default=None, help="results folder (default benchmarks/results)")
    p.add_argument("--no-micro", action="store_true", help="skip the in-process sim/inf timings")
    p.add_argument("--wait-for", default="benchmarks/(dqn|ppo_cartpole)",
                   help="pgrep -f pattern of benchmarks to wait for ('' = don't wait)")
    p.add_argument("--wait-max", type=float, default=1500.0, help="total seconds of waiting, at most")
    p.add_argument("--quiet-cores", type=float, default=0.3,
                   help="before each arm wait until other processes use fewer cores than this (0 = don't)")
    p.add_argument("--quiet-timeout", type=float, default=60.0, help="... for at most this many seconds per arm")
    args = p.parse_args(argv)
    argv = list(sys.argv[1:] if argv is None else argv)
    if args.quick:
        args.ks, args.seconds = "1,8,32", 1.0
    ks = [int(x) for x in args.ks.split(",")]
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    for m in modes:
        if m not in ALL_MODES:
            p.error(f"unknown mode {m!r}; allowed: {', '.join(ALL_MODES)}")
    specs = [x.strip() for x in args.suites.split(",") if x.strip()]
    if args.atari:
        specs.append("atari:Pong/cnn")
    suites = []
    for spec in specs:
        env, _, pol = spec.partition("/")
        pol = pol or "cnn"
        if pol not in POLICY_DESC:
            p.error(f"unknown policy {pol!r} in {spec!r}: cnn or mlp")
        kw: Dict[str, Any] = {}
        sk = ks
        if env.startswith("atari:"):
            kw = dict(frame_stack=1, num_threads=1)  # raw frames through shared memory; one ALE thread
            sk = [k for k in ks if k <= args.atari_max_k]
        suites.append(dict(env=env, policy=pol, env_kwargs=kw, ks=sk, rows=[]))
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)
    deadline = time.time() + args.wait_max  # total waiting budget
    waited = wait_for_others(args.wait_for, args.wait_max) if args.wait_for else 0.0
    sections, all_rows = [], []
    for su in suites:
        micro_rows = {} if args.no_micro else micro(su["env"], su["ks"], args.seed, su["env_kwargs"], su["policy"])
        for k in su["ks"]:
            for m in modes:
                if args.wait_for:  # another benchmark may have started meanwhile: pause for it
                    waited += wait_for_others(args.wait_for, max(0.0, deadline - time.time()), quiet_log=False)
                if args.quiet_cores > 0:  # and for any other CPU load to calm down
                    waited += H.wait_for_quiet(args.quiet_cores, args.quiet_timeout)["waited_s"]
                r = run_arm(m, su["env"], k, args.seconds, args.seed, su["env_kwargs"], su["policy"])
                r.update(env=su["env"], policy=su["policy"])
                su["rows"].append(r)
                all_rows.append(r)
                print(f"[samplers] {su['env']}/{su['policy']} {m:16s} k={k:3d} N={r['N']:4d}: "
                      f"{r['sps']:9.0f} samples/s ({r['step_ms']:.3f} ms/step, own {r['own_cores']:.2f} cores, "
                      f"other {r['other_load']:.2f})", flush=True)
        sections.append(section(su, su["rows"], micro_rows))
        print(sections[-1], flush=True)
    meta = dict(date=datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
                machine=f"{platform.machine()}, {os.cpu_count()} CPUs", python=platform.python_version(),
                torch=torch.__version__, waited_s=waited, argv=argv)
    md = report(sections, all_rows, args, meta)
    out = args.out or os.path.join(HERE, "results")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "samplers.md"), "w") as f:
        f.write(md)
    plot(suites, os.path.join(out, "samplers.png"),
         "Samplers: serial vs parallel vs alternating (batched inference, 1 torch thread per process)")
    print(f"[samplers] wrote {os.path.join(out, 'samplers.md')} and samplers.png", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
