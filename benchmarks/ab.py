"""Before/after: does a change slow the hot paths down? Two commits, one window.

A refactor must keep every benchmark within noise. On this kind of machine
wall-clock drifts by up to ~20% between hours, so the two commits are run
*alternately* in the same window (base, head, base, head, ...), each probe in
its own process with one torch thread, and compared per probe. The base commit
is checked out into a temporary git worktree and imported ahead of the
installed package (``PYTHONPATH``); the head is the checkout this script runs
from, imported the same way (run it from a snapshot worktree to keep editing
the main checkout while it runs).

Probes (each prints one JSON line):

* ``ppo-cartpole``: FastPPO defaults to a mean return of 475 on CartPole,
  seeds 0 and 1: wall-clock and env steps (equal env steps before and after
  mean the change kept the learning trajectory bit-identical);
* ``ppo-1024``, ``a2c``, ``htsppo``: on-policy env-steps/s (FastPPO N=1024,
  FastA2C and HTSPPO defaults) on CartPole;
* ``sacn``, ``dqn``: off-policy env-steps/s (SACN Pendulum, FastDQN CartPole,
  defaults, after their warm-up).

Usage::

    python benchmarks/ab.py --base 0e9220c --rounds 2 --out benchmarks/results/ab_composition.md
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
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

PROBE = r'''
import json, sys, time
import torch
torch.set_num_threads(1)
import rllib_fast
from rllib_fast.algorithms import FastA2CConfig, FastDQNConfig, FastPPOConfig, HTSPPOConfig, SACNConfig

PINS = json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}   # class name -> head's defaults
SKIPPED = {}

def pin(cfg):
    """Set every hyperparameter this code shares with the head to the head's default
    (a value whose type this code's default does not have, e.g. 'auto' for a bool, is
    left at this code's default and reported), so both sides run the same settings."""
    name = type(cfg).__name__
    pins = PINS.get(name)
    if not pins:
        return cfg
    spec = cfg.hyperparameter_spec()
    skipped = []
    for k, v in pins.items():
        if k not in spec:
            skipped.append(k)
            continue
        mine = getattr(cfg, k)
        number = (int, float)
        same_kind = (isinstance(v, number) and isinstance(mine, number) and not isinstance(v, bool)
                     and not isinstance(mine, bool)) or type(v) is type(mine) or mine is None or v is None
        if not same_kind:
            skipped.append(k)
            continue
        setattr(cfg, k, v)
    SKIPPED[name] = sorted(skipped)
    return cfg

def ret(r): return r.get("env_runners", {}).get("episode_return_mean", float("nan"))
def steps(r): return r.get("num_env_steps_sampled_lifetime", 0)

def rate(cfg, iters, warm=2):
    a = pin(cfg).build_algo()
    for _ in range(warm):
        a.train()
    s0 = steps(a.train()); t0 = time.perf_counter()
    for _ in range(iters):
        r = a.train()
    v = (steps(r) - s0) / (time.perf_counter() - t0)
    a.stop()
    return {"env_steps_per_s": round(v)}

def to_475(seed):
    a = pin(FastPPOConfig().environment("CartPole").debugging(seed=seed)).build_algo()
    t0 = time.perf_counter()
    while True:
        r = a.train()
        if ret(r) >= 475 or time.perf_counter() - t0 > 120:
            break
    out = {"seconds": round(time.perf_counter() - t0, 2), "env_steps": int(steps(r)), "reached": ret(r) >= 475}
    a.stop()
    return out

probe = sys.argv[1]
if probe == "ppo-cartpole":
    res = {f"seed{s}": to_475(s) for s in (0, 1)}
elif probe == "ppo-1024":
    res = rate(FastPPOConfig().environment("CartPole", num_envs=1024).debugging(seed=0), 8)
elif probe == "a2c":
    res = rate(FastA2CConfig().environment("CartPole").debugging(seed=0), 300)
elif probe == "htsppo":
    res = rate(HTSPPOConfig().environment("CartPole").debugging(seed=0), 40)
elif probe == "sacn":
    res = rate(SACNConfig().environment("Pendulum").debugging(seed=0), 10)
elif probe == "dqn":
    res = rate(FastDQNConfig().environment("CartPole").debugging(seed=0), 20)
else:
    raise SystemExit(f"unknown probe {probe!r}")
print("RESULT " + json.dumps({"src": rllib_fast.__file__, "skipped": SKIPPED, **res}))
'''

PROBES = ("ppo-cartpole", "ppo-1024", "a2c", "htsppo", "sacn", "dqn")


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, check=True, capture_output=True, text=True).stdout.strip()


#: what the pinned mode reads the head's defaults of (keys that size the env/run are the probe's own)
PINNED_CLASSES = ("FastPPOConfig", "FastA2CConfig", "HTSPPOConfig", "SACNConfig", "FastDQNConfig")
NOT_PINNED = ("num_envs", "env", "env_config", "env_device", "seed", "num_learners")

HEAD_DEFAULTS = r'''
import json, sys
import rllib_fast
from rllib_fast import algorithms as A
out = {}
for name in sys.argv[1].split(","):
    cfg = getattr(A, name)()
    vals = {}
    for k in cfg.hyperparameter_spec():
        if k in sys.argv[2].split(","):
            continue
        v = getattr(cfg, k)
        if isinstance(v, tuple):
            v = list(v)
        try:
            json.dumps(v)
        except TypeError:
            continue
        vals[k] = v
    out[name] = vals
print("RESULT " + json.dumps(out))
'''


def head_defaults(pythonpath: str) -> dict:
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "PYTHONPATH": pythonpath}
    proc = subprocess.run([sys.executable, "-c", HEAD_DEFAULTS, ",".join(PINNED_CLASSES), ",".join(NOT_PINNED)],
                          cwd=tempfile.gettempdir(), env=env, capture_output=True, text=True, timeout=300)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"reading the head's defaults failed:\n{proc.stderr[-2000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def run_probe(probe: str, pythonpath: str | None, pins: dict | None = None) -> dict:
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    else:
        env.pop("PYTHONPATH", None)
    # run outside the checkout so `benchmarks/` does not shadow installed packages
    argv = [sys.executable, "-c", PROBE, probe] + ([json.dumps(pins)] if pins else [])
    proc = subprocess.run(argv, cwd=tempfile.gettempdir(), env=env,
                          capture_output=True, text=True, timeout=900)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"probe {probe} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def figures(probe: str, res: dict) -> dict:
    """The numbers compared for a probe (name -> value)."""
    if probe == "ppo-cartpole":
        out = {}
        for seed in ("seed0", "seed1"):
            out[f"{seed} s to 475"] = res[seed]["seconds"]
            out[f"{seed} env steps"] = res[seed]["env_steps"]
        return out
    return {"env-steps/s": res["env_steps_per_s"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", required=True, help="commit to compare the working tree against")
    ap.add_argument("--probes", default=",".join(PROBES), help=f"comma-separated subset of {', '.join(PROBES)}")
    ap.add_argument("--rounds", type=int, default=2, help="alternating base/head runs per probe")
    ap.add_argument("--out", default=None, help="markdown report path (also writes .json next to it)")
    ap.add_argument("--pin-head-defaults", action="store_true",
                    help="run both sides with the head's default hyperparameters (every key both know), so a "
                         "change of defaults between the commits does not hide or fake a slowdown")
    args = ap.parse_args()
    probes = [p for p in args.probes.split(",") if p]
    bad = [p for p in probes if p not in PROBES]
    if bad:
        raise SystemExit(f"--probes: unknown {bad}; allowed: {', '.join(PROBES)}")
    base_sha, head_sha = git("rev-parse", "--short", args.base), git("rev-parse", "--short", "HEAD")
    dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    worktree = Path(tempfile.mkdtemp(prefix="ab_base_"))
    git("worktree", "add", "--detach", "-f", str(worktree), base_sha)
    results = {p: {"base": [], "head": []} for p in probes}
    pins = head_defaults(str(REPO)) if args.pin_head_defaults else None
    skipped: dict = {}
    try:
        for r in range(args.rounds):
            for probe in probes:
                for side, path in (("base", str(worktree)), ("head", str(REPO))):
                    res = run_probe(probe, path, pins)
                    results[probe][side].append(figures(probe, res))
                    if side == "base" and res.get("skipped"):
                        skipped.update(res["skipped"])
                    print(f"round {r + 1} {probe:13s} {side}: {results[probe][side][-1]}", flush=True)
    finally:
        git("worktree", "remove", "--force", str(worktree))
    rows = []
    for probe in probes:
        for key in results[probe]["base"][0]:
            b = [x[key] for x in results[probe]["base"]]
            h = [x[key] for x in results[probe]["head"]]
            mb, mh = statistics.median(b), statistics.median(h)
            rows.append((probe, key, b, h, mh / mb if mb else float("nan")))
    stamp = time.strftime("%Y-%m-%d %H:%M")
    md = [f"# Before/after: {base_sha} (base) vs {head_sha}{' + working tree' if dirty else ''} (head)", "",
          f"{stamp}, {os.cpu_count()} CPU cores, one torch thread per probe, {args.rounds} alternating rounds "
          "(base, head, base, head, ...) in one window; medians over the rounds."
          + (" Both sides ran the head's default hyperparameters (`--pin-head-defaults`); keys the base "
             "lacks or types it does not take stayed at the base's defaults: "
             + "; ".join(f"{k}: {', '.join(v) or 'none'}" for k, v in sorted(skipped.items())) + "."
             if pins else ""), "",
          "| probe | figure | base | head | head / base |", "| :--- | :--- | :--- | :--- | ---: |"]
    for probe, key, b, h, ratio in rows:
        md.append(f"| {probe} | {key} | {', '.join(map(str, b))} | {', '.join(map(str, h))} | {ratio:.2f} |")
    text = "\n".join(md) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)
        Path(args.out).with_suffix(".json").write_text(json.dumps(
            {"base": base_sha, "head": head_sha, "dirty": dirty, "when": stamp, "pinned": pins, "skipped": skipped,
             "results": results}, indent=1))


if __name__ == "__main__":
    main()
