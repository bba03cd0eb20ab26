"""Eager vs ``compile``: env-steps/s of whole ``train()`` iterations.

Each (algorithm, setting) arm runs in a fresh child process, one after the
other, with one torch thread. Reported per arm: the first iteration's time
(for compiled arms it holds the compilation; inductor caches generated code
under its cache folder, so a second run of the same arm compiles faster), then
steady-state env-steps/s over ``--iters`` iterations both per wall-clock
second and per CPU second of the process (the CPU-second figure is the one to
compare on a machine that other jobs load).

    python benchmarks/compile.py                       # CartPole FastPPO N=64, eager vs compile=True
    python benchmarks/compile.py --algos ppo,sacn --iters 30
    python benchmarks/compile.py --settings false,default,reduce-overhead
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def make_config(algo: str, setting, n: int):
    if algo == "ppo":
        from rllib_fast.algorithms.ppo import FastPPOConfig

        return FastPPOConfig().environment("CartPole", num_envs=n).training(
            rollout_length=32, num_epochs=4, num_minibatches=4, compile=setting)
    if algo == "sacn":
        from rllib_fast.algorithms.pql import SACNConfig

        return SACNConfig().environment("Pendulum", num_envs=n).training(compile=setting)
    if algo == "dqn":
        from rllib_fast.algorithms.dqn import FastDQNConfig

        return FastDQNConfig().environment("CartPole", num_envs=n).training(learning_starts=0, compile=setting)
    raise ValueError(f"--algos: {algo!r} is not allowed; allowed: ppo, sacn, dqn")


def child(algo: str, setting, n: int, iters: int, warmup: int) -> dict:
    import torch

    torch.set_num_threads(1)
    cfg = make_config(algo, setting, n).debugging(seed=0)
    t0 = time.perf_counter()
    a = cfg.build_algo()
    build_s = time.perf_counter() - t0
    steps = lambda: a.metrics.peek(("env_runners", "num_env_steps_sampled_lifetime"), default=0)  # noqa: E731
    t0 = time.perf_counter()
    a.train()
    first_s = time.perf_counter() - t0
    for _ in range(warmup - 1):
        a.train()
    s0, w0, c0 = steps(), time.perf_counter(), time.process_time()
    for _ in range(iters):
        a.train()
    s1, w1, c1 = steps(), time.perf_counter(), time.process_time()
    a.stop()
    return {"algo": algo, "compile": setting, "num_envs": n, "build_s": round(build_s, 2),
            "first_iter_s": round(first_s, 2), "env_steps": int(s1 - s0),
            "steps_per_s": round((s1 - s0) / (w1 - w0), 1), "steps_per_cpu_s": round((s1 - s0) / (c1 - c0), 1)}


def parse_setting(text: str):
    return {"false": False, "true": True}.get(text.lower(), text)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--algos", default="ppo")
    p.add_argument("--settings", default="false,true")
    p.add_argument("--num-envs", type=int, default=64)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=2, help="iterations before timing (the first compiles)")
    p.add_argument("--out", default=None, help="write the rows as JSON here")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        algo, setting = args.child.split(":", 1)
        print(json.dumps(child(algo, parse_setting(setting), args.num_envs, args.iters, args.warmup)))
        return
    rows = []
    for algo in args.algos.split(","):
        for setting in args.settings.split(","):
            out = subprocess.run([sys.executable, __file__, "--child", f"{algo}:{setting}", "--num-envs",
                                  str(args.num_envs), "--iters", str(args.iters), "--warmup", str(args.warmup)],
                                 capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
            lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
            if out.returncode or not lines:
                print(f"{algo}:{setting} failed:\n{out.stderr[-2000:]}", file=sys.stderr)
                continue
            rows.append(json.loads(lines[-1]))
            print(json.dumps(rows[-1]), flush=True)
    for algo in sorted({r["algo"] for r in rows}):
        base = next((r for r in rows if r["algo"] == algo and r["compile"] is False), None)
        for r in rows:
            if base and r["algo"] == algo and r is not base:
                print(f"{algo} compile={r['compile']!r}: x{r['steps_per_s'] / base['steps_per_s']:.2f} env-steps/s "
                      f"(wall), x{r['steps_per_cpu_s'] / base['steps_per_cpu_s']:.2f} per CPU-second; "
                      f"first iteration {r['first_iter_s']} s vs {base['first_iter_s']} s eager")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"rows": rows, "loadavg": os.getloadavg()}, f, indent=1)


if __name__ == "__main__":
    main()
