"""Learning curves: episode return against env steps, one or several trials per PNG.

Used by :class:`rllib_fast.tune.mlflow.MLflowRecorder` (one PNG per trial, logged
as an artifact) and by the CLI (one PNG for the whole experiment, written next
to the runs). :class:`CurveCollector` is a tiny driver-side Tune callback that
keeps the curves in memory, so a plot needs no trial files.
"""
from __future__ import annotations

import math
import os
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from ray.tune import Callback

from ..core.metrics import RETURN_KEY, STEP_KEY

Curve = List[Tuple[float, float]]


def result_value(result: Mapping, key: str):
    """``result[key]`` where key may be '/'-flattened (``a/b`` -> ``result['a']['b']``)."""
    if key in result:
        return result[key]
    node = result
    for part in key.split("/"):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def finite_float(value) -> Optional[float]:
    """``float(value)`` when it is a finite number (bools and None are not), else None."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


def env_step(result: Mapping) -> int:
    """The step axis of a result: lifetime env steps, else the iteration."""
    for key in (STEP_KEY, "env_runners/" + STEP_KEY, "timesteps_total"):
        value = finite_float(result_value(result, key))
        if value is not None:
            return int(value)
    return int(result_value(result, "training_iteration") or 0)


def curve_point(result: Mapping, metric: str = RETURN_KEY) -> Optional[Tuple[int, float]]:
    """``(env_steps, metric)`` of one result, or None when the metric is missing/NaN."""
    value = finite_float(result_value(result, metric))
    return None if value is None else (env_step(result), value)


def plot_curves(curves: Mapping[str, Sequence[Tuple[float, float]]], path: str, *,
                title: Optional[str] = None, ylabel: str = "episode return (mean)",
                xlabel: str = "env steps") -> str:
    """Plot ``{label: [(env_steps, value), ...]}`` into one PNG at ``path``.

    Works headless (Agg backend). Empty curves are skipped; an all-empty input
    still writes a PNG saying "no data". Returns ``path``.
    """
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=100)
    plotted = 0
    for label, points in curves.items():
        pts = sorted(points)
        if not pts:
            continue
        xs, ys = zip(*pts)
        ax.plot(xs, ys, marker="." if len(pts) < 30 else None, label=str(label))
        plotted += 1
    if not plotted:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.grid(True, alpha=0.3)
    if 1 < plotted <= 12:
        ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def _csv_value(text: str):
    if text == "":
        return None
    if text in ("True", "False"):
        return text == "True"
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def _iterations(results: Sequence[Mapping]) -> int:
    return len({r.get("training_iteration") for r in results})


def _agree(from_csv: Sequence[Mapping], from_json: Sequence[Mapping]) -> bool:
    """Whether the CSV's rows say what the JSON results say at the iterations both
    hold (env steps and return): rows appended after a restart with their columns
    in the same number but another order would otherwise pass as results."""
    steps = "num_env_steps_sampled_lifetime"
    ret = "env_runners/episode_return_mean"
    by_iter = {r.get("training_iteration"): r for r in from_json}
    for row in from_csv:
        j = by_iter.get(row.get("training_iteration"))
        if j is None:
            continue
        j_ret = (j.get("env_runners") or {}).get("episode_return_mean") if isinstance(j.get("env_runners"), Mapping) \
            else j.get(ret)
        for mine, theirs in ((row.get(steps), j.get(steps)), (row.get(ret), j_ret)):
            if isinstance(mine, (int, float)) and isinstance(theirs, (int, float)) and \
                    not math.isclose(float(mine), float(theirs), rel_tol=1e-6, abs_tol=1e-9):
                return False
    return True


def read_trial_results(trial_dir: str) -> List[Dict]:
    """A trial directory's results, oldest first, from the more complete of
    ``result.json`` and ``progress.csv`` (keys of CSV rows stay '/'-flattened,
    which :func:`curve_point` and the report read alike).

    Why both: Tune writes the two files independently, and after a restore
    they can disagree. Ray 2.60's ``JsonLoggerCallback.log_trial_start`` copies
    the trial's ``result.json`` from the experiment folder over the driver's
    own copy every time a trial (re)starts with a checkpoint -- every PBT
    exploit, every resume -- so a copy in the experiment folder that lags
    behind replaces the complete one; ``CSVLoggerCallback`` sets its file up
    once per trial and keeps appending. The file with results for more
    distinct iterations wins, unless its rows disagree with the JSON's where both
    have an iteration: the rows Tune appends after a restart take their columns
    from the first result after it, without a header, and may be shifted; rows
    of another width or without a whole iteration number are dropped, and the
    JSON fills the iterations they held. The last JSON result's ``config``
    (PBT's final, mutated values) is kept either way.
    """
    import csv
    import json

    from_json: List[Dict] = []
    path = os.path.join(trial_dir, "result.json")
    if os.path.isfile(path):
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line:
                    try:
                        from_json.append(json.loads(line))
                    except json.JSONDecodeError:
                        pass  # a line cut by a crash
    from_csv: List[Dict] = []
    path = os.path.join(trial_dir, "progress.csv")
    if os.path.isfile(path):
        try:
            with open(path, newline="") as f:
                rows = list(csv.reader(f))
            header = rows[0] if rows else []
            # Rows Tune appends after a trial restart carry no header of their own and take
            # their columns from the first result after the restart: a row of another width
            # cannot be read against the header, and one whose iteration is not a whole
            # number has its columns in another order.
            from_csv = [r for r in ({k: _csv_value(v) for k, v in zip(header, row)}
                                    for row in rows[1:] if len(row) == len(header))
                        if isinstance(r.get("training_iteration"), int)]
        except (csv.Error, UnicodeDecodeError):
            from_csv = []
    if _iterations(from_csv) > _iterations(from_json) and _agree(from_csv, from_json):
        # the CSV's iterations, and the JSON's for those the CSV could not give
        have = {r["training_iteration"] for r in from_csv}
        merged = sorted(from_csv + [r for r in from_json if r.get("training_iteration") not in have],
                        key=lambda r: r.get("training_iteration") or 0)
        config = next((r["config"] for r in reversed(from_json) if isinstance(r.get("config"), Mapping)), None)
        if config is not None and merged:
            merged[-1] = dict(merged[-1], config=config)
        return merged
    return from_json


def results_curve(results: Iterable[Mapping], metric: str = RETURN_KEY) -> Curve:
    """``[(env_steps, metric)]`` of a trial's results, one point per
    ``training_iteration`` (the last one written: a restored trial redoes the
    iterations after its checkpoint)."""
    by_iter: Dict = {}
    for r in results:
        point = curve_point(r, metric)
        if point is not None:
            by_iter[r.get("training_iteration", len(by_iter))] = point
    return [by_iter[k] for k in sorted(by_iter, key=lambda k: (finite_float(k) is None, finite_float(k) or 0))]


class CurveCollector(Callback):
    """Driver-side Tune callback: ``curves[trial_id] = [(env_steps, return), ...]``.

    ``labels[trial_id]`` is the trial's name (``str(trial)``). ``plot(path)``
    writes all trials into one PNG.
    """

    def __init__(self, metric: str = RETURN_KEY):
        self.metric = metric
        self.curves: Dict[str, Curve] = {}
        self.labels: Dict[str, str] = {}
        self._iters: Dict[str, List[float]] = {}  # training_iteration of each point

    def on_trial_result(self, iteration, trials, trial, result, **info):
        point = curve_point(result, self.metric)
        self.labels[trial.trial_id] = str(trial)
        if point is None:
            return
        it = finite_float(result.get("training_iteration"))
        curve = self.curves.setdefault(trial.trial_id, [])
        iters = self._iters.setdefault(trial.trial_id, [])
        if it is not None:  # a restored trial redoes iterations: the new points replace the old ones
            keep = sum(1 for i in iters if i < it)
            del curve[keep:], iters[keep:]
        curve.append(point)
        iters.append(it if it is not None else float(len(iters) + 1))

    def plot(self, path: str, title: Optional[str] = None) -> str:
        return plot_curves({self.labels.get(k, k): v for k, v in self.curves.items()}, path, title=title)
