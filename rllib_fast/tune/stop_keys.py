"""Which result keys a ``stop`` dict may name, checked before Ray starts.

Why: Tune's dict stopper ignores a key that never appears in a result, so a
misspelled ``training_iteratoin`` (or the old API stack's
``episode_reward_mean``) trains forever. The allowed keys are Tune's own
time/iteration counters plus the metrics our algorithms report (RLlib's new
API stack names); for RLlib's built-in algorithms, whose results carry more
keys, anything under the ``env_runners/``, ``learners/``, ``evaluation/``,
``timers/`` and ``perf/`` groups is accepted as well.
"""
from __future__ import annotations

import difflib
from typing import Any, Dict, List, Mapping, Optional

#: Tune's counters (ray.tune.result) that every result has. Not ``timesteps_total``,
#: ``timesteps_since_restore`` or ``episodes_total``: Tune fills those only from the old
#: API stack's ``timesteps_this_iter``/``episodes_this_iter``, which no new-stack result
#: (ours or RLlib's) has, so a stop on them would never fire (see ``OLD_KEYS``).
TUNE_KEYS = ("training_iteration", "time_total_s", "time_since_restore", "iterations_since_restore")
#: Top-level metrics every rllib_fast algorithm reports.
TOP_LEVEL_KEYS = ("num_env_steps_sampled_lifetime", "num_env_steps_trained_lifetime")
#: ``env_runners/*`` metrics every rllib_fast algorithm reports.
ENV_RUNNER_KEYS = ("episode_return_mean", "episode_return_max", "episode_return_min", "episode_len_mean",
                   "num_episodes", "num_episodes_lifetime", "num_env_steps_sampled",
                   "num_env_steps_sampled_lifetime")
#: ``evaluation/env_runners/*`` metrics of an rllib_fast evaluation (``FastAlgorithm.evaluate``).
EVALUATION_KEYS = ("episode_return_mean", "episode_len_mean", "num_episodes")
#: Old API stack / Tune names that new-stack results never carry, and what to use instead.
OLD_KEYS = {"timesteps_total": "num_env_steps_sampled_lifetime",
            "timesteps_since_restore": "num_env_steps_sampled_lifetime",
            "episodes_total": "env_runners/num_episodes_lifetime",
            "num_episodes_lifetime": "env_runners/num_episodes_lifetime",
            "episode_reward_mean": "env_runners/episode_return_mean",
            "episode_reward_max": "env_runners/episode_return_max",
            "episode_reward_min": "env_runners/episode_return_min",
            "episode_len_mean": "env_runners/episode_len_mean"}
#: Result groups whose sub-keys depend on the algorithm (accepted as a prefix for RLlib built-ins).
FREE_GROUPS = ("env_runners/", "learners/", "evaluation/", "timers/", "perf/")


def allowed_stop_keys() -> List[str]:
    """The stop keys valid for every rllib_fast algorithm (the list printed on a mistake)."""
    return [*TUNE_KEYS, *TOP_LEVEL_KEYS, *(f"env_runners/{k}" for k in ENV_RUNNER_KEYS),
            *(f"evaluation/env_runners/{k}" for k in EVALUATION_KEYS)]


def _flatten(stop: Mapping[str, Any], prefix: str = "") -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for k, v in stop.items():
        if isinstance(v, Mapping):
            out.update(_flatten(v, f"{prefix}{k}/"))
        else:
            out[f"{prefix}{k}"] = v
    return out


def numeric_stop(stop: Any) -> Any:
    """``stop`` with every value a number. Tune compares ``result[key] >= value``
    after the first iteration, so a string (YAML 1.1 reads ``1e6`` as '1e6') would
    crash the run there: numeric strings become numbers, anything else raises
    ValueError (one line). Non-dict criteria pass through."""
    if not isinstance(stop, Mapping):
        return stop
    out: Dict[str, Any] = {}
    for key, value in stop.items():
        if isinstance(value, Mapping):
            out[key] = numeric_stop(value)
            continue
        if isinstance(value, str):
            try:
                value = float(value)
                value = int(value) if value.is_integer() else value
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"stop value of {key!r} = {value!r} is not allowed; allowed: a number")
        out[key] = value
    return out


def stop_key_error(stop: Any, fast: bool) -> Optional[str]:
    """One-line message for the first unknown key of a ``stop`` dict (None if all are known).

    ``fast``: the algorithm is an rllib_fast one (then group sub-keys are checked too).
    Non-dict stop criteria (a ``Stopper``, a callable) are not checked.
    """
    if not isinstance(stop, Mapping):
        return None
    allowed = allowed_stop_keys()
    for key, value in _flatten(stop).items():
        if key in OLD_KEYS:
            return (f"stop key {key!r} is never reported on RLlib's new API stack, so it would never stop "
                    f"the run; use {OLD_KEYS[key]!r}")
        if key in allowed:
            continue
        if not fast and key.startswith(FREE_GROUPS):
            continue
        if fast and key.startswith("learners/"):  # per-module learner metrics (losses, lr, ...)
            continue
        close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        return (f"unknown stop key {key!r} (a key no result has would never stop the run).{hint} "
                f"Allowed: {', '.join(allowed)}")
    return None
