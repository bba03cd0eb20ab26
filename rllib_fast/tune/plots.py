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

RETURN_KEY = "env_runners/episode_return_mean"
STEP_KEY = "num_env_steps_sampled_lifetime"

Curve = List[Tuple[float, float]]


def _get(result: Mapping, key: str):
    """``result[key]`` where key may be '/'-flattened (``a/b`` -> ``result['a']['b']``)."""
    if key in result:
        return result[key]
    node = result
    for part in key.split("/"):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def _number(value) -> Optional[float]:
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
        value = _number(_get(result, key))
        if value is not None:
            return int(value)
    return int(_get(result, "training_iteration") or 0)


def curve_point(result: Mapping, metric: str = RETURN_KEY) -> Optional[Tuple[int, float]]:
    """``(env_steps, metric)`` of one result, or None when the metric is missing/NaN."""
    value = _number(_get(result, metric))
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


def plot_results(results: Iterable[Mapping], path: str, *, label: str = "trial",
                 metric: str = RETURN_KEY, title: Optional[str] = None) -> str:
    """Plot one trial's list of result dicts."""
    points = [p for p in (curve_point(r, metric) for r in results) if p is not None]
    return plot_curves({label: points}, path, title=title)


class CurveCollector(Callback):
    """Driver-side Tune callback: ``curves[trial_id] = [(env_steps, return), ...]``.

    ``labels[trial_id]`` is the trial's name (``str(trial)``). ``plot(path)``
    writes all trials into one PNG.
    """

    def __init__(self, metric: str = RETURN_KEY):
        self.metric = metric
        self.curves: Dict[str, Curve] = {}
        self.labels: Dict[str, str] = {}

    def on_trial_result(self, iteration, trials, trial, result, **info):
        point = curve_point(result, self.metric)
        self.labels[trial.trial_id] = str(trial)
        if point is not None:
            self.curves.setdefault(trial.trial_id, []).append(point)

    def plot(self, path: str, title: Optional[str] = None) -> str:
        return plot_curves({self.labels.get(k, k): v for k, v in self.curves.items()}, path, title=title)
