"""The benchmark protocol (docs/benchmarks.md): the one place that starts the clock,
reads the success metric, measures the cores and writes a row.

Every (arm, seed) runs in a child process of its own (``run_child``). The clock is
the child's wall time from its process start (the kernel's start time of the
process: interpreter start, imports, build, simulator start, evaluations and
checkpoints are all on it). An adapter (``adapters.py``) only builds and steps its
library and hands ``Session.report`` the returns of the training episodes finished
since its last report; the session keeps the last-100 window per group (one group,
or one per population member), decides success and writes every row, so no arm can
be judged by another test. Greedy evaluations go through ``Session.evaluate`` at the
arm's cadence: their wall time stays on the clock and is left out of the
training-only time beside it. Cores = CPU seconds of the child's whole process tree
(itself, live descendants, reaped children) / wall time.
"""
from __future__ import annotations

import collections
import json
import math
import os
import signal
import subprocess
import sys
import time
from typing import Any, Callable, Deque, Dict, Iterable, List, Mapping, Optional, Sequence, Union

#: The protocol's name as results files record it; change it when a rule below changes.
PROTOCOL = "last100-train-return/v1"
#: Finished training episodes in the success window (the same for every arm).
WINDOW = 100
#: Seconds between two CPU-tree samples written with curve points (reached/end rows always sample).
CPU_SAMPLE_S = 0.5
HERE = os.path.dirname(os.path.abspath(__file__))
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS")


def process_start_time(pid: Optional[int] = None) -> float:
    """Wall-clock time (s since the epoch) at which process ``pid`` started: its age
    from ``/proc`` (start ticks against the uptime, 10 ms resolution) subtracted from
    now. psutil's ``create_time`` adds the boot time, which the kernel gives in
    whole seconds (up to 1 s off)."""
    try:
        with open(f"/proc/{pid or os.getpid()}/stat") as f:
            start_ticks = float(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return time.time() - (uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        import psutil

        return psutil.Process(pid or os.getpid()).create_time()


class TreeCpu:
    """User+system CPU seconds of a process and its whole tree, as a non-decreasing
    count: the process itself, every descendant it has seen (each at the most CPU
    it was seen with, so one that exits, e.g. a Ray worker at shutdown, keeps its
    share), and the children it reaped (the kernel's children_* times, which carry
    reaped grandchildren too), whichever of the two ways of adding them up is larger."""

    def __init__(self, pid: Optional[int] = None):
        self.pid = pid or os.getpid()
        self.seen: Dict[tuple, float] = {}
        self.last = 0.0

    def __call__(self) -> float:
        import psutil

        root = psutil.Process(self.pid)
        t = root.cpu_times()
        own, reaped, live = t.user + t.system, t.children_user + t.children_system, 0.0
        for p in root.children(recursive=True):
            try:
                c = p.cpu_times()
                v = c.user + c.system + c.children_user + c.children_system
                key = (p.pid, p.create_time())
            except psutil.Error:
                continue
            self.seen[key] = max(self.seen.get(key, 0.0), v)
            live += v
        self.last = max(self.last, own + sum(self.seen.values()), own + reaped + live)
        return self.last


def tree_cpu_s(pid: Optional[int] = None) -> float:
    """One reading of ``TreeCpu`` (a process tree's CPU seconds now)."""
    return TreeCpu(pid)()


Returns = Union[None, Sequence[float], Mapping[str, Sequence[float]]]


class Session:
    """One (arm, seed) run as the child sees it.

    ``spec`` keys: ``arm`` (name), ``seed``, ``target`` (success threshold, or None),
    ``budget_s`` (wall-clock cap from process start), ``mode`` (``target``: stop at
    the target; ``fixed``: run the whole budget and record the curve),
    ``eval_every_s`` (greedy-evaluation cadence, or None), ``window_s`` (rate runs: stop
    that long after the first report, the warm-up), ``params`` (the adapter's).
    """

    def __init__(self, spec: Mapping[str, Any], out_path: Optional[str] = None,
                 t0: Optional[float] = None):
        self.spec = dict(spec)
        self.params: Dict[str, Any] = dict(spec.get("params") or {})
        self.seed = int(spec.get("seed", 0))
        self.target = spec.get("target")
        self.budget_s = float(spec.get("budget_s", 60.0))
        self.mode = spec.get("mode", "target")
        self.eval_every_s = spec.get("eval_every_s")
        self.window_s = spec.get("window_s")
        self.first_report_t: Optional[float] = None
        self.t0 = process_start_time() if t0 is None else t0
        self.out = open(out_path, "a") if out_path else None
        self.rows: List[Dict[str, Any]] = []
        self.windows: Dict[str, Deque[float]] = collections.defaultdict(lambda: collections.deque(maxlen=WINDOW))
        self.window_mean: Optional[float] = None
        self.episodes = 0
        self.env_steps = 0
        self.train_t0: Optional[float] = None
        self.eval_s = 0.0
        self.last_eval_t: Optional[float] = None
        self.last_cpu_t = -math.inf
        self.last_cpu = 0.0
        self.tree_cpu = TreeCpu()
        self.reached: Optional[Dict[str, Any]] = None
        self.done = False

    # -- time ----------------------------------------------------------------
    def now(self) -> float:
        """Seconds on the clock (since the process started)."""
        return time.time() - self.t0

    def training_started(self) -> None:
        """The adapter's build is done: training-only time counts from here."""
        if self.train_t0 is None:
            self.train_t0 = time.time()
            self.write("start", startup_s=self.now())

    def train_s(self) -> float:
        """Training-only time: since ``training_started`` minus evaluation time."""
        return 0.0 if self.train_t0 is None else time.time() - self.train_t0 - self.eval_s

    def cpu_s(self, force: bool = False) -> float:
        if force or self.now() - self.last_cpu_t >= CPU_SAMPLE_S:
            self.last_cpu, self.last_cpu_t = self.tree_cpu(), self.now()
        return self.last_cpu

    # -- rows ----------------------------------------------------------------
    def write(self, kind: str, **row: Any) -> Dict[str, Any]:
        row = {"kind": kind, **row}
        self.rows.append(row)
        if self.out is not None:
            self.out.write(json.dumps(row, default=float) + "\n")
            self.out.flush()
        return row

    def note(self, **info: Any) -> None:
        """Free-form facts about the arm (settings it resolved, device, ...)."""
        self.write("note", **info)

    # -- the metric ----------------------------------------------------------
    def reset_group(self, group: str) -> None:
        """Forget a group's window (a population member whose policy was replaced)."""
        self.windows.pop(str(group), None)

    def metric(self) -> Optional[float]:
        """Mean return of the last ``WINDOW`` finished training episodes; with groups
        (population members) the best group's. None until a window is full. An arm
        that can only read its library's own last-``WINDOW`` mean (a run behind a CLI)
        hands it over as ``window_mean`` instead."""
        if self.window_mean is not None:
            return self.window_mean
        full = [sum(w) / len(w) for w in self.windows.values() if len(w) == WINDOW]
        return max(full) if full else None

    def report(self, env_steps: int, returns: Returns = None, window_mean: Optional[float] = None,
               at: Optional[float] = None, **info: Any) -> bool:
        """Hand over the env-step counter (lifetime) and the returns of the training
        episodes finished since the last report: a list, or ``{group: list}``; or,
        for a library whose own metric is the mean of its last ``WINDOW`` finished
        episodes and whose episodes the arm cannot see, that mean (``window_mean``;
        None until the library's window is full). Returns True when the arm must stop
        (target reached in ``target`` mode, or the budget spent). ``at``: the wall time
        (epoch seconds) the library produced this result, for an arm that reads its
        results later than they happen (a CLI run's result files, synced in batches);
        the point is placed there on the clock, and its CPU sample keeps its own time
        (``cpu_t``) so the cores column is not inflated."""
        if self.train_t0 is None:
            self.training_started()
        if window_mean is not None:
            self.window_mean = float(window_mean)
        groups = returns if isinstance(returns, Mapping) else {"": returns or []}
        for g, rets in groups.items():
            vals = [float(r) for r in rets if r == r]
            self.windows[str(g)].extend(vals)
            self.episodes += len(vals)
        self.env_steps = int(env_steps)
        value = self.metric()
        read_t = self.now()
        t = read_t if at is None else min(read_t, float(at) - self.t0)
        hit = self.target is not None and value is not None and value >= self.target
        row = dict(t=t, train_s=max(0.0, self.train_s() - (read_t - t)), steps=self.env_steps, ret=value,
                   episodes=self.episodes, cpu_s=self.cpu_s(force=hit and self.reached is None), **info)
        if at is not None:
            row["cpu_t"] = self.last_cpu_t
        self.write("point", **row)
        if hit and self.reached is None:
            keys = ("t", "train_s", "steps", "ret", "cpu_s") + (("cpu_t",) if at is not None else ())
            self.reached = self.write("reached", **{k: row[k] for k in keys})
        if self.first_report_t is None:
            self.first_report_t = t
        window_done = bool(self.window_s) and t - self.first_report_t >= float(self.window_s)
        self.done = (self.reached is not None and self.mode == "target") or t >= self.budget_s or window_done
        return self.done

    # -- evaluation ----------------------------------------------------------
    def evaluation_due(self) -> bool:
        if not self.eval_every_s:
            return False
        return self.last_eval_t is None or self.now() - self.last_eval_t >= float(self.eval_every_s)

    def evaluate(self, fn: Callable[[], float]) -> Optional[float]:
        """Run the arm's greedy evaluation when due; its time stays on the clock and
        leaves the training-only time. The evaluation return is shown, never judged."""
        if not self.evaluation_due():
            return None
        t = time.time()
        value = float(fn())
        dt = time.time() - t
        self.eval_s += dt
        self.last_eval_t = self.now()
        self.write("eval", t=self.now(), steps=self.env_steps, ret=value, eval_s=dt)
        return value

    def finish(self, status: str = "ok", error: Optional[str] = None) -> None:
        self.write("end", status=status, error=error, t=self.now(), train_s=self.train_s(), eval_s=self.eval_s,
                   steps=self.env_steps, ret=self.metric(), cpu_s=self.cpu_s(force=True))
        if self.out is not None:
            self.out.close()
            self.out = None


# ---------------------------------------------------------------------------
# child side
# ---------------------------------------------------------------------------
def resolve(adapter: str) -> Callable[..., None]:
    """``"module:function"`` (module under benchmarks/), or a function name of adapters.py."""
    import importlib

    mod, _, fn = adapter.rpartition(":")
    if HERE not in sys.path:
        sys.path.insert(0, HERE)
    return getattr(importlib.import_module(mod or "adapters"), fn)


def child_main(spec_path: str, out_path: str) -> int:
    with open(spec_path) as f:
        spec = json.load(f)
    session = Session(spec, out_path)
    if spec.get("threads"):
        import torch

        torch.set_num_threads(int(spec["threads"]))
    try:
        resolve(spec["adapter"])(session, **session.params)
    except BaseException as err:  # noqa: BLE001 - the row says what failed; the exit code too
        import traceback

        traceback.print_exc()
        session.finish("error", f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err).strip() else ''}")
        return 1
    session.finish()
    return 0


# ---------------------------------------------------------------------------
# parent side
# ---------------------------------------------------------------------------
def child_env(threads: Optional[int]) -> Dict[str, str]:
    """The child's environment: the user's own, plus thread variables only when the
    arm asks for a thread count (a ``threads: None`` arm runs as a user's shell would)."""
    env = dict(os.environ)
    env.update(PYTHONUNBUFFERED="1", RAY_USAGE_STATS_ENABLED="0")
    if threads:
        env.update({v: str(threads) for v in THREAD_VARS})
    root = os.path.dirname(HERE)
    env["PYTHONPATH"] = os.pathsep.join([root, *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]])
    return env


def parse_rows(path: str) -> List[Dict[str, Any]]:
    rows = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:
                    pass  # a line cut by a kill
    return rows


def summarize(rows: Iterable[Dict[str, Any]]) -> Dict[str, Any]:
    """One run's record from its rows: the curve, the reached row, the end row, notes."""
    rec: Dict[str, Any] = {"points": [], "evals": [], "notes": {}, "reached": None, "end": None, "startup_s": None}
    for r in rows:
        kind = r.get("kind")
        body = {k: v for k, v in r.items() if k != "kind"}
        if kind == "point":
            rec["points"].append(body)
        elif kind == "eval":
            rec["evals"].append(body)
        elif kind == "note":
            rec["notes"].update(body)
        elif kind == "start":
            rec["startup_s"] = body["startup_s"]
        elif kind == "reached":
            rec["reached"] = body
        elif kind == "end":
            rec["end"] = body
    end = rec["end"] or (rec["points"][-1] if rec["points"] else {})
    rec["status"] = (rec["end"] or {}).get("status", "killed")
    rec["wall_s"] = end.get("t")
    rec["cores"] = (end["cpu_s"] / end["t"]) if end.get("cpu_s") and end.get("t") else None
    r = rec["reached"]
    rec["cores_to_target"] = (r["cpu_s"] / (r.get("cpu_t") or r["t"])) if r and r.get("t") else None
    rec["eval_s"] = sum(e["eval_s"] for e in rec["evals"])
    return rec


def run_child(spec: Dict[str, Any], logdir: str, grace_s: float = 60.0, verbose: bool = True) -> Dict[str, Any]:
    """Run one (arm, seed) in a child process (its own session, killed at budget +
    grace); return its record: the spec's identity plus ``summarize``'s fields."""
    os.makedirs(logdir, exist_ok=True)
    tag = f"{spec['arm']}_s{spec['seed']}".replace("/", "_").replace(":", "_")
    spec_path, out_path, log_path = (os.path.join(logdir, tag + ext) for ext in (".spec.json", ".jsonl", ".log"))
    with open(spec_path, "w") as f:
        json.dump(spec, f)
    if os.path.exists(out_path):
        os.remove(out_path)
    t0 = time.time()
    killed = False
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--child", spec_path, out_path],
                                stdout=log, stderr=subprocess.STDOUT, env=child_env(spec.get("threads")),
                                cwd=os.path.dirname(HERE), start_new_session=True)
        try:
            proc.wait(timeout=float(spec["budget_s"]) + grace_s)
        except subprocess.TimeoutExpired:
            killed = True
        finally:
            try:  # the child's whole session: simulator subprocesses, Ray workers it left
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
    rec = summarize(parse_rows(out_path))
    if killed and rec["end"] is not None:
        rec["killed_after_end"] = True   # hung while exiting: the run itself had ended
    elif killed:
        rec["status"] = "killed"
    elif rec["end"] is None:
        rec["status"] = f"crashed (rc={proc.returncode})"
    rec.update({k: spec.get(k) for k in ("arm", "seed", "target", "budget_s", "mode", "threads", "eval_every_s")},
               log=log_path, parent_wall_s=time.time() - t0)
    if verbose:
        r = rec["reached"]
        what = (f"reached {spec.get('target')} at {r['t']:.1f}s ({r['steps']} steps)" if r else
                f"not reached (last {rec['points'][-1]['ret'] if rec['points'] else None})")
        cores = f"{rec['cores']:.2f}" if rec["cores"] is not None else "?"
        print(f"  {spec['arm']} seed={spec['seed']} [{rec['status']}] {what}; cores {cores}", flush=True)
        if rec["status"] != "ok":
            print(f"    see {log_path}", flush=True)
    return rec


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        sys.exit(child_main(sys.argv[2], sys.argv[3]))
    print("benchmarks/protocol.py is the harness's core; run benchmarks/bench.py")
    sys.exit(2)
