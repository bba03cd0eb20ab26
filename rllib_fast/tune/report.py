"""``rllib-fast report EXPERIMENT_DIR``: a Markdown summary and learning curves of a finished sweep.

Why from files (not from a live Tune session): a report is asked for after the
fact, maybe on another machine, maybe after a resume. Everything needed is in
the trial directories Tune writes: ``result.json`` / ``progress.csv`` (one
result per line, appended across restarts and PBT exploits; the more complete
of the two is read, see :func:`rllib_fast.tune.plots.read_trial_results`) and
``error.txt`` for failed trials.

Written next to the trials (or into ``--out``):

* ``report.md`` -- a table of trials: the config keys that differ between
  trials (for PBT: the final, mutated values), best mean return, env steps and
  wall-clock seconds to reach ``--threshold`` (first result at or above it),
  iterations, status;
* ``curves_env_steps.png`` and ``curves_wallclock.png`` -- every trial's return
  against lifetime env steps and against wall-clock time (``time_total_s``).
"""
from __future__ import annotations

import json
import math
import os
from typing import Any, Dict, List, Optional, Sequence

from ray.tune.utils import flatten_dict

from .plots import RETURN_KEY, result_value, finite_float, env_step, plot_curves, read_trial_results

#: Returns at which the built-in tasks count as solved (used when --threshold is not given).
DEFAULT_THRESHOLDS = {"CartPole": 475.0, "rllib-fast-gym:CartPole": 475.0, "CartPole-v1": 475.0,
                      "Pendulum": -250.0, "rllib-fast-gym:Pendulum": -250.0}
_SKIP_CONFIG = ("callbacks", "__trial_info__", "logger_config", "env_config")


class TrialRecord:
    """One trial directory, read."""

    def __init__(self, path: str, results: List[Dict[str, Any]], error: Optional[str]):
        self.path = path
        self.name = os.path.basename(path)
        self.results = results
        self.error = error

    @property
    def config(self) -> Dict[str, Any]:
        cfg = self.results[-1].get("config", {}) if self.results else {}
        if not cfg and os.path.isfile(os.path.join(self.path, "params.json")):
            with open(os.path.join(self.path, "params.json")) as f:
                cfg = json.load(f)
        return cfg

    @property
    def finished(self) -> bool:
        return bool(self.results and self.results[-1].get("done"))

    @property
    def failed(self) -> bool:
        """Ended in an error. Tune appends to error.txt on *every* failure, also one it
        then retried from a checkpoint (``max_failures``); a trial that went on to
        finish is recovered, not failed."""
        return bool(self.error) and not self.finished

    @property
    def status(self) -> str:
        if self.failed:
            return "ERROR"
        if self.error:
            return "done (recovered)"
        return "done" if self.finished else "stopped"

    def curve(self, metric: str, x: str = "env_steps") -> List[tuple]:
        pts = []
        for r in self.results:
            y = finite_float(result_value(r, metric))
            if y is None:
                continue
            xv = env_step(r) if x == "env_steps" else finite_float(r.get("time_total_s"))
            if xv is not None:
                pts.append((xv, y))
        return pts

    def best(self, metric: str, mode: str = "max") -> Optional[float]:
        ys = [y for _, y in self.curve(metric)]
        return (max if mode == "max" else min)(ys) if ys else None

    def time_to(self, threshold: float, metric: str, mode: str = "max"):
        """(env steps, wall-clock s) of the first result reaching ``threshold``."""
        for r in self.results:
            y = finite_float(result_value(r, metric))
            if y is not None and (y >= threshold if mode == "max" else y <= threshold):
                return env_step(r), finite_float(r.get("time_total_s"))
        return None


def read_experiment(exp_dir: str) -> List[TrialRecord]:
    """Every trial directory (one with result.json or progress.csv) under ``exp_dir``."""
    if not os.path.isdir(exp_dir):
        raise FileNotFoundError(f"experiment directory not found: {exp_dir}")
    trials = []
    for entry in sorted(os.listdir(exp_dir)):
        path = os.path.join(exp_dir, entry)
        if not any(os.path.isfile(os.path.join(path, f)) for f in ("result.json", "progress.csv")):
            continue
        results = read_trial_results(path)  # the more complete of result.json and progress.csv
        err_file = os.path.join(path, "error.txt")
        error = None
        if os.path.isfile(err_file):
            lines = [ln for ln in open(err_file).read().splitlines() if ln.strip()]
            error = lines[-1] if lines else "error"
        trials.append(TrialRecord(path, results, error))
    return trials


def _scalar_config(cfg: Dict[str, Any]) -> Dict[str, Any]:
    flat = flatten_dict({k: v for k, v in cfg.items() if k not in _SKIP_CONFIG}, delimiter="/")
    return {k: v for k, v in flat.items() if isinstance(v, (int, float, str, bool)) or v is None}


def differing_keys(configs: Sequence[Dict[str, Any]]) -> List[str]:
    """Config keys whose value is not the same in every trial (the swept ones)."""
    flats = [_scalar_config(c) for c in configs]
    keys = sorted(set().union(*flats)) if flats else []
    return [k for k in keys if len({json.dumps(f.get(k), default=str) for f in flats}) > 1]


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}" if math.isfinite(v) else str(v)
    return str(v)


def write_report(exp_dir: str, out_dir: Optional[str] = None, *, threshold: Optional[float] = None,
                 metric: str = RETURN_KEY, mode: str = "max") -> Dict[str, str]:
    """Write ``report.md`` and the two PNGs; returns their paths."""
    exp_dir = os.path.abspath(exp_dir)
    out_dir = os.path.abspath(out_dir or exp_dir)
    os.makedirs(out_dir, exist_ok=True)
    trials = read_experiment(exp_dir)
    if not trials:
        raise FileNotFoundError(f"{exp_dir} holds no trial directories (no */result.json)")
    configs = [t.config for t in trials]
    if threshold is None:
        envs = {str(c.get("env")) for c in configs}
        if len(envs) == 1 and next(iter(envs)) in DEFAULT_THRESHOLDS:
            threshold = DEFAULT_THRESHOLDS[next(iter(envs))]
    keys = differing_keys(configs) if len(trials) > 1 else []
    algo = {t.name.split("_")[0] for t in trials}
    env_names = sorted({str(c.get("env")) for c in configs})

    png_steps = os.path.join(out_dir, "curves_env_steps.png")
    png_wall = os.path.join(out_dir, "curves_wallclock.png")
    title = os.path.basename(exp_dir)
    plot_curves({t.name: t.curve(metric) for t in trials}, png_steps, title=title, xlabel="env steps")
    plot_curves({t.name: t.curve(metric, x="wall") for t in trials}, png_wall, title=title,
                xlabel="wall-clock time of the trial (s)")

    header = ["trial", *keys, "best return", "env steps", "iterations",
              f"steps to {_fmt(threshold)}" if threshold is not None else "steps to threshold",
              f"seconds to {_fmt(threshold)}" if threshold is not None else "seconds to threshold", "status"]
    rows = []
    def rank(t: TrialRecord) -> float:  # best first; trials without a value last (0.0 is a value)
        best = t.best(metric, mode)
        if best is None:
            return math.inf
        return -best if mode == "max" else best

    order = sorted(trials, key=rank)
    for t in order:
        flat = _scalar_config(t.config)
        last = t.results[-1] if t.results else {}
        reached = t.time_to(threshold, metric, mode) if threshold is not None else None
        rows.append([t.name, *[_fmt(flat.get(k)) for k in keys], _fmt(t.best(metric, mode)),
                     _fmt(env_step(last) if last else None), _fmt(last.get("training_iteration")),
                     _fmt(reached[0]) if reached else "-", _fmt(reached[1]) if reached else "-",
                     t.status])
    ok = [t for t in trials if not t.failed]
    lines = [f"# Sweep report: {title}", "",
             f"- experiment directory: `{exp_dir}`",
             f"- algorithm(s): {', '.join(sorted(algo))}; env(s): {', '.join(env_names)}",
             f"- trials: {len(trials)} ({len(ok)} ok, {len(trials) - len(ok)} errored)",
             f"- metric: `{metric}` ({mode})" + (f"; threshold: {_fmt(threshold)}" if threshold is not None
                                               else "; no threshold (pass --threshold)"),
             "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    errored = [t for t in trials if t.failed]
    if errored:
        lines += ["", "## Errors", ""] + [f"- `{t.name}`: {t.error}" for t in errored]
    recovered = [t for t in trials if t.error and not t.failed]
    if recovered:
        lines += ["", "## Failures recovered from (retried from a checkpoint, then finished)", ""] + [
            f"- `{t.name}`: {t.error}" for t in recovered]
    lines += ["", "## Learning curves", "",
              f"![return vs env steps]({os.path.relpath(png_steps, out_dir)})", "",
              f"![return vs wall-clock]({os.path.relpath(png_wall, out_dir)})", ""]
    md = os.path.join(out_dir, "report.md")
    with open(md, "w") as f:
        f.write("\n".join(lines))
    return {"markdown": md, "env_steps_png": png_steps, "wallclock_png": png_wall}


def add_arguments(p) -> None:
    p.add_argument("experiment_dir", help="a Tune experiment directory, e.g. runs/<sweep name>")
    p.add_argument("--out", default=None, help="where to write report.md and the PNGs (default: the directory)")
    p.add_argument("--threshold", type=float, default=None,
                   help="return that counts as solved (default: known built-in tasks, else none)")
    p.add_argument("--metric", default=RETURN_KEY, help=f"result key to rank by (default {RETURN_KEY})")
    p.add_argument("--mode", default="max", choices=("max", "min"))


def run_report(args) -> int:
    from .plan import UsageError

    try:
        paths = write_report(args.experiment_dir, args.out, threshold=args.threshold, metric=args.metric,
                             mode=args.mode)
    except FileNotFoundError as err:
        raise UsageError(str(err)) from None
    print(f"report: {paths['markdown']}")
    print(f"learning curves: {paths['env_steps_png']}, {paths['wallclock_png']}")
    return 0
