"""The GPU kit: everything a session with a lent CUDA machine should run, in one command.

No line of this project had run on a GPU when this was written, and device time
is scarce (minutes per session), so one command does it all and never stops at
the first failure: each part runs in its own child process with a time cap, a
failing part (or arm) records its one-line error in the report and the kit goes
on. Parts, in order:

  cuda_tests   the tests that skip without CUDA (found by reading tests/ for
               skipif(... cuda ...) decorators), under pytest
  smoke        every registered algorithm on the device: 2 iterations,
               checkpoint, restore from it, 1 more iteration
  throughput   FastPPO env-steps/s on the torch CartPole and Pendulum at
               N = 4,096 ... 262,144 (sampling alone and whole iterations) next
               to the single-file PPO (benchmarks/single_file_ppo.py) on the same device
  learn        time to CartPole 475 (FastPPO, single file) and Pendulum -200 (FastPPO)
  pql          PQL vs DDPG(n) vs FastPPO on Pendulum at N = 4,096, every PQL
               component on the one GPU; achieved beta ratios
  population   PopTD3 with K = 8/16/64 members stacked vs one member
  hts          HTSPPO vs synchronous FastPPO over the sync interval alpha
  mjlab        FastPPO (tune_configs/mjlab-go1-flat-fastppo.yaml) vs rsl_rl's mjlab
               runner on mjlab's Go1 velocity task (N = 4,096) when mjlab is installed

Writes gpu.md and gpu.json (device name, torch/CUDA versions, every figure).

    python benchmarks/gpu.py --quick              # < 10 min on one H100/H200
    python benchmarks/gpu.py                      # full, < 30 min
    python benchmarks/gpu.py --dry-run            # list what would run (any machine)
    python benchmarks/gpu.py --device cpu --quick --tiny   # every code path in minutes on a CPU

Arms run through the benchmark harness (protocol.py: one child per arm, time
caps, curves, process-tree cores) with its adapters (adapters.py); the HTS and
population rates come from gpu_rates.py; the smoke uses tests/_resume_worker.py's
tiny configs.
"""
from __future__ import annotations

import argparse
import ast
import datetime
import glob
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from typing import Any, Callable, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "results")
sys.path.insert(0, HERE)
sys.path.insert(1, REPO)   # this checkout's rllib_fast (and tests/) before an installed copy
import protocol  # noqa: E402
import tables as R  # noqa: E402

# PPO settings of the throughput side by side, the same for FastPPO and the single
# file so that only the implementation differs: horizon 16 at every N (the batch
# grows with N, as on a GPU it should), 4 epochs x 4 minibatches, lr 3e-4.
TPUT = dict(T=16, epochs=4, minibatches=4, lr=3e-4)
PENDULUM_TARGET = -200.0
CARTPOLE_TARGET = 475.0


# ---------------------------------------------------------------------------
# sizes per mode
# ---------------------------------------------------------------------------
def sizes(args) -> Dict[str, Any]:
    """How big each part runs. --tiny: seconds per arm on a CPU (code paths
    only, no meaningful figure); --quick: the whole kit in < 10 min on one
    GPU; full: < 30 min."""
    if args.tiny:
        return dict(ns=(8, 32), window_s=0.5, tput_cap=60.0, learn_n=16, learn_s=3.0, pql_n=8, pql_s=3.0,
                    ks=(1, 2), pop_hidden="16,16", pop_reps=2, pop_steps=100, hts_alphas=(4,), hts_min=64,
                    smoke_envs=4, mjlab_n=8, mjlab_s=5.0, minutes=25.0)
    if args.quick:
        return dict(ns=(4096, 262144), window_s=3.0, tput_cap=90.0, learn_n=4096, learn_s=25.0,
                    pql_n=4096, pql_s=25.0, ks=(1, 8, 64), pop_hidden="256,256", pop_reps=10, pop_steps=200,
                    hts_alphas=(16, 64), hts_min=2048, smoke_envs=64, mjlab_n=4096, mjlab_s=120.0, minutes=9.0,
                    learn_pendulum_n=False)
    return dict(ns=(4096, 16384, 65536, 262144), window_s=6.0, tput_cap=120.0, learn_n=4096, learn_s=100.0,
                pql_n=4096, pql_s=100.0, ks=(1, 8, 16, 64), pop_hidden="256,256", pop_reps=50, pop_steps=300,
                hts_alphas=(1, 16, 64, 256), hts_min=4096, smoke_envs=64, mjlab_n=4096, mjlab_s=240.0,
                minutes=28.0)


# ---------------------------------------------------------------------------
# discovery
# ---------------------------------------------------------------------------
def cuda_test_ids(root: str = REPO) -> List[str]:
    """pytest node ids of the tests that skip without CUDA: a skipif decorator
    (or a module-level pytestmark) whose text mentions cuda. Read from the
    source, so a new CUDA-only test is picked up without editing this file."""
    ids: List[str] = []
    for path in sorted(glob.glob(os.path.join(root, "tests", "**", "test_*.py"), recursive=True)):
        text = open(path).read()
        rel = os.path.relpath(path, root)
        tree = ast.parse(text)

        def cuda_skip(dec) -> bool:
            src = (ast.get_source_segment(text, dec) or "").lower()
            return "skip" in src and "cuda" in src

        for node in tree.body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "pytestmark" for t in node.targets) \
                    and cuda_skip(node.value):
                ids.append(rel)
                break
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test") \
                    and any(cuda_skip(d) for d in node.decorator_list):
                ids.append(f"{rel}::{node.name}")
            if isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
                whole = any(cuda_skip(d) for d in node.decorator_list)
                for sub in node.body:
                    if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)) and sub.name.startswith("test") \
                            and (whole or any(cuda_skip(d) for d in sub.decorator_list)):
                        ids.append(f"{rel}::{node.name}::{sub.name}")
    return ids


def algorithm_names() -> List[str]:
    from rllib_fast.algorithms import ALGORITHMS

    return list(ALGORITHMS)


MJLAB_TASK = "Mjlab-Velocity-Flat-Unitree-Go1"
#: FastPPO's side: the shipped Go1 file (rsl_rl's registered settings for the task, mapped)
GO1_FILE = "tune_configs/mjlab-go1-flat-fastppo.yaml"
#: the learn part's FastPPO settings at large N (16 steps/env, 4 x 8, lr 1e-3 adaptive at KL 0.01)
LEARN_PPO = dict(rollout_length=16, num_epochs=4, num_minibatches=8, lr=1e-3, adaptive_lr_kl_target=0.01)
#: the single file with the same schedule
LEARN_SINGLE = dict(num_steps=16, epochs=4, minibatches=8, lr=1e-3, kl_target=0.01)


def mjlab_status() -> str:
    """'' when mjlab is installed, else why the part is skipped (one line)."""
    import importlib.util

    saved = list(sys.path)
    try:
        sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != HERE]
        spec = importlib.util.find_spec("mjlab")
    finally:
        sys.path[:] = saved
    if spec is None:
        return "mjlab is not installed"
    return ""


# ---------------------------------------------------------------------------
# child side: arm functions (run by _harness children) and child calls
# ---------------------------------------------------------------------------
def _finite(x: Any) -> Optional[float]:
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return None if x != x else x


def call_smoke(device: str, num_envs: int, out_path: str) -> Dict[str, Any]:
    """Every registered algorithm: tiny config (tests/_resume_worker.py) on
    ``device``, 2 iterations, checkpoint, restore, 1 more iteration. One JSON
    line per algorithm in ``out_path`` as it finishes, so a time cap keeps
    what was done."""
    import ray
    import torch

    sys.path.insert(0, REPO)
    from rllib_fast.algorithms import ALGORITHMS
    from tests._resume_worker import ENVS, tiny_config

    torch.set_num_threads(1)
    ray.init(num_cpus=max(2, min(8, os.cpu_count() or 2)), include_dashboard=False, log_to_driver=False)
    ckpt_root = tempfile.mkdtemp(prefix="gpu_smoke_")
    rows = []
    for name, cls in ALGORITHMS.items():
        row: Dict[str, Any] = {"algorithm": name}
        t0 = time.perf_counter()
        algo = None
        try:
            errors = []
            for env in ENVS:
                cfg = tiny_config(name, env)
                cfg.env_device = device
                if "num_envs" in cfg.hyperparameter_spec() and num_envs != cfg.num_envs:
                    cfg.num_envs = num_envs
                try:
                    cfg.validate()
                    algo = cfg.build_algo()
                except Exception as err:  # noqa: BLE001 - e.g. a continuous-control algorithm on CartPole
                    errors.append(f"{env}: {one_line_error(err)}")
                    continue
                row["env"] = env
                break
            else:
                raise RuntimeError("; ".join(errors))
            row["device"] = str(getattr(algo, "device", "?"))
            for _ in range(2):
                r = algo.train()
            path = algo.save_to_path(os.path.join(ckpt_root, name))
            algo.stop()
            algo = cls.from_checkpoint(path)
            r = algo.train()
            row["iteration_after_restore"] = int(r["training_iteration"])
            row["env_steps"] = float(r.get("num_env_steps_sampled_lifetime", 0))
            if row["iteration_after_restore"] != 3:
                raise RuntimeError(f"restored run reports iteration {row['iteration_after_restore']}, expected 3")
            if not row["device"].startswith(device.split(":")[0]):
                raise RuntimeError(f"ran on {row['device']}, asked for {device}")
            row["status"] = "ok"
        except Exception as err:  # noqa: BLE001 - one line per algorithm, the rest go on
            row["status"] = "error"
            row["error"] = one_line_error(err)
            traceback.print_exc()
        finally:
            if algo is not None:
                try:
                    algo.stop()
                except Exception:  # noqa: BLE001
                    pass
        row["seconds"] = time.perf_counter() - t0
        rows.append(row)
        with open(out_path, "a") as f:
            f.write(json.dumps(row) + "\n")
        print(f"smoke {name:12s} {row['status']:5s} {row['seconds']:6.1f}s {row.get('error', '')}", flush=True)
    ray.shutdown()
    return {"rows": rows}


def call_hts(alphas: List[int], min_steps: int, mean_ms: float = 1.0) -> Dict[str, Any]:
    """gpu_rates.py's measure_sps for HTSPPO and FastPPO over alpha, the
    high-variance (gamma, std = 2 x mean) simulated step time."""
    import gpu_rates as hts

    rows = []
    for alpha in alphas:
        h = hts.measure_sps("HTSPPO", alpha, mean_ms / 1e3, 2.0, "gamma", min_steps)
        s = hts.measure_sps("FastPPO", alpha, mean_ms / 1e3, 2.0, "gamma", min_steps)
        rows.append(dict(alpha=alpha, hts_sps=h["sps"], sync_sps=s["sps"], speedup=h["sps"] / s["sps"],
                         learner_idle=h.get("learner_idle"), executor_idle=h.get("executor_idle")))
        print(f"hts alpha={alpha}: HTS {h['sps']:.0f}  sync {s['sps']:.0f}", flush=True)
    return {"rows": rows, "mean_step_ms": mean_ms, "variance": "gamma std=2m", "executors": 16}


def call_population(**kwargs: Any) -> Dict[str, Any]:
    """``gpu_rates.population_update``: a vectorised population's update cost."""
    import gpu_rates

    return gpu_rates.population_update(**kwargs)


CALLS: Dict[str, Callable[..., Dict[str, Any]]] = {"smoke": call_smoke, "hts": call_hts,
                                                   "population": call_population}


def one_line_error(err: BaseException) -> str:
    msg = str(err).strip().splitlines()
    return f"{type(err).__name__}: {msg[0] if msg else ''}"[:400]


# ---------------------------------------------------------------------------
# parent side
# ---------------------------------------------------------------------------
class Kit:
    def __init__(self, args):
        self.args = args
        self.sz = sizes(args)
        self.t0 = time.time()
        self.deadline = self.t0 + 60.0 * (args.max_minutes or self.sz["minutes"])
        self.logdir = tempfile.mkdtemp(prefix="gpu_kit_")
        self.threads = 1 if args.tiny else max(1, min(8, (os.cpu_count() or 2) // 2))

    def left(self) -> float:
        return self.deadline - time.time()

    def child_call(self, name: str, timeout: float, **kwargs: Any) -> Dict[str, Any]:
        """Run CALLS[name](**kwargs) in a child; its result, or an exception
        whose message is the child's last error line."""
        log = os.path.join(self.logdir, f"call_{name}.log")
        cmd = [sys.executable, os.path.abspath(__file__), "--child-call", name, "--kwargs", json.dumps(kwargs)]
        with open(log, "w") as f:
            try:
                p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=f, text=True, timeout=max(5.0, timeout),
                                   cwd=REPO)
            except subprocess.TimeoutExpired:
                raise TimeoutError(f"{name}: time cap {timeout:.0f}s reached (log {log})") from None
        for line in reversed(p.stdout.splitlines()):
            if line.startswith("RESULT "):
                return json.loads(line[7:])
        tail = [ln for ln in open(log).read().splitlines() if ln.strip()]
        raise RuntimeError(f"{name} child exited {p.returncode}: {tail[-1] if tail else 'no output'} (log {log})")

    def arm(self, key: str, label: str, adapter: str, params: Dict[str, Any], num_envs: int, mode: str,
            budget_s: float, target: float = 0.0, window_s: Optional[float] = None) -> Dict[str, Any]:
        """One harness arm (``protocol.run_child``) in its own child: ``learn`` stops at
        ``target``, ``throughput`` after ``window_s`` past its first report (the warm-up
        iteration), which the rate leaves out; ``budget_s`` caps either."""
        budget_s = max(1.0, min(budget_s, self.left() - 30.0))
        spec = dict(arm=key, adapter=adapter, params=params, seed=0, budget_s=budget_s, threads=self.threads,
                    target=target if mode == "learn" else None, mode="target" if mode == "learn" else "fixed",
                    window_s=(window_s or self.sz["window_s"]) if mode == "throughput" else None)
        rec = protocol.run_child(spec, self.logdir, grace_s=60.0)
        pts = rec["points"]
        rets = [p["ret"] for p in pts if p.get("ret") is not None]
        a, b = (pts[0], pts[-1]) if len(pts) > 1 else (None, None)
        out = dict(key=key, label=label, num_envs=num_envs, status=rec["status"],
                   error=(rec.get("end") or {}).get("error"), reached=rec["reached"],
                   best_return=max(rets) if rets else None, final_return=rets[-1] if rets else None,
                   final_t=pts[-1]["t"] if pts else None, final_steps=pts[-1]["steps"] if pts else None,
                   sps_overall=pts[-1]["steps"] / pts[-1]["t"] if pts and pts[-1]["t"] > 0 else None,
                   tput_overall=(b["steps"] - a["steps"]) / (b["t"] - a["t"]) if a and b["t"] > a["t"] else None,
                   tput_sampling=None, tput_iters=len(pts) - 1 if pts else 0,
                   tput_window_s=b["t"] - a["t"] if a else None, startup_s=rec.get("startup_s"),
                   cores=rec.get("cores"), notes=rec["notes"], log=rec["log"])
        out["last_point"] = pts[-1] if pts else None
        return out

    # -- parts -------------------------------------------------------------------
    def part_cuda_tests(self) -> Dict[str, Any]:
        ids = cuda_test_ids()
        xml = os.path.join(self.logdir, "cuda_tests.xml")
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA", f"--junitxml={xml}", *ids]
        timeout = max(30.0, min(600.0, self.left() - 60.0))
        log = os.path.join(self.logdir, "cuda_tests.log")
        with open(log, "w") as f:
            try:
                p = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=timeout, cwd=REPO)
            except subprocess.TimeoutExpired:
                raise TimeoutError(f"pytest did not finish in {timeout:.0f}s (log {log})") from None
        import xml.etree.ElementTree as ET

        cases = []
        for tc in ET.parse(xml).getroot().iter("testcase"):
            outcome, msg = "passed", ""
            for tag in ("failure", "error", "skipped"):
                el = tc.find(tag)
                if el is not None:
                    outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                    msg = (el.get("message") or "").strip().splitlines()[0][:300] if el.get("message") else ""
                    break
            cases.append(dict(test=f"{tc.get('classname')}::{tc.get('name')}", outcome=outcome, message=msg,
                              seconds=float(tc.get("time") or 0)))
        return dict(node_ids=ids, cases=cases, returncode=p.returncode, log=log)

    def part_smoke(self) -> Dict[str, Any]:
        out_path = os.path.join(self.logdir, "smoke.jsonl")
        err = None
        try:
            self.child_call("smoke", self.left() - 30.0, device=self.args.device,
                            num_envs=self.sz["smoke_envs"], out_path=out_path)
        except Exception as e:  # noqa: BLE001 - keep the algorithms that finished
            err = one_line_error(e)
        rows = [json.loads(ln) for ln in open(out_path)] if os.path.exists(out_path) else []
        done = {r["algorithm"] for r in rows}
        rows += [dict(algorithm=n, status="not run", error=err or "") for n in algorithm_names() if n not in done]
        return dict(rows=rows, error=err)

    def part_throughput(self) -> Dict[str, Any]:
        dev, rows = self.args.device, []
        kw = dict(rollout_length=TPUT["T"], num_epochs=TPUT["epochs"], num_minibatches=TPUT["minibatches"],
                  lr=TPUT["lr"], env_device=dev)
        sf = dict(script="single_file_ppo", device=dev, num_steps=TPUT["T"], epochs=TPUT["epochs"],
                  minibatches=TPUT["minibatches"], lr=TPUT["lr"])
        cap = self.sz["tput_cap"]
        for n in self.sz["ns"]:
            for env in ("CartPole", "Pendulum"):
                rows.append(dict(env=env, impl="FastPPO", **self.arm(
                    f"fastppo-{env}-{n}", f"FastPPO {env} N={n}", "rllib_fast_config",
                    dict(algo="FastPPO", env=env, num_envs=n, **kw), n, "throughput", cap)))
            rows.append(dict(env="CartPole", impl="single file", **self.arm(
                f"single-CartPole-{n}", f"single-file PPO CartPole N={n}", "single_file",
                dict(env="CartPole", num_envs=n, **sf), n, "throughput", cap)))
        return dict(rows=rows, settings=TPUT, note="the single file is discrete-action only: no Pendulum row")

    def part_learn(self) -> Dict[str, Any]:
        dev, n, cap = self.args.device, self.sz["learn_n"], self.sz["learn_s"]
        rows = [
            dict(env="CartPole", target=CARTPOLE_TARGET, **self.arm(
                f"learn-fastppo-CartPole-{n}", f"FastPPO CartPole N={n}", "rllib_fast_config",
                dict(algo="FastPPO", env="CartPole", num_envs=n, env_device=dev, **LEARN_PPO), n, "learn", cap,
                CARTPOLE_TARGET)),
            dict(env="CartPole", target=CARTPOLE_TARGET, **self.arm(
                f"learn-single-CartPole-{n}", f"single-file PPO CartPole N={n}", "single_file",
                dict(script="single_file_ppo", env="CartPole", num_envs=n, device=dev, **LEARN_SINGLE), n, "learn",
                cap, CARTPOLE_TARGET)),
            dict(env="Pendulum", target=PENDULUM_TARGET, **self.arm(
                "learn-fastppo-Pendulum", "FastPPO Pendulum (tuned N=64)", "rllib_fast_config",
                dict(algo="FastPPO", env="Pendulum", env_device=dev), 64, "learn", cap, PENDULUM_TARGET)),
        ]
        if not self.sz.get("learn_pendulum_n", True):   # --quick: the tuned N=64 Pendulum arm only
            return dict(rows=rows)
        rows += [
            dict(env="Pendulum", target=PENDULUM_TARGET, **self.arm(
                f"learn-fastppo-Pendulum-{n}", f"FastPPO Pendulum N={n}", "rllib_fast_config",
                dict(algo="FastPPO", env="Pendulum", env_device=dev, num_envs=n, rollout_length=16), n, "learn",
                cap, PENDULUM_TARGET)),
        ]
        return dict(rows=rows)

    def part_pql(self) -> Dict[str, Any]:
        dev, n, cap = self.args.device, self.sz["pql_n"], self.sz["pql_s"]
        rows = []
        for algo, extra in (("PQL", dict(v_learner_device=dev, p_learner_device=dev)), ("DDPGN", {}),
                            ("FastPPO", dict(rollout_length=16))):
            rows.append(dict(algo=algo, **self.arm(
                f"pql-{algo}-{n}", f"{algo} Pendulum N={n}", "rllib_fast_config",
                dict(algo=algo, env="Pendulum", env_device=dev, num_envs=n, **extra), n, "learn", cap,
                PENDULUM_TARGET)))
        return dict(rows=rows, layout=f"Actor, V-learner and P-learner threads all on {dev}")

    def part_population(self) -> Dict[str, Any]:
        rows = {}
        common = dict(hidden=self.sz["pop_hidden"], batch=256, reps=self.sz["pop_reps"],
                      budget_steps=self.sz["pop_steps"], device=self.args.device)
        for k in self.sz["ks"]:
            if self.left() < 45:
                rows[str(k)] = {"error": "skipped: kit time budget spent"}
                continue
            try:
                rows[str(k)] = self.child_call("population", max(30.0, self.left() - 30.0), k=k, **common)
            except Exception as e:  # noqa: BLE001
                rows[str(k)] = {"error": one_line_error(e)}
        return dict(rows=rows, hidden=self.sz["pop_hidden"], batch=256)

    def part_hts(self) -> Dict[str, Any]:
        return self.child_call("hts", self.left() - 30.0, alphas=list(self.sz["hts_alphas"]),
                               min_steps=self.sz["hts_min"])

    def part_mjlab(self) -> Dict[str, Any]:
        """Go1 flat velocity env-steps/s: rsl_rl's mjlab runner against FastPPO with the
        shipped Go1 file's settings, each over a fixed window on the kit's device."""
        why = mjlab_status()
        if why:
            return {"skipped": why}
        n, dev = self.sz["mjlab_n"], self.args.device
        cap, window = self.sz["mjlab_s"] + 300.0, self.sz["mjlab_s"] / 2   # the cap: + Warp compiling its kernels
        rows = [dict(env=MJLAB_TASK, impl="rsl_rl", **self.arm(
                    f"mjlab-rsl_rl-{n}", f"rsl_rl {MJLAB_TASK} N={n}", "rsl_rl_mjlab",
                    dict(task=MJLAB_TASK, num_envs=n, device=dev), n, "throughput", cap, window_s=window)),
                dict(env=MJLAB_TASK, impl="FastPPO", **self.arm(
                    f"mjlab-fastppo-{n}", f"FastPPO {MJLAB_TASK} N={n}", "rllib_fast_file",
                    dict(path=GO1_FILE, overrides=dict(num_envs=n, env_device=dev), checkpoints=False), n,
                    "throughput", cap, window_s=window))]
        return dict(rows=rows, settings=f"{GO1_FILE} / mjlab's registered rsl_rl config",
                    note="whole-loop env-steps/s after the first iteration")


PARTS = [
    ("cuda_tests", "CUDA-only tests under pytest", Kit.part_cuda_tests),
    ("smoke", "every registered algorithm: 2 iterations, checkpoint, restore, 1 iteration", Kit.part_smoke),
    ("throughput", "FastPPO vs single-file PPO env-steps/s (sampling, whole iterations)", Kit.part_throughput),
    ("learn", "time to CartPole 475 / Pendulum -200", Kit.part_learn),
    ("pql", "PQL vs DDPG(n) vs FastPPO on Pendulum, beta ratios", Kit.part_pql),
    ("population", "PopTD3 K members stacked vs one member", Kit.part_population),
    ("hts", "HTSPPO vs synchronous FastPPO over alpha", Kit.part_hts),
    ("mjlab", "FastPPO vs rsl_rl on mjlab Go1 velocity", Kit.part_mjlab),
]
PART_NAMES = [p[0] for p in PARTS]


def problems(name: str, data: Dict[str, Any]) -> Optional[str]:
    """One line naming what inside a part did not succeed (None: all did)."""
    if name == "cuda_tests":
        bad = [c["test"].rsplit(".", 1)[-1] for c in data.get("cases", []) if c["outcome"] in ("failed", "error")]
        if not data.get("cases"):
            return f"no test ran (pytest exit {data.get('returncode')})"
        return f"{len(bad)} of {len(data['cases'])} failed: {', '.join(bad)}" if bad else None
    rows = data.get("rows")
    if isinstance(rows, dict):
        bad = [f"K={k}" for k, r in rows.items() if r.get("error")]
    elif isinstance(rows, list):
        bad = [r.get("algorithm") or r.get("label") or "?" for r in rows if r.get("status", "ok") != "ok"]
    elif data and all(isinstance(v, dict) and "status" in v for v in data.values()):   # mjlab gpu_kit
        bad = [k for k, v in data.items() if v.get("status") != "ok"]
    else:
        bad = []
    return f"not ok: {', '.join(map(str, bad))}" if bad else None


def environment_info(device: str) -> Dict[str, Any]:
    info: Dict[str, Any] = dict(date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                                python=platform.python_version(), machine=platform.machine(),
                                cpu_count=os.cpu_count(), device=device)
    try:
        import torch

        info.update(torch=torch.__version__, cuda=torch.version.cuda, cuda_available=torch.cuda.is_available())
        if torch.cuda.is_available():
            p = torch.cuda.get_device_properties(0)
            info.update(device_name=torch.cuda.get_device_name(0), gpu_memory_gib=round(p.total_memory / 2**30, 1),
                        multiprocessors=p.multi_processor_count, cudnn=torch.backends.cudnn.version())
    except Exception as e:  # noqa: BLE001
        info["torch_error"] = one_line_error(e)
    for mod in ("ray", "gymnasium", "numpy"):
        try:
            info[mod] = __import__(mod).__version__
        except Exception as e:  # noqa: BLE001
            info[mod] = f"missing ({one_line_error(e)})"
    try:
        info["git_commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                            cwd=REPO, timeout=10).stdout.strip() or None
    except Exception:  # noqa: BLE001
        info["git_commit"] = None
    return info


def describe(args) -> List[str]:
    """What the kit would run, one line per item (--dry-run)."""
    sz = sizes(args)
    mode = "tiny" if args.tiny else ("quick" if args.quick else "full")
    lines = [f"gpu kit, mode {mode}, device {args.device}, time budget {args.max_minutes or sz['minutes']:g} min, "
             f"parts: {', '.join(selected_parts(args))}"]
    for name, title, _ in PARTS:
        if name not in selected_parts(args):
            continue
        lines.append(f"[{name}] {title}")
        if name == "cuda_tests":
            lines += [f"  pytest {i}" for i in cuda_test_ids()]
        elif name == "smoke":
            lines += [f"  {a}: tiny config, num_envs={sz['smoke_envs']}, 2 iterations, checkpoint, restore, "
                      "1 iteration" for a in algorithm_names()]
        elif name == "throughput":
            for n in sz["ns"]:
                lines += [f"  FastPPO {env} N={n} (T={TPUT['T']}, window {sz['window_s']:g}s)"
                          for env in ("CartPole", "Pendulum")]
                lines.append(f"  single-file PPO CartPole N={n}")
        elif name == "learn":
            lines += [f"  FastPPO CartPole N={sz['learn_n']} to {CARTPOLE_TARGET:g}, cap {sz['learn_s']:g}s",
                      f"  single-file PPO CartPole N={sz['learn_n']} to {CARTPOLE_TARGET:g}, cap {sz['learn_s']:g}s",
                      f"  FastPPO Pendulum N=64 (tuned) to {PENDULUM_TARGET:g}, cap {sz['learn_s']:g}s"]
            if sz.get("learn_pendulum_n", True):
                lines.append(f"  FastPPO Pendulum N={sz['learn_n']} to {PENDULUM_TARGET:g}, cap {sz['learn_s']:g}s")
        elif name == "pql":
            lines += [f"  {a} Pendulum N={sz['pql_n']}, cap {sz['pql_s']:g}s" for a in ("PQL", "DDPGN", "FastPPO")]
        elif name == "population":
            lines += [f"  PopTD3 K={k} vectorised, hidden {sz['pop_hidden']}" for k in sz["ks"]]
        elif name == "hts":
            lines += [f"  HTSPPO vs FastPPO alpha={a}, {sz['hts_min']} steps" for a in sz["hts_alphas"]]
        elif name == "mjlab":
            why = mjlab_status()
            lines.append(f"  skipped: {why}" if why else f"  {MJLAB_TASK} N={sz['mjlab_n']}, FastPPO vs rsl_rl")
    return lines


def selected_parts(args) -> List[str]:
    if not args.parts:
        return list(PART_NAMES)
    return [p.strip() for p in args.parts.split(",") if p.strip()]


# ---------------------------------------------------------------------------
# report
# ---------------------------------------------------------------------------
def _f(x: Any, nd: int = 1) -> str:
    return R.fmt_num(x, nd)


def _arm_status(r: Dict[str, Any]) -> str:
    return "ok" if r.get("status") == "ok" else f"{r.get('status')}: {r.get('error') or ''}".strip()


def _tput_table(rows: List[Dict[str, Any]]) -> List[str]:
    return R.markdown_table(["env", "implementation", "N", "env-steps/s sampling", "env-steps/s whole iterations",
                             "iterations timed", "status"],
                            [[r["env"], r["impl"], r["num_envs"], R.fmt_sps(r.get("tput_sampling")),
                              R.fmt_sps(r.get("tput_overall")), r.get("tput_iters"), _arm_status(r)]
                             for r in rows]).splitlines()


def build_report(payload: Dict[str, Any]) -> str:
    info, parts = payload["meta"], payload["parts"]
    dev = info.get("device_name") or info["device"]
    out = [f"# GPU kit ({payload['mode']})", "",
           f"{info['date']}, {dev}; torch {info.get('torch')} (CUDA {info.get('cuda')}), ray {info.get('ray')}, "
           f"gymnasium {info.get('gymnasium')}, Python {info['python']}, {info['cpu_count']} CPU cores, "
           f"commit {info.get('git_commit')}; kit wall time {payload['wall_s'] / 60:.1f} min.", ""]
    if payload["mode"].startswith("tiny") or not str(info["device"]).startswith("cuda"):
        out += ["**Not a GPU run**: tiny sizes on " + str(info["device"]) + ", code paths only; no figure below "
                "says anything about GPU speed.", ""]
    out += ["| part | status | seconds |", "|---|---|---|"]
    for name, p in parts.items():
        out.append(f"| {name} | {p['status']}{(': ' + p['error']) if p.get('error') else ''} | {_f(p['seconds'])} |")
    out.append("")
    for name, p in parts.items():
        d = p.get("data") or {}
        if not d:
            continue
        out += [f"## {name}", ""]
        if name == "cuda_tests":
            out += R.markdown_table(["test", "outcome", "message"],
                                    [[c["test"], c["outcome"], c["message"]] for c in d["cases"]]).splitlines()
        elif name == "smoke":
            out += R.markdown_table(["algorithm", "env", "device", "status", "s", "error"],
                                    [[r["algorithm"], r.get("env", ""), r.get("device", ""), r["status"],
                                      _f(r.get("seconds")), r.get("error", "")] for r in d["rows"]]).splitlines()
        elif name == "throughput":
            out.append(f"Settings for both: horizon {TPUT['T']}, {TPUT['epochs']} epochs x {TPUT['minibatches']} "
                       f"minibatches, lr {TPUT['lr']:g}; {d.get('note', '')}.")
            out.append("")
            out += _tput_table(d["rows"])
            pairs = {}
            for r in d["rows"]:
                if r["env"] == "CartPole":
                    pairs.setdefault(r["num_envs"], {})[r["impl"]] = r.get("tput_overall")
            ratio = [[n, R.fmt_ratio(R.ratio(v.get("FastPPO"), v.get("single file")))] for n, v in sorted(pairs.items())]
            out += ["", "FastPPO / single file, whole iterations, CartPole:", ""]
            out += R.markdown_table(["N", "ratio"], ratio).splitlines()
        elif name in ("learn", "pql"):
            rows = []
            for r in d["rows"]:
                reached = r.get("reached")
                lp = r.get("last_point") or {}
                rows.append([r["label"], f"{r.get('target', PENDULUM_TARGET):g}",
                             _f(reached["t"]) if reached else "not reached",
                             R.fmt_steps(reached["steps"]) if reached else "–", _f(r.get("best_return")),
                             _f(r.get("final_t")), R.fmt_sps(r.get("sps_overall")),
                             _f(lp.get("beta_av_achieved"), 3), _f(lp.get("beta_pv_achieved"), 3), _arm_status(r)])
            if name == "pql":
                out += [d.get("layout", ""), ""]
            out += R.markdown_table(["arm", "target", "time to target (s)", "env steps at target", "best return",
                                     "ran (s)", "env-steps/s", "beta a:v", "beta p:v", "status"], rows).splitlines()
        elif name == "population":
            base = (d["rows"].get("1") or {}).get("update_ms")
            rows = []
            for k, r in d["rows"].items():
                per = (base * int(k) / r["update_ms"]) if base and r.get("update_ms") else None
                rows.append([k, _f(r.get("update_ms"), 2), R.fmt_ratio(per), _f(r.get("budget_s"), 2),
                             _f(r.get("peak_cuda_mb"), 0), r.get("error", "")])
            out.append(f"hidden {d['hidden']}, batch {d['batch']}; speed-up = K x (one member's update) / "
                       "(K members' update).")
            out.append("")
            out += R.markdown_table(["K", "update ms", "speed-up vs K x 1", "budget s", "peak CUDA MB", "error"],
                                    rows).splitlines()
        elif name == "hts":
            out.append(f"simulated step time {d['mean_step_ms']} ms mean, {d['variance']}, "
                       f"{d['executors']} executors.")
            out.append("")
            out += R.markdown_table(["alpha", "HTS env-steps/s", "sync env-steps/s", "HTS / sync", "learner idle",
                                     "executor idle"],
                                    [[r["alpha"], R.fmt_sps(r["hts_sps"]), R.fmt_sps(r["sync_sps"]),
                                      R.fmt_ratio(r["speedup"]), _f(r.get("learner_idle"), 2),
                                      _f(r.get("executor_idle"), 2)] for r in d["rows"]]).splitlines()
        elif name == "mjlab":
            if "skipped" in d:
                out.append(f"skipped: {d['skipped']}")
            elif "rows" in d and all("tput_overall" in r for r in d["rows"]):
                out += [f"PPO settings {d.get('settings')}; {d.get('note', '')}.", ""] + _tput_table(d["rows"])
            elif d and all(isinstance(v, dict) and "env_steps_per_s" in v for v in d.values()):
                out += [f"{MJLAB_TASK}, N = {payload.get('sizes', {}).get('mjlab_n')} (gpu kit)",
                        ""]
                out += R.markdown_table(["arm", "env-steps/s", "status"],
                                        [[k, R.fmt_sps(v["env_steps_per_s"]), v.get("status")]
                                         for k, v in d.items()]).splitlines()
            else:
                out.append("```")
                out.append(json.dumps(d, indent=1, default=str)[:4000])
                out.append("```")
        out.append("")
    return "\n".join(out)


def save_json(path: str, payload: Any) -> None:
    with open(path, "w") as f:
        json.dump(payload, f, indent=1, default=str)


def merge_payloads(payloads: List[Dict[str, Any]]) -> Dict[str, Any]:
    """Parts of several runs in one report: the kit order, a later run's
    part replacing an earlier one's; the first run's machine description."""
    parts: Dict[str, Any] = {}
    for pl in payloads:
        parts.update(pl["parts"])
    modes = sorted({pl["mode"] for pl in payloads})
    devices = {pl["meta"].get("device_name") or pl["meta"]["device"] for pl in payloads}
    meta = dict(payloads[0]["meta"])
    if len(devices) > 1:
        meta["device_name"] = " / ".join(sorted(devices)) + " (parts from different machines)"
    return dict(mode=f"{'+'.join(modes)}, {len(payloads)} run(s) merged", meta=meta, sizes=payloads[-1].get("sizes"),
                parts={n: parts[n] for n in PART_NAMES if n in parts},
                wall_s=sum(pl.get("wall_s", 0.0) for pl in payloads))


# ---------------------------------------------------------------------------
def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--quick", action="store_true", help="the whole kit in < 10 min on one GPU")
    p.add_argument("--tiny", action="store_true", help="tiny sizes: exercise every code path on a CPU")
    p.add_argument("--dry-run", action="store_true", help="list what would run, run nothing")
    p.add_argument("--device", default="cuda", help="torch device of every part (default %(default)s)")
    p.add_argument("--parts", default="", help=f"comma list of parts (default all): {', '.join(PART_NAMES)}")
    p.add_argument("--out", default=None, help="folder for gpu.md/gpu.json (default benchmarks/results on "
                                               "CUDA, a temp folder otherwise or with --tiny)")
    p.add_argument("--max-minutes", type=float, default=None, help="kit time budget (default 9 quick, 28 full)")
    p.add_argument("--merge", nargs="+", default=None, metavar="GPU_JSON",
                   help="run nothing: combine the parts of several gpu.json (later files win; e.g. a full run "
                        "split over several 10-minute device calls with --parts) into --out")
    p.add_argument("--child-call", default=None, help=argparse.SUPPRESS)
    p.add_argument("--kwargs", default="{}", help=argparse.SUPPRESS)
    args = p.parse_args(argv)

    if args.child_call:
        import logging
        import warnings

        warnings.filterwarnings("ignore")
        for name in ("ray", "ray.rllib", "ray.tune", "ray.data", "rllib_fast"):
            logging.getLogger(name).setLevel(logging.ERROR)
        res = CALLS[args.child_call](**json.loads(args.kwargs))
        print("RESULT " + json.dumps(res, default=str), flush=True)
        return 0
    if args.merge:
        merged = merge_payloads([json.load(open(f)) for f in args.merge])
        out_dir = args.out or RESULTS
        os.makedirs(out_dir, exist_ok=True)
        save_json(os.path.join(out_dir, "gpu.json"), merged)
        with open(os.path.join(out_dir, "gpu.md"), "w") as f:
            f.write(build_report(merged))
        print(f"merged {len(args.merge)} file(s) into {out_dir}/gpu.md and gpu.json")
        return 0
    bad = [x for x in selected_parts(args) if x not in PART_NAMES]
    if bad:
        p.error(f"--parts: unknown {', '.join(bad)}; allowed: {', '.join(PART_NAMES)}")
    # children import the working tree's rllib_fast (not an installed copy) and start their own local Ray
    os.environ["PYTHONPATH"] = os.pathsep.join([REPO] + [x for x in os.environ.get("PYTHONPATH", "").split(
        os.pathsep) if x])
    os.environ.setdefault("RAY_ADDRESS", "local")
    if args.device == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""   # parts that pick 'auto' devices stay on the CPU too
    if args.dry_run:
        print("\n".join(describe(args)))
        return 0
    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("--device cuda but torch sees no CUDA device; use --device cpu --tiny on a CPU machine, or "
              "--dry-run", file=sys.stderr)
        return 2
    mode = "tiny" if args.tiny else ("quick" if args.quick else "full")
    out_dir = args.out or (RESULTS if args.device.startswith("cuda") and not args.tiny
                           else tempfile.mkdtemp(prefix="gpu_kit_out_"))
    os.makedirs(out_dir, exist_ok=True)
    kit = Kit(args)
    payload: Dict[str, Any] = dict(mode=mode, meta=environment_info(args.device), sizes=kit.sz, parts={})
    print("\n".join(describe(args)), flush=True)

    def save() -> None:
        payload["wall_s"] = time.time() - kit.t0
        save_json(os.path.join(out_dir, "gpu.json"), payload)
        with open(os.path.join(out_dir, "gpu.md"), "w") as f:
            f.write(build_report(payload))

    for name, title, fn in PARTS:
        if name not in selected_parts(args):
            continue
        t = time.time()
        entry: Dict[str, Any] = dict(title=title)
        if kit.left() < 40:
            entry.update(status="skipped", error="kit time budget spent", seconds=0.0)
        else:
            print(f"\n== {name}: {title} ({kit.left() / 60:.1f} min left)", flush=True)
            try:
                data = fn(kit)
                err = data.get("skipped") or data.get("error") or problems(name, data)
                entry.update(status="skipped" if "skipped" in data else ("failed" if err else "ok"), data=data,
                             error=err)
            except Exception as e:  # noqa: BLE001 - one line in the report, the kit goes on
                traceback.print_exc()
                entry.update(status="error", error=one_line_error(e))
            entry["seconds"] = time.time() - t
        payload["parts"][name] = entry
        save()                                  # a report after every part: a cut-off run still leaves one
        print(f"== {name}: {entry['status']} {entry.get('error') or ''} ({entry['seconds']:.0f}s)", flush=True)
    save()
    print(f"\nwrote {os.path.join(out_dir, 'gpu.md')} and gpu.json ({(time.time() - kit.t0) / 60:.1f} min)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
