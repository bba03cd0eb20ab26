"""Shared benchmark runner: one subprocess per arm, time caps, peak memory,
learning curves (reports, tables and plots: ``_report.py``).

A benchmark script (``ppo_cartpole.py``, later ``dqn_*.py``, ``pql_*.py`` ...)
declares :class:`Arm` objects whose ``fn`` names a function
``fn(ctx: ArmContext, **kwargs)`` in an importable module (modules in this
folder are importable by their file name). :func:`run_arms` runs every
(arm, seed) **sequentially**, each in a fresh child process of this process
tree, so arms never compete for the cores and every arm pays its own imports,
``ray.init`` and memory:

* the child pins thread counts (``OMP/MKL_NUM_THREADS`` and
  ``torch.set_num_threads``) to the same value for every arm, optionally calls
  ``ray.init(num_cpus=..., include_dashboard=False, log_to_driver=False)``
  (``Arm.needs_ray``), calls the arm function, and always ``ray.shutdown()``\\s;
* the arm function builds its algorithm right after ``ctx.start_clock()`` and
  calls ``ctx.report(env_steps, episode_return)`` once per training iteration;
  ``report`` returns True when the arm should stop (target reached, time budget
  spent, or the throughput window measured);
* every report is appended as one JSON line to a result file the parent reads
  (so a child killed at the hard cap still leaves its curve behind), and the
  child's own stdout/stderr go to a log file (RLlib/Ray noise stays out of the
  console);
* the parent samples the RSS of the whole process tree (the child plus Ray's
  gcs/raylet/worker processes it spawns) every ``RSS_POLL_S`` and kills the
  child's process group at ``budget + grace``.

Times: ``startup_s`` = interpreter start to ``ctx.start_clock()`` (imports,
``ray.init``); every curve time ``t`` counts from ``ctx.start_clock()``, so it
includes building the algorithm and its envs.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:  # the sibling modules are imported by file name
    if __name__ == "__mp_main__":
        # a simulator worker spawned from an arm re-runs this file under this name: put the
        # folder last, so benchmarks/mjlab.py cannot shadow the mjlab package in that worker
        sys.path.append(HERE)
    else:
        sys.path.insert(0, HERE)
from _report import fmt_num, fmt_sps, fmt_steps, not_a_number  # noqa: E402

RSS_POLL_S = 0.5
_T_PROCESS_START = time.time()


# ---------------------------------------------------------------------------
# specs
# ---------------------------------------------------------------------------
@dataclass
class Arm:
    """One side of a comparison.

    ``key``: unique CLI name (``fastppo-64``); ``family``: what ratios group by
    (``FastPPO``); ``label``: the row label; ``fn``: ``"module:function"``;
    ``mode``: ``"learn"`` (run to a return target) or ``"throughput"``
    (env-steps/s of training iterations over a fixed window).
    """

    key: str
    family: str
    label: str
    fn: str
    kwargs: Dict[str, Any] = field(default_factory=dict)
    num_envs: Optional[int] = None
    mode: str = "learn"
    needs_ray: bool = False
    notes: str = ""


@dataclass
class RunSpec:
    arm: Dict[str, Any]
    seed: int
    budget_s: float
    target: float
    threads: int
    throughput_s: float = 10.0
    warmup_iters: int = 1
    ray_num_cpus: int = 2


# ---------------------------------------------------------------------------
# child side
# ---------------------------------------------------------------------------
class ArmContext:
    """What an arm function sees. Writes one JSON line per event to ``out_path``."""

    def __init__(self, spec: RunSpec, out_path: str):
        self.spec = spec
        self.seed = spec.seed
        self.budget_s = spec.budget_s
        self.target = spec.target
        self.mode = spec.arm["mode"]
        self.num_envs = spec.arm.get("num_envs")
        self.threads = spec.threads
        self._out = open(out_path, "a", buffering=1)
        self._t0: Optional[float] = None
        self._cpu0 = 0.0
        self.sample_s = 0.0
        self.sample_steps = 0
        self.reached: Optional[Dict[str, float]] = None
        self._warm: Optional[Dict[str, float]] = None
        self._n_reports = 0

    # -- output ------------------------------------------------------------
    def _write(self, kind: str, **payload: Any) -> None:
        self._out.write(json.dumps({"kind": kind, **payload}, default=_json_default) + "\n")

    def note(self, **info: Any) -> None:
        """Record free-form information (the hyperparameters actually used, ...)."""
        self._write("note", **info)

    # -- clocks --------------------------------------------------------------
    def start_clock(self) -> None:
        """Call right before constructing the algorithm/envs."""
        self._t0 = time.perf_counter()
        self._cpu0 = time.process_time()
        self._write("start", startup_s=time.time() - _T_PROCESS_START)

    @property
    def elapsed(self) -> float:
        return 0.0 if self._t0 is None else time.perf_counter() - self._t0

    def timed(self, obj: Any, method: str, steps_fn: Optional[Callable[..., int]] = None) -> None:
        """Wrap ``obj.method`` (an instance attribute shadows the class method)
        to accumulate the time spent in it as *sampling* time; ``steps_fn(result,
        args, kwargs)`` returns the env steps that call collected."""
        orig = getattr(obj, method)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            t = time.perf_counter()
            out = orig(*args, **kwargs)
            self.sample_s += time.perf_counter() - t
            if steps_fn is not None:
                self.sample_steps += int(steps_fn(out, args, kwargs))
            return out

        setattr(obj, method, wrapper)

    # -- progress ---------------------------------------------------------------
    def report(self, env_steps: float, episode_return: Optional[float], **extra: Any) -> bool:
        """One point per training iteration; returns True when the arm should stop."""
        t = self.elapsed
        ret = None if episode_return is None or not_a_number(episode_return) else float(episode_return)
        self._n_reports += 1
        self._write("point", t=t, steps=float(env_steps), ret=ret, sample_s=self.sample_s,
                    sample_steps=self.sample_steps, cpu=time.process_time() - self._cpu0, **extra)
        if self.mode == "throughput":
            if self._warm is None:
                if self._n_reports >= self.spec.warmup_iters:
                    self._warm = dict(t=t, steps=float(env_steps), sample_s=self.sample_s,
                                      sample_steps=self.sample_steps, n=self._n_reports)
                return t >= self.budget_s
            window = t - self._warm["t"]
            return (window >= self.spec.throughput_s and self._n_reports - self._warm["n"] >= 2) \
                or t >= self.budget_s
        if ret is not None and ret >= self.target and self.reached is None:
            self.reached = dict(t=t, steps=float(env_steps), cpu=time.process_time() - self._cpu0)
            self._write("reached", **self.reached)
            return True
        return t >= self.budget_s

    def close(self, **summary: Any) -> None:
        self._write("end", **summary)
        self._out.close()


def _json_default(o: Any) -> Any:
    for attr in ("item", "tolist"):
        if hasattr(o, attr):
            return getattr(o, attr)()
    return str(o)


def _resolve(fn: str) -> Callable[..., Any]:
    import importlib

    mod, _, name = fn.partition(":")
    if HERE not in sys.path:
        sys.path.insert(0, HERE)
    return getattr(importlib.import_module(mod), name)


def _quiet() -> None:
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    for name in ("ray", "ray.rllib", "ray.tune", "ray.data", "rllib_fast"):
        logging.getLogger(name).setLevel(logging.ERROR)


def child_main(spec_path: str, out_path: str) -> int:
    import resource

    with open(spec_path) as f:
        raw = json.load(f)
    spec = RunSpec(**raw)
    _quiet()
    import torch

    torch.set_num_threads(spec.threads)
    try:
        torch.set_num_interop_threads(spec.threads)
    except RuntimeError:
        pass
    ctx = ArmContext(spec, out_path)
    status, err = "ok", None
    ray_mod = None
    try:
        if spec.arm.get("needs_ray"):
            import logging

            import ray

            ray_mod = ray
            ray.init(num_cpus=spec.ray_num_cpus, include_dashboard=False, log_to_driver=False,
                     logging_level=logging.ERROR, configure_logging=True)
            _quiet()
        _resolve(spec.arm["fn"])(ctx, **spec.arm.get("kwargs", {}))
    except Exception as e:  # noqa: BLE001 - reported to the parent, which keeps going
        import traceback

        traceback.print_exc()
        status, err = "error", f"{type(e).__name__}: {e}"
    finally:
        ru = resource.getrusage(resource.RUSAGE_SELF)
        rss_kb = ru.ru_maxrss  # KiB on Linux
        try:
            ctx.close(status=status, error=err, peak_rss_proc_mb=rss_kb / 1024.0,
                      cpu_s=ru.ru_utime + ru.ru_stime, elapsed_s=ctx.elapsed,
                      sample_s=ctx.sample_s, sample_steps=ctx.sample_steps)
        finally:
            if ray_mod is not None and ray_mod.is_initialized():
                ray_mod.shutdown()
    return 0 if status == "ok" else 1


# ---------------------------------------------------------------------------
# parent side
# ---------------------------------------------------------------------------
def _tree_rss(proc: "psutil.Process", seen: Dict[int, float], cpu: Dict[int, float]) -> float:  # noqa: F821
    """Sum of RSS over ``proc`` and its descendants (MiB); records each pid's
    start time in ``seen`` and its latest CPU seconds in ``cpu``."""
    import psutil

    total = 0
    try:
        procs = [proc] + proc.children(recursive=True)
    except psutil.Error:
        return 0.0
    for p in procs:
        try:
            with p.oneshot():
                total += p.memory_info().rss
                t = p.cpu_times()
                cpu[p.pid] = t.user + t.system
            seen.setdefault(p.pid, p.create_time())
        except psutil.Error:
            pass
    return total / 2 ** 20


def _busy_cpu_s() -> float:
    """CPU-seconds the whole machine has been busy (all cores)."""
    import psutil

    t = psutil.cpu_times()
    return sum(t) - t.idle - getattr(t, "iowait", 0.0)


def _reap(seen: Dict[int, float], root_pid: int) -> None:
    """Terminate what this child left behind (e.g. Ray processes of a killed run):
    only the processes observed in its tree, matched by pid and start time."""
    import psutil

    leftovers = []
    for pid, created in seen.items():
        if pid == root_pid:
            continue
        try:
            p = psutil.Process(pid)
            if abs(p.create_time() - created) < 1e-3:
                p.terminate()
                leftovers.append(p)
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(leftovers, timeout=5)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass


def run_one(spec: RunSpec, logdir: str, grace_s: float = 90.0, verbose: bool = True) -> Dict[str, Any]:
    """Run one (arm, seed) in a child process; return its parsed record."""
    import psutil

    arm = spec.arm
    tag = f"{arm['mode']}_{arm['key']}_s{spec.seed}"
    spec_path = os.path.join(logdir, tag + ".spec.json")
    out_path = os.path.join(logdir, tag + ".jsonl")
    log_path = os.path.join(logdir, tag + ".log")
    with open(spec_path, "w") as f:
        json.dump(asdict(spec), f)
    if os.path.exists(out_path):
        os.remove(out_path)
    env = dict(os.environ)
    t = str(spec.threads)
    env.update(OMP_NUM_THREADS=t, MKL_NUM_THREADS=t, OPENBLAS_NUM_THREADS=t, NUMEXPR_NUM_THREADS=t,
               PYTHONWARNINGS="ignore", RAY_USAGE_STATS_ENABLED="0", RAY_DEDUP_LOGS="0",
               TF_CPP_MIN_LOG_LEVEL="3", PYTHONUNBUFFERED="1")
    hard_cap = spec.budget_s + grace_s
    busy0, self0 = _busy_cpu_s(), sum(os.times()[:2])
    t0 = time.time()
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--child", spec_path, out_path],
                                stdout=log, stderr=subprocess.STDOUT, env=env, cwd=os.path.dirname(HERE),
                                start_new_session=True)
        ps = psutil.Process(proc.pid)
        seen: Dict[int, float] = {}
        cpu: Dict[int, float] = {}
        peak_tree, killed = 0.0, False
        while proc.poll() is None:
            peak_tree = max(peak_tree, _tree_rss(ps, seen, cpu))
            if time.time() - t0 > hard_cap:
                killed = True
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()
                break
            time.sleep(RSS_POLL_S)
        _reap(seen, proc.pid)
    wall = time.time() - t0
    busy1 = _busy_cpu_s()
    rec = parse_result(out_path)
    # the root's last 0.5 s sample misses its final CPU; its own rusage does not
    cpu[proc.pid] = max(cpu.get(proc.pid, 0.0), rec.get("cpu_s") or 0.0)
    ours = sum(cpu.values()) + (sum(os.times()[:2]) - self0)
    # CPU used by processes outside this benchmark during the run, in cores (contention check)
    foreign = max(0.0, (busy1 - busy0 - ours) / max(wall, 1e-9))
    rec.update(key=arm["key"], family=arm["family"], label=arm["label"], mode=arm["mode"],
               num_envs=arm.get("num_envs"), seed=spec.seed, budget_s=spec.budget_s, target=spec.target,
               threads=spec.threads, peak_rss_tree_mb=peak_tree, wall_total_s=wall,
               foreign_cpu_cores=foreign, returncode=proc.returncode, killed=killed, log=log_path, notes_arm=arm.get("notes", ""))
    if killed:
        rec["status"] = "killed"
    if rec.get("status") is None:
        rec["status"] = f"crashed (rc={proc.returncode})"
    if verbose:
        print("  " + one_line(rec), flush=True)
        if rec["status"] not in ("ok",):
            print(f"    see {log_path}", flush=True)
    return rec


def parse_result(path: str) -> Dict[str, Any]:
    rec: Dict[str, Any] = {"points": [], "notes": {}, "reached": None, "status": None, "startup_s": None}
    if not os.path.exists(path):
        return rec
    with open(path) as f:
        for line in f:
            try:
                ev = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by a kill
            kind = ev.pop("kind")
            if kind == "point":
                rec["points"].append(ev)
            elif kind == "note":
                rec["notes"].update(ev)
            elif kind == "start":
                rec["startup_s"] = ev["startup_s"]
            elif kind == "reached":
                rec["reached"] = ev
            elif kind == "end":
                rec.update(ev)
    summarize(rec)
    return rec


def summarize(rec: Dict[str, Any]) -> None:
    """Derive the per-run numbers from the curve (in place)."""
    pts = rec["points"]
    rec["final_t"] = pts[-1]["t"] if pts else None
    rec["final_steps"] = pts[-1]["steps"] if pts else None
    rets = [p["ret"] for p in pts if p["ret"] is not None]
    rec["best_return"] = max(rets) if rets else None
    rec["final_return"] = rets[-1] if rets else None
    rec["sps_overall"] = (pts[-1]["steps"] / pts[-1]["t"]) if pts and pts[-1]["t"] > 0 else None
    last = pts[-1] if pts else None
    rec["sps_sampling"] = (last["sample_steps"] / last["sample_s"]) if last and last["sample_s"] > 0 \
        and last["sample_steps"] > 0 else None
    # throughput window: everything after the warm-up report(s)
    warm = int(rec.get("warmup_iters", 1))
    if len(pts) > warm:
        a, b = pts[warm - 1], pts[-1]
        dt = b["t"] - a["t"]
        rec["tput_overall"] = (b["steps"] - a["steps"]) / dt if dt > 0 else None
        ds = b["sample_s"] - a["sample_s"]
        dn = b["sample_steps"] - a["sample_steps"]
        rec["tput_sampling"] = dn / ds if ds > 0 and dn > 0 else None
        rec["tput_window_s"] = dt
        dc = b.get("cpu", 0.0) - a.get("cpu", 0.0)
        rec["tput_per_cpu_s"] = (b["steps"] - a["steps"]) / dc if dc > 0 else None
        rec["tput_iters"] = len(pts) - warm
    else:
        rec["tput_overall"] = rec["tput_sampling"] = rec["tput_window_s"] = rec["tput_per_cpu_s"] = None
        rec["tput_iters"] = 0


def one_line(rec: Dict[str, Any]) -> str:
    head = f"{rec['label']:<34s} seed={rec['seed']} [{rec['status']}] (other load {fmt_num(rec.get('foreign_cpu_cores'), 2)} cores)"
    if rec["mode"] == "throughput":
        return (f"{head} {fmt_sps(rec.get('tput_overall'))} env-steps/s overall, "
                f"{fmt_sps(rec.get('tput_sampling'))} sampling, {rec.get('tput_iters')} iters")
    r = rec.get("reached")
    reach = (f"reached {rec['target']:g} at {r['t']:.1f}s / {fmt_steps(r['steps'])} steps" if r
             else f"not reached (best {fmt_num(rec.get('best_return'))} in {fmt_num(rec.get('final_t'))}s)")
    return f"{head} {reach}; {fmt_sps(rec.get('sps_overall'))} env-steps/s; peak RSS {fmt_num(rec.get('peak_rss_proc_mb'), 0)} MB"


def wait_for_quiet(max_cores: float, timeout_s: float, window_s: float = 2.0) -> Dict[str, float]:
    """Before an arm: wait until processes outside this benchmark use less than
    ``max_cores`` cores (measured over ``window_s``), at most ``timeout_s``.
    Returns the wait and the last measured load."""
    t0 = time.time()
    while True:
        busy0, self0 = _busy_cpu_s(), sum(os.times()[:2])
        time.sleep(window_s)
        load = max(0.0, (_busy_cpu_s() - busy0 - (sum(os.times()[:2]) - self0)) / window_s)
        if load < max_cores or time.time() - t0 >= timeout_s:
            return dict(waited_s=time.time() - t0, load_before=load)


def run_arms(arms: Sequence[Arm], seeds: Sequence[int], *, budget_s: float, target: float, threads: int,
             logdir: str, throughput_s: float = 10.0, throughput_budget_s: Optional[float] = None,
             grace_s: float = 90.0, quiet_cores: Optional[float] = None,
             quiet_timeout_s: float = 60.0) -> List[Dict[str, Any]]:
    """Run every arm (learn arms once per seed, throughput arms once) sequentially.
    With ``quiet_cores``, each arm first waits (up to ``quiet_timeout_s``) for
    other processes on the machine to use fewer than that many cores."""
    os.makedirs(logdir, exist_ok=True)
    out = []
    for arm in arms:
        run_seeds = seeds if arm.mode == "learn" else seeds[:1]
        for seed in run_seeds:
            b = budget_s if arm.mode == "learn" else (throughput_budget_s or max(3 * throughput_s, 30.0))
            spec = RunSpec(arm=asdict(arm), seed=seed, budget_s=b, target=target, threads=threads,
                           throughput_s=throughput_s)
            quiet = wait_for_quiet(quiet_cores, quiet_timeout_s) if quiet_cores is not None else {}
            rec = run_one(spec, logdir, grace_s=grace_s)
            rec.update(quiet)
            out.append(rec)
    return out


# ---------------------------------------------------------------------------
# CLI helpers for benchmark scripts
# ---------------------------------------------------------------------------
def run_arms_with_args(arms: Sequence[Arm], seeds: Sequence[int], args: argparse.Namespace, *, target: float,
                       logdir: str) -> List[Dict[str, Any]]:
    """:func:`run_arms` with the flags of :func:`add_common_args` (budget, threads,
    throughput window with a 60 s floor on its cap, waiting for a quiet machine)."""
    return run_arms(arms, seeds, budget_s=args.budget, target=target, threads=args.threads, logdir=logdir,
                    throughput_s=args.throughput_s, throughput_budget_s=max(3 * args.throughput_s, 60.0),
                    quiet_cores=args.wait_quiet if args.wait_quiet >= 0 else None,
                    quiet_timeout_s=args.quiet_timeout)


def add_common_args(p: argparse.ArgumentParser, *, budget: float = 120.0, target: float = 475.0) -> None:
    p.add_argument("--budget", type=float, default=budget, help="time cap per learn arm, seconds "
                   "(from algorithm construction; default %(default)s)")
    p.add_argument("--arms", default="all", help="comma list of arm keys or families (see --list); "
                   "prefix a key with 'tput:' for a throughput arm")
    p.add_argument("--seeds", default="0", help="comma list of seeds for learn arms (default %(default)s)")
    p.add_argument("--target", type=float, default=target, help="return threshold (default %(default)s)")
    p.add_argument("--threads", type=int, default=1, help="torch/OMP threads in every arm (default %(default)s)")
    p.add_argument("--throughput-s", type=float, default=10.0, help="measured window per throughput arm")
    p.add_argument("--no-throughput", action="store_true", help="skip the throughput arms")
    p.add_argument("--no-learn", action="store_true", help="skip the learn arms")
    p.add_argument("--quick", action="store_true", help="smoke run: small budgets, output to the log dir")
    p.add_argument("--out-dir", default=None, help="where the .md/.png/.json go (default benchmarks/results)")
    p.add_argument("--logdir", default=None, help="child logs and raw curves (default: a temp dir)")
    p.add_argument("--replot", default=None, metavar="JSON", help="rebuild table and plot from a saved .json")
    p.add_argument("--list", action="store_true", help="list arm keys and exit")
    p.add_argument("--wait-quiet", type=float, default=0.3, metavar="CORES",
                   help="before each arm wait (<= --quiet-timeout s) until other processes use fewer than "
                   "this many cores; negative: do not wait (default %(default)s)")
    p.add_argument("--quiet-timeout", type=float, default=60.0, help="max wait per arm for --wait-quiet")
    p.add_argument("--update", default=None, metavar="JSON", help="run the selected arms and replace their "
                   "records (same mode, key, seed) in this saved .json; report written next to it")


def select_arms(arms: Sequence[Arm], spec: str) -> List[Arm]:
    if spec in ("all", ""):
        return list(arms)
    wanted = [s.strip() for s in spec.split(",") if s.strip()]
    out = []
    for a in arms:
        full = a.key if a.mode == "learn" else "tput:" + a.key
        fam_key = a.key.rsplit("-", 1)[0]
        if any(w in (full, fam_key, a.family) or (w == a.key and a.mode == "learn") for w in wanted):
            out.append(a)
    unknown = [w for w in wanted if not any(w in (a.key, "tput:" + a.key, a.key.rsplit("-", 1)[0], a.family)
                                             for a in arms)]
    if unknown:
        raise SystemExit(f"unknown arm(s) {unknown}; see --list")
    return out


def merge_records(old: Sequence[Dict[str, Any]], new: Sequence[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """``old`` with every record of the same (mode, key, seed) as one in ``new``
    replaced by it (in place, keeping the order); new ones appended."""
    ident = lambda r: (r["mode"], r["key"], r["seed"])  # noqa: E731
    fresh = {ident(r): r for r in new}
    out = [fresh.pop(ident(r), r) for r in old]
    return out + [r for r in new if ident(r) in fresh]


def merge_update(update_path: str, records: List[Dict[str, Any]], meta: Dict[str, Any],
                 seeds: Sequence[int], note: Optional[str] = None) -> tuple:
    """``--update JSON``: the saved result with the re-run arms' records
    replaced, its meta marked as updated. Returns ``(records, meta, out_dir)``
    with ``out_dir`` the saved result's folder. With ``note``, ``updated``
    keeps every update's "date: note" (joined by "; ") instead of the date."""
    with open(update_path) as f:
        old = json.load(f)
    records = merge_records(old["records"], records)
    updated = meta["date"]
    if note is not None:
        earlier = old["meta"].get("updated")
        updated = f"{earlier}; {updated}: {note}" if earlier else f"{updated}: {note}"
    meta = dict(old["meta"], updated=updated, update_min=meta["total_min"],
                seeds=sorted(set(old["meta"]["seeds"]) | set(seeds)))
    return records, meta, os.path.dirname(os.path.abspath(update_path))


def default_logdir(name: str) -> str:
    return tempfile.mkdtemp(prefix=f"bench_{name}_")


def save_json(path: str, payload: Any) -> None:
    with open(path, "w") as f:
        json.dump(payload, f, indent=1, default=_json_default)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        sys.exit(child_main(sys.argv[2], sys.argv[3]))
    print("benchmarks/_harness.py is a library; run a benchmark script such as benchmarks/ppo_cartpole.py")
    sys.exit(2)
