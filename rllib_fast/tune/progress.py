"""``MilestoneProgress``: a few short progress lines per trial, however long the run takes.

Why not Tune's progress tables: they are printed on a clock (every
``max_report_frequency`` seconds, 16 lines each with a "Result logdir" line of
Ray's session directory), so how many lines a run prints depends on how busy
the machine is. This callback prints on events of the run instead --
a trial passing each quarter of its env-step budget, a PBT exploit changing its
hyperparameters, its end or its error -- so the number of lines depends on the
number of trials and perturbations only (one line each, under 120 characters).
"""
from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

from ray.tune import Callback

from ..core.metrics import RETURN_KEY
from .plots import env_step, finite_float, result_value


def _return_of(result: Mapping[str, Any]) -> Optional[float]:
    return finite_float(result_value(result, RETURN_KEY))


def _short(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


class MilestoneProgress(Callback):
    """Driver-side Tune callback printing one line per milestone of each trial.

    ``label``: what starts each line (e.g. the task, ``[CartPole]``); ``budget``:
    env steps per trial (the stop criterion), split in ``parts`` milestones;
    ``keys``: hyperparameters shown (the mutated ones); ``printer``: where lines go.
    """

    def __init__(self, label: str, budget: int, keys: Sequence[str] = (), parts: int = 4, printer=print):
        self.label, self.budget, self.keys, self.parts = label, max(1, int(budget)), tuple(keys), max(1, parts)
        self.printer = printer
        self._reached: Dict[str, int] = {}              # milestones printed per trial
        self._params: Dict[str, Tuple[Any, ...]] = {}   # the shown hyperparameters last seen per trial

    def _params_of(self, trial) -> Tuple[Any, ...]:
        config = getattr(trial, "config", None) or {}
        return tuple(config.get(k) for k in self.keys)

    def _params_str(self, params: Tuple[Any, ...]) -> str:
        return " ".join(f"{k}={_short(v)}" for k, v in zip(self.keys, params))

    def _line(self, trial, text: str) -> None:
        self.printer(f"{self.label} trial {trial.trial_id}: {text}")

    def on_trial_result(self, iteration, trials, trial, result, **info):
        tid = trial.trial_id
        params = self._params_of(trial)
        if tid in self._params and params != self._params[tid]:
            self._line(trial, f"PBT exploit, continues from a better trial's checkpoint with "
                              f"{self._params_str(params)}")
        self._params[tid] = params
        steps = env_step(result)
        part = min(self.parts - 1, int(self.parts * steps / self.budget))  # the last one: on complete
        if part > self._reached.get(tid, 0):
            self._reached[tid] = part
            ret = _return_of(result)
            shown = f"return {ret:.1f}" if ret is not None else "no finished episode yet"
            self._line(trial, f"{steps:,} env steps ({100 * steps // self.budget}%), {shown}, "
                              f"{self._params_str(params)}")

    def on_trial_complete(self, iteration, trials, trial, **info):
        result = getattr(trial, "last_result", None) or {}
        ret = _return_of(result)
        shown = f"return {ret:.1f}" if ret is not None else "no finished episode"
        self._line(trial, f"finished, {shown} after {env_step(result):,} env steps")

    def on_trial_error(self, iteration, trials, trial, **info):
        where = getattr(trial, "error_file", None)
        self._line(trial, f"failed, see {where}" if where else "failed")
