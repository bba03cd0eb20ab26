"""The one benchmark runner (protocol: docs/benchmarks.md).

    python benchmarks/bench.py SUITE [--seeds 100-104] [--arms a,b] [--budget S] [--out DIR]
    python benchmarks/bench.py SUITE --stop-at-bar      # fixed-wall-time suite: stop each non-reference
                                                        # run at the reference's bar (from the results file)
    python benchmarks/bench.py SUITE --report-only      # table + plot again from the results file
    python benchmarks/bench.py SUITE --machine          # only the machine line (CPU, simulator, update)
    python benchmarks/bench.py --list                   # suites and their arms

Each (arm, seed) runs in its own child process, one after the other
(``protocol.run_child``). Results go to ``OUT/SUITE.json`` (every run's curve, the
commit, the protocol and the machine line; a re-run replaces the same (arm, seed)),
the table to ``OUT/SUITE.md`` and the curves to ``OUT/SUITE.png``.
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "results")
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import adapters  # noqa: E402
import protocol  # noqa: E402
from suites import SUITES, Arm, Suite  # noqa: E402


# ---------------------------------------------------------------------------
# running
# ---------------------------------------------------------------------------
def make_spec(suite: Suite, arm: Arm, seed: int, budget_s: Optional[float] = None, **extra: Any) -> Dict[str, Any]:
    """The child's spec for one (arm, seed) of a suite."""
    return dict(arm=arm.name, adapter=arm.adapter, params=arm.params, seed=seed, target=suite.target,
                budget_s=float(budget_s or suite.budget_s), mode=suite.mode, threads=arm.threads,
                eval_every_s=suite.eval_every_s, window_s=suite.window_s, **extra)


def commit() -> str:
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                             timeout=10).stdout.strip()
        # the code an arm runs; results files (written by these very runs) do not make it dirty
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "rllib_fast", "benchmarks", "tune_configs",
                                ":(exclude)benchmarks/results"],
                               cwd=REPO, capture_output=True, text=True, timeout=10).stdout.strip()
        return sha + ("+dirty" if dirty else "") if sha else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def load_results(path: str) -> Dict[str, Any]:
    if os.path.exists(path):
        with open(path) as f:
            return json.load(f)
    return {"runs": []}


def save_results(path: str, data: Dict[str, Any]) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        json.dump(data, f, indent=1, default=float)


def merge_run(data: Dict[str, Any], rec: Dict[str, Any]) -> None:
    """Add ``rec``, replacing an earlier run of the same (arm, seed)."""
    data["runs"] = [r for r in data["runs"] if (r["arm"], r["seed"]) != (rec["arm"], rec["seed"])] + [rec]


def check_evaluation(suite: Suite, arms: Sequence[Arm]) -> None:
    if suite.eval_every_s:
        missing = [a.name for a in arms if a.adapter not in adapters.EVALUATES]
        if missing:
            raise SystemExit(f"suite {suite.name}: evaluation every {suite.eval_every_s} s needs every arm to "
                             f"evaluate; these cannot: {', '.join(missing)}")


def bar_spec(spec: Dict[str, Any], data: Dict[str, Any], suite: Suite, arm: Arm) -> Dict[str, Any]:
    """``--stop-at-bar``: in a fixed-wall-time suite, a non-reference arm is only timed to the
    reference's bar, so it may stop there instead of running the whole budget (a 20-minute robot
    run that reaches the bar in 5 minutes costs 5). The bar comes from the reference's runs
    already in the results file; the run records it (``stopped_at_bar``) and the report says so."""
    if suite.mode != "fixed" or not suite.reference or arm.name == suite.reference:
        return spec
    goal = bar(data)
    if goal is None:
        raise SystemExit(f"--stop-at-bar: no bar yet; run the reference arm first "
                         f"(python benchmarks/bench.py {suite.name} --arms {suite.reference})")
    return dict(spec, target=goal, mode="target", stopped_at_bar=goal)


def stamp_machine(data: Dict[str, Any], machine: Dict[str, Any]) -> None:
    """Make ``machine`` the suite's latest probe; a run recorded before runs carried their
    own probe keeps the suite's previous one (the probe of its session), so the header does
    not put an old run under today's probe."""
    for r in data["runs"]:
        r.setdefault("machine", data.get("machine"))
    data["machine"] = machine


def run_suite(suite: Suite, seeds: Sequence[int], arms: Sequence[Arm], out_dir: str, budget_s: Optional[float] = None,
              logdir: Optional[str] = None, machine: Optional[Dict[str, Any]] = None,
              stop_at_bar: bool = False) -> Dict[str, Any]:
    check_evaluation(suite, arms)
    path = os.path.join(out_dir, suite.name + ".json")
    data = load_results(path)
    data.update(suite=suite.name, title=suite.title, protocol=protocol.PROTOCOL, target=suite.target,
                mode=suite.mode, reference=suite.reference, peer=suite.peer)
    if machine:
        stamp_machine(data, machine)
    logdir = logdir or tempfile.mkdtemp(prefix=f"bench_{suite.name}_")
    print(f"{suite.name}: {len(arms)} arm(s) x seeds {list(seeds)}; child logs in {logdir}", flush=True)
    for seed in seeds:   # seed-major: a drift of the machine's speed hits every arm alike
        for arm in arms:
            sha = commit()   # per run: the tree a run measured, even if it changed during the suite
            spec = make_spec(suite, arm, seed, budget_s)
            if stop_at_bar:
                spec = bar_spec(spec, data, suite, arm)
            rec = protocol.run_child(spec, logdir)
            rec.update(commit=sha, stopped_at_bar=spec.get("stopped_at_bar"), date=datetime.datetime.now().isoformat(timespec="seconds"),
                       cpu_model=(machine or {}).get("cpu_model"), machine=machine)
            merge_run(data, rec)
            save_results(path, data)
    return data


# ---------------------------------------------------------------------------
# the machine line
# ---------------------------------------------------------------------------
def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def probe_child(probe: Dict[str, Any], seconds: float = 3.0) -> Dict[str, Any]:
    """Raw simulator env-steps/s with random actions, and one 256-sample [64, 64]
    Adam step (ms), each measured for ``seconds``. Runs in its own process."""
    import torch

    out: Dict[str, Any] = {"torch_threads": torch.get_num_threads()}
    net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ELU(), torch.nn.Linear(64, 64), torch.nn.ELU(),
                              torch.nn.Linear(64, 1))
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    x, n, t0 = torch.randn(256, 32, generator=torch.Generator().manual_seed(0)), 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        loss = net(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        n += 1
    out["update_ms"] = 1e3 * (time.perf_counter() - t0) / n
    kind, num_envs = probe.get("kind"), int(probe.get("num_envs", 64))
    if kind in ("mjlab", "builtin"):
        from rllib_fast.envs import registry

        name = f"mjlab:{probe['task']}" if kind == "mjlab" else probe["env"]
        env = registry.make(name, num_envs=num_envs, device="cpu", seed=0)
        space = env.single_action_space
        env.reset()
        gen = torch.Generator().manual_seed(0)

        def act():
            if hasattr(space, "n"):
                return torch.randint(int(space.n), (num_envs,), generator=gen)
            return torch.rand((num_envs, *space.shape), generator=gen) * 2 - 1
        step = env.step
    elif kind == "envpool":
        import envpool
        import numpy as np

        env = envpool.make_gymnasium(probe["task"], num_envs=num_envs, seed=0)
        env.reset()
        shape = (num_envs, *env.action_space.shape)
        rng = np.random.default_rng(0)

        def act():
            return rng.uniform(-1, 1, shape).astype(np.float32)
        step = env.step
    else:
        return out
    step(act())
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        step(act())
        n += num_envs
    out.update(sim=f"{kind}:{probe.get('task') or probe.get('env')} N={num_envs}",
               sim_steps_per_s=n / (time.perf_counter() - t0))
    return out


def machine_line(suite: Suite, seconds: float = 3.0) -> Dict[str, Any]:
    """The machine every results header names: CPU model, cores, raw simulator rate,
    one update's cost (measured in a child process with the user's thread settings)."""
    info = dict(cpu_model=cpu_model(), cores=os.cpu_count(), python=platform.python_version())
    cmd = [sys.executable, os.path.abspath(__file__), "--probe-child", json.dumps(suite.probe), str(seconds)]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=protocol.child_env(None), timeout=600)
    for line in reversed(p.stdout.splitlines()):
        if line.startswith("PROBE "):
            info.update(json.loads(line[6:]))
            break
    else:
        info["probe_error"] = (p.stderr.strip().splitlines() or ["no output"])[-1][:300]
    return info


def machines_text(data: Dict[str, Any]) -> str:
    """The machine line of the header; where the suite's runs were made under different
    probes (the machine's speed drifts between sessions), each probe with the arms it covers."""
    by_line: Dict[str, List[str]] = {}
    for r in data["runs"]:
        arms = by_line.setdefault(fmt_machine(r.get("machine") or data.get("machine")), [])
        if r["arm"] not in arms:
            arms.append(r["arm"])
    if len(by_line) <= 1:
        return next(iter(by_line), fmt_machine(data.get("machine")))
    return "; ".join(f"{line} (arms {', '.join(f'`{a}`' for a in arms)})" for line, arms in by_line.items())


def fmt_machine(m: Optional[Dict[str, Any]]) -> str:
    if not m:
        return "machine: not probed (run `bench.py SUITE --machine`)"
    sim = (f"{m['sim']} raw {m['sim_steps_per_s']:,.0f} env-steps/s" if m.get("sim_steps_per_s") else
           f"simulator not probed ({m.get('probe_error', 'no probe')})")
    upd = f"one 256-sample [64, 64] Adam step {m['update_ms']:.2f} ms" if m.get("update_ms") else ""
    return f"machine: {m.get('cpu_model')}, {m.get('cores')} cores; {sim}; {upd}"


# ---------------------------------------------------------------------------
# report
# ---------------------------------------------------------------------------
INF = math.inf


def median(xs: Sequence[float]) -> float:
    """Median with unreached seeds as +inf (an inf median reads 'not reached')."""
    s = sorted(xs)
    if not s:
        return math.nan
    k = len(s) // 2
    return s[k] if len(s) % 2 else (s[k - 1] + s[k]) / 2


def _f(x: Any, nd: int = 1) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    if x == INF:
        return "not reached"
    return f"{x:,.{nd}f}"


def _range(xs: Sequence[float], nd: int = 1) -> str:
    if len(xs) < 2:
        return ""
    return f" [{_f(min(xs), nd)}–{_f(max(xs), nd)}]"


def first_at(rec: Dict[str, Any], value: float) -> Optional[Dict[str, Any]]:
    """The first curve point whose success metric is >= value."""
    return next((p for p in rec["points"] if p.get("ret") is not None and p["ret"] >= value), None)


def stopped_at_bar(rec: Dict[str, Any]) -> bool:
    """Whether the run ended at its bar (``--stop-at-bar`` and reached): such a run has no return at
    the budget's end. Asked to stop there but never reaching it, a run ran its whole budget."""
    bar = rec.get("stopped_at_bar")
    return bar is not None and first_at(rec, bar) is not None


def final_return(rec: Dict[str, Any]) -> Optional[float]:
    return return_at(rec, math.inf)


def return_at(rec: Dict[str, Any], t: float) -> Optional[float]:
    """The run's last-100 training mean at wall time ``t`` (its last point at or before it)."""
    rets = [p["ret"] for p in rec["points"] if p.get("ret") is not None and p["t"] <= t]
    return rets[-1] if rets else None


def degenerate_bar(data: Dict[str, Any]) -> bool:
    """A fixed-wall-time bar that measures nothing: the reference ended no higher than its
    first window started (it did not learn within its budget), so any arm passes the bar
    at its first window and the time-to-bar column is start-up noise."""
    if data.get("mode") != "fixed" or not data.get("reference"):
        return False
    firsts = [next((p["ret"] for p in r["points"] if p.get("ret") is not None), None)
              for r in data["runs"] if r["arm"] == data["reference"]]
    firsts = [x for x in firsts if x is not None]
    goal = bar(data)
    return bool(firsts) and goal is not None and goal <= max(firsts)


def bar(data: Dict[str, Any]) -> Optional[float]:
    """The return each arm is timed to: the target, or in fixed mode the median final
    return of the reference arm (the return it reached within the budget)."""
    if data.get("mode") != "fixed":
        return data.get("target")
    ref = [final_return(r) for r in data["runs"] if r["arm"] == data.get("reference")]
    ref = [x for x in ref if x is not None]
    return median(ref) if ref else None


def runs_by_arm(data: Dict[str, Any]) -> Dict[str, List[Dict[str, Any]]]:
    """Each arm's runs, the arms in the order of their first run in the results file."""
    out: Dict[str, List[Dict[str, Any]]] = {}
    for r in data["runs"]:
        out.setdefault(r["arm"], []).append(r)
    return out


def table_lines(head: Sequence[str], rows: Sequence[Sequence[str]]) -> List[str]:
    """A report table's markdown lines: the header, its rule, one line per row."""
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head), *("| " + " | ".join(r) + " |" for r in rows)]


def arm_rows(data: Dict[str, Any]) -> List[Dict[str, Any]]:
    """Per arm, over its seeds: times to the bar (inf when not reached), training-only
    times, env steps at the bar, cores (to the bar if reached, else over the run)."""
    goal = bar(data)
    rows = []
    for name, runs in runs_by_arm(data).items():
        runs = sorted(runs, key=lambda r: r["seed"])
        t, train, steps, cores, final, sps, evals, startup = [], [], [], [], [], [], [], []
        for r in runs:
            p = first_at(r, goal) if goal is not None else None
            if goal is not None:   # a rate suite has no bar: no times
                t.append(p["t"] if p else INF)
                train.append(p["train_s"] if p else INF)
            if p:
                steps.append(p["steps"])
            c = (p or {}).get("cpu_s") if p else None
            cores.append(c / p["t"] if c and p["t"] else r.get("cores"))
            if not stopped_at_bar(r):   # a run stopped at the bar has no budget-end return
                final.append(final_return(r))
            pts = r["points"]
            if len(pts) > 1 and pts[-1]["t"] > pts[0]["t"]:   # after the first report (warm-up)
                sps.append((pts[-1]["steps"] - pts[0]["steps"]) / (pts[-1]["t"] - pts[0]["t"]))
            evals.append(r.get("eval_s") or 0.0)
            if r.get("startup_s") is not None:
                startup.append(r["startup_s"])
        rows.append(dict(arm=name, seeds=[r["seed"] for r in runs], reached=sum(x < INF for x in t), n=len(runs),
                         t=t, train=train, steps=steps, cores=[c for c in cores if c is not None],
                         final=[x for x in final if x is not None], sps=sps, eval_s=evals, startup=startup,
                         status=sorted({r["status"] for r in runs})))
    return rows


def speedup(peer_t: Optional[float], t: Optional[float]) -> str:
    """How many times sooner than the peer's best median (a ratio of medians)."""
    if peer_t is None or t is None or math.isnan(peer_t) or math.isnan(t) or t == INF:
        return "–"
    return "–" if peer_t == INF else f"{peer_t / t:.2f}x"


def returns_at_table(data: Dict[str, Any]) -> List[str]:
    """Fixed-wall-time suites: each arm's last-100 training mean at a quarter, half and all of
    the budget (median over seeds [range]) and its env steps by the end."""
    budget = max((float(r.get("budget_s") or 0) for r in data["runs"]), default=0.0)
    if budget <= 0:
        return []
    marks = [budget / 4, budget / 2, budget]
    head = ["arm", *[f"return at {m / 60:g} min" for m in marks], "env steps by the end"]
    rows = []
    for arm, runs in runs_by_arm(data).items():
        cells = []
        for m in marks:
            vals = [x for x in (return_at(r, m) for r in runs) if x is not None]
            cells.append(_f(median(vals), 2) + _range(vals, 2) if vals else "–")
        steps = [r["points"][-1]["steps"] for r in runs if r["points"]]
        rows.append([f"`{arm}`", *cells, _f(median(steps), 0) if steps else "–"])
    return ["Returns at fixed wall times (from process start):", "", *table_lines(head, rows)]


def report(data: Dict[str, Any], what: Optional[Dict[str, str]] = None) -> str:
    goal = bar(data)
    commits = sorted({r.get("commit", "?") for r in data["runs"]})
    lines = [f"### {data.get('title', data.get('suite'))}", "",
             f"Protocol `{data.get('protocol')}` (docs/benchmarks.md); commit {', '.join(commits)}; "
             f"{machines_text(data)}.", ""]
    if data.get("mode") == "fixed" and not data.get("reference"):
        lines += ["Rates: each arm runs a fixed window after its first report; env-steps/s is the whole loop's "
                  "rate over it.", ""]
    elif data.get("mode") == "fixed":
        lines += [f"Fixed wall time: the bar is `{data.get('reference')}`'s median return at the end of its budget "
                  f"({_f(goal, 2)}); time = wall time from process start until the arm's last-100 training mean "
                  f"first reaches it.", ""]
    else:
        lines += [f"Target: last-100 training-episode mean >= {_f(goal, 2)}.", ""]
    if degenerate_bar(data):
        lines += [f"**The bar measures nothing here**: `{data.get('reference')}` ended its budget no higher than its "
                  "first window started (it did not learn), so every arm passes the bar at its first window and the "
                  "time-to-bar column is start-up noise. Read the returns at fixed wall times below.", ""]
    rows = arm_rows(data)
    peer = data.get("peer")
    peer_t = min((median(r["t"]) for r in rows if peer and r["arm"].startswith(peer) and r["t"]), default=None)
    head = ["arm", "reached", "time to bar, s (median [range])", f"x {peer or 'peer'} (best)", "training-only s",
            "env steps at bar", "cores", "final return", "env-steps/s", "eval s", "startup s"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        reached_t = [x for x in r["t"] if x < INF]
        lines.append("| " + " | ".join([
            f"`{r['arm']}`", f"{r['reached']}/{r['n']}" if r["t"] else "–", _f(median(r["t"])) + _range(reached_t),
            speedup(peer_t, median(r["t"]) if r["t"] else None), _f(median(r["train"])), _f(median(r["steps"]), 0) if r["steps"] else "–",
            _f(median(r["cores"]), 2) + _range(r["cores"], 2), _f(median(r["final"]), 2),
            _f(median(r["sps"]), 0), _f(median(r["eval_s"])), _f(median(r["startup"]))]) + " |")
    lines += ["", f"Seeds: {sorted({s for r in rows for s in r['seeds']})}. An unreached seed counts as not reached "
              "(+inf) in the median; ranges are over the seeds that reached. Cores = CPU seconds of the arm's "
              "whole process tree / wall time, to the bar (over the run when not reached). "
              + (f"`x {peer} (best)` = the best median time of the `{peer}*` arms / this arm's median time."
                 if peer else "No peer in this suite: the ratio column is empty.")]
    if data.get("mode") == "fixed" and data.get("reference"):
        lines += ["", *returns_at_table(data)]
    ends = terms_at_end_table(data)
    if ends:
        lines += ["", *ends]
    stopped = sorted({r["arm"] for r in data["runs"] if stopped_at_bar(r)})
    if stopped:
        lines += ["", "Stopped at the bar (`--stop-at-bar`), so no return at the budget's end: "
                  + ", ".join(f"`{a}`" for a in stopped) + " (their final-return column is over the runs "
                  "that ran the whole budget, '–' if none)."]
    bad = [f"`{r['arm']}`: {', '.join(s for s in r['status'] if s != 'ok')}" for r in rows if r["status"] != ["ok"]]
    if bad:
        lines += ["", "Runs that did not end cleanly: " + "; ".join(bad) + "."]
    if what:
        lines += [""] + [f"- `{k}`: {v}" for k, v in what.items() if v]
    return "\n".join(lines) + "\n"


#: reward terms drawn under the return (substrings of the term names): the velocity-tracking terms
#: of the envpool Playground joystick tasks; every recorded term stays in the results file
PLOTTED_TERMS = ("tracking",)
#: reports averaged per plotted reward-term point: one report holds the few episodes that ended in
#: one iteration, so the raw series swings over the term's whole range and hides the trend
TERM_SMOOTHING = 50


#: the final stretch of a run whose reward terms the end-of-run table averages (many reports: one
#: holds only the episodes of one iteration)
TERM_END_WINDOW_S = 120.0


def terms_at_end_table(data: Dict[str, Any]) -> List[str]:
    """Each arm's plotted reward terms over the last :data:`TERM_END_WINDOW_S` of its runs (at
    the bar for a run stopped there), median over seeds [range], beside what a policy that
    learned nothing earns (the suite's ``term_baselines``): whether an arm that reached the
    return bar also does the task (tracks the commanded velocity) or only stopped falling."""
    terms = term_names(data)
    if not terms:
        return []
    base = data.get("term_baselines") or {}
    head = ["arm", *[f"{t}, last {TERM_END_WINDOW_S:g} s" for t in terms], "runs ended"]
    rows = []
    for arm, runs in runs_by_arm(data).items():
        cells = []
        for term in terms:
            vals = [x for x in (term_at_end(r, term) for r in runs) if x is not None]
            cells.append(_f(median(vals), 3) + _range(vals, 3) if vals else "–")
        at_bar = sum(1 for r in runs if stopped_at_bar(r))
        ended = ", ".join(f"{n} {what}" for n, what in ((at_bar, "at the bar"), (len(runs) - at_bar, "budget")) if n)
        rows.append([f"`{arm}`", *cells, ended])
    if base:
        rows.append([data.get("term_baselines_what") or "baseline",
                     *[_f(base[t], 3) if t in base else "–" for t in terms], "–"])
    return [f"Velocity tracking at the end of each run (episode mean per step, over the last "
            f"{TERM_END_WINDOW_S:g} s of reports; median over seeds [range]):", "", *table_lines(head, rows)]


def term_at_end(run: Dict[str, Any], term: str) -> Optional[float]:
    """The mean of a reward term over a run's last :data:`TERM_END_WINDOW_S` of reports (None: never recorded)."""
    tp = [p for p in run["points"] if term in (p.get("terms") or {})]
    if not tp:
        return None
    w = [p["terms"][term] for p in tp if p["t"] >= tp[-1]["t"] - TERM_END_WINDOW_S]
    return sum(w) / len(w)


def trailing_mean(values: Sequence[float], window: int) -> List[float]:
    """Mean of each value and up to ``window - 1`` before it (a curve's trend, not its noise)."""
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def term_names(data: Dict[str, Any]) -> List[str]:
    """The reward terms the runs recorded (``terms`` of their points) that the plot draws."""
    names = {k for r in data["runs"] for p in r["points"] for k in (p.get("terms") or {})}
    return sorted(n for n in names if any(s in n for s in PLOTTED_TERMS))


def plot(data: Dict[str, Any], path: str) -> None:
    """Learning curves from the results file: the return, and each recorded velocity-tracking
    reward term (per-episode mean per step), against wall time and against env steps."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    terms = term_names(data)
    fig, grid = plt.subplots(1 + len(terms), 2, figsize=(12, 4.5 + 3.0 * len(terms)), squeeze=False)
    colors: Dict[str, Any] = {}
    for r in data["runs"]:
        c = colors.setdefault(r["arm"], f"C{len(colors) % 10}")
        label = r["arm"] if sum(1 for x in data["runs"] if x["arm"] == r["arm"] and x is not r) == 0 or \
            r["seed"] == min(x["seed"] for x in data["runs"] if x["arm"] == r["arm"]) else None
        pts = [p for p in r["points"] if p.get("ret") is not None]
        grid[0][0].plot([p["t"] for p in pts], [p["ret"] for p in pts], color=c, lw=1, label=label)
        grid[0][1].plot([p["steps"] for p in pts], [p["ret"] for p in pts], color=c, lw=1)
        for row, term in enumerate(terms, start=1):
            tp = [p for p in r["points"] if term in (p.get("terms") or {})]
            ys = trailing_mean([p["terms"][term] for p in tp], TERM_SMOOTHING)
            grid[row][0].plot([p["t"] for p in tp], ys, color=c, lw=1)
            grid[row][1].plot([p["steps"] for p in tp], ys, color=c, lw=1)
    goal = bar(data)
    ylabels = ["last-100 training return"] + [f"{t} (episode mean,\nmean of {TERM_SMOOTHING} reports)" for t in terms]
    for row, ylabel in enumerate(ylabels):
        for ax, xl in zip(grid[row], ("wall time from process start (s)", "env steps")):
            if goal is not None and row == 0:
                ax.axhline(goal, color="k", ls=":", lw=1)
            base = (data.get("term_baselines") or {}).get(terms[row - 1]) if row else None
            if base is not None:   # what a policy that learned nothing earns on this term
                ax.axhline(base, color="0.5", ls="--", lw=1,
                           label=(data.get("term_baselines_what") or "baseline") if ax is grid[row][0] else None)
                if ax is grid[row][0]:
                    ax.legend(fontsize=7)
            ax.set_xlabel(xl)
            ax.set_ylabel(ylabel, fontsize=8)
    grid[0][0].legend(fontsize=8)
    fig.suptitle(data.get("title", ""), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_report(suite: Suite, data: Dict[str, Any], out_dir: str) -> str:
    md = os.path.join(out_dir, suite.name + ".md")
    for key in ("peer", "reference", "window_s"):
        data.setdefault(key, getattr(suite, key))
    for key in ("term_baselines", "term_baselines_what"):   # the suite's knowledge, not a run's record
        data[key] = getattr(suite, key)
    with open(md, "w") as f:
        ran = {r["arm"] for r in data["runs"]}
        f.write(report(data, {a.name: a.what for a in suite.arms if a.name in ran}))
    try:
        plot(data, os.path.join(out_dir, suite.name + ".png"))
    except ImportError:
        pass
    return md


# ---------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------
def parse_seeds(text: str) -> List[int]:
    out: List[int] = []
    for part in text.split(","):
        a, _, b = part.strip().partition("-")
        out += list(range(int(a), int(b) + 1)) if b else [int(a)]
    return out


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("suite", nargs="?", help="suite name (see --list)")
    p.add_argument("--seeds", default=None, help="e.g. 100-104 or 100,102 (default: the suite's, 100-104)")
    p.add_argument("--arms", default=None, help="comma list of arm names (default: all)")
    p.add_argument("--budget", type=float, default=None, help="wall-clock cap per run, s (default: the suite's)")
    p.add_argument("--eval-every", type=float, default=None, metavar="S",
                   help="greedy evaluation of every arm every S seconds, on the clock (default: the suite's)")
    p.add_argument("--out", default=RESULTS, help="results folder (default benchmarks/results)")
    p.add_argument("--logdir", default=None, help="child logs (default: a temp folder)")
    p.add_argument("--stop-at-bar", action="store_true",
                   help="fixed-wall-time suites: stop each non-reference run once it reaches the reference's bar")
    p.add_argument("--report-only", action="store_true", help="rewrite OUT/SUITE.md and .png from OUT/SUITE.json")
    p.add_argument("--machine", action="store_true", help="probe the machine line only and print it")
    p.add_argument("--no-probe", action="store_true", help="do not probe the machine before running")
    p.add_argument("--list", action="store_true", help="list suites and arms")
    p.add_argument("--probe-child", default=None, help=argparse.SUPPRESS)
    p.add_argument("probe_seconds", nargs="?", type=float, default=3.0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.probe_child is not None:
        print("PROBE " + json.dumps(probe_child(json.loads(args.probe_child), args.probe_seconds)), flush=True)
        return 0
    if args.list or not args.suite:
        for s in SUITES.values():
            print(f"{s.name}: {s.title} [{s.mode}, budget {s.budget_s:g} s, target {s.target}]")
            for a in s.arms:
                print(f"    {a.name:<22s} {a.adapter:<16s} {a.what}")
        return 0
    if args.suite not in SUITES:
        p.error(f"unknown suite {args.suite!r}; allowed: {', '.join(SUITES)}")
    suite = SUITES[args.suite]
    if args.eval_every is not None:
        import dataclasses

        suite = dataclasses.replace(suite, eval_every_s=args.eval_every or None)
    if args.machine:
        print(fmt_machine(machine_line(suite)))
        return 0
    path = os.path.join(args.out, suite.name + ".json")
    if not args.report_only:
        arms = suite.arms
        if args.arms:
            wanted = [a.strip() for a in args.arms.split(",") if a.strip()]
            unknown = [w for w in wanted if w not in {a.name for a in arms}]
            if unknown:
                p.error(f"--arms: unknown {unknown}; allowed: {', '.join(a.name for a in arms)}")
            arms = [a for a in arms if a.name in wanted]
        seeds = parse_seeds(args.seeds) if args.seeds else list(suite.seeds)
        machine = None if args.no_probe else machine_line(suite)
        if machine:
            print(fmt_machine(machine), flush=True)
        run_suite(suite, seeds, arms, args.out, args.budget, args.logdir, machine, args.stop_at_bar)
    data = load_results(path)
    if not data["runs"]:
        p.error(f"no runs in {path}")
    md = write_report(suite, data, args.out)
    print(open(md).read())
    return 0


if __name__ == "__main__":
    sys.exit(main())
