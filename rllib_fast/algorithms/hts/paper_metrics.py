"""HTS-RL's evaluation metrics (paper §5, "Evaluation metrics").

* **final**: the average return of the last 100 evaluation episodes, i.e. 10
  episodes for each of the last 10 policies.
* **final time**: the final metric when training is cut at a wall-clock
  limit (the paper uses the time the fastest baseline needs for its step
  budget): the average of the last 100 evaluation episodes among evaluations
  done within ``limit`` training seconds.
* **required time**: the training time until the running average of the
  latest 100 evaluation episodes first reaches a target.

Evaluations are recorded as ``(train_time_s, mean_return, num_episodes)``
groups (our evaluation reports per-evaluation means); windows of 100 episodes
are formed from the newest groups, the oldest group included only with the
episodes needed to complete 100 (exact when evaluations hold a divisor of 100
episodes, e.g. the paper's 10).
"""
from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Tuple

WINDOW = 100


def _window_mean(groups: List[Tuple[float, float, int]], window: int = WINDOW) -> float:
    total, weight = 0.0, 0
    for _, mean, n in reversed(groups):
        take = min(n, window - weight)
        if take <= 0:
            break
        total += mean * take
        weight += take
    return total / weight if weight else math.nan


class PaperMetrics:
    def __init__(self) -> None:
        self.groups: List[Tuple[float, float, int]] = []
        self.required: Dict[float, float] = {}

    def record(self, train_time_s: float, mean_return: float, num_episodes: int,
               target: Optional[float] = None) -> None:
        if num_episodes <= 0 or not math.isfinite(mean_return):
            return
        self.groups.append((float(train_time_s), float(mean_return), int(num_episodes)))
        if target is not None and target not in self.required and _window_mean(self.groups) >= target:
            self.required[target] = float(train_time_s)

    def final(self) -> float:
        return _window_mean(self.groups)

    def final_time(self, limit_s: float) -> float:
        return _window_mean([g for g in self.groups if g[0] <= limit_s])

    def required_time(self, target: float) -> float:
        """Seconds until the running mean first reached ``target`` (nan: not yet).
        Computed from the recorded groups, so any target can be asked afterwards."""
        if target in self.required:
            return self.required[target]
        for i in range(len(self.groups)):
            if _window_mean(self.groups[:i + 1]) >= target:
                return self.groups[i][0]
        return math.nan

    def state_dict(self) -> Dict[str, Any]:
        return {"groups": list(self.groups), "required": dict(self.required)}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.groups = [tuple(g) for g in state["groups"]]
        self.required = dict(state["required"])
