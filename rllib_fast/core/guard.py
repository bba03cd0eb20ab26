"""Non-finite / exploding-update guard for every FastAlgorithm iteration.

Why: a NaN loss poisons the parameters in one optimizer step, and every later
iteration -- and every checkpoint taken after it -- is garbage. Under Tune a
sweep would silently keep training (and checkpointing) a dead trial, and PBT
could even copy the NaN weights into healthy trials. The guard looks at each
iteration's result once (after ``training_step``, not on the hot path) and:

* ``nonfinite_guard="stop"`` (default): raises :class:`NonFiniteUpdateError`
  naming the metric, its value and the iteration. The trial stops *before*
  Tune could save this iteration, so the last checkpoint on disk is the last
  good one (with ``FailureConfig(max_failures=N)`` Tune retries from it);
* ``"skip"``: puts back the parameters and optimizer state from before the
  iteration (the bad update is discarded; sampled env steps still count) and
  reports ``guard/skipped_updates`` so the skip is visible;
* ``"off"``: no check.

What counts as bad: any learner metric whose name says it is a loss or a value
estimate (``*loss*``, ``q_mean``, ``*value*``) that is NaN/inf or larger in
magnitude than ``nonfinite_guard_max_abs``, or any non-finite parameter of a
module in ``stateful_components()``. Diagnostics such as ``vf_explained_var``
(legitimately NaN when returns are constant) are not checked. Nor are the
learner metrics of an iteration that trained no env steps: they hold no new
value, and RLlib reduces such a stat to NaN.
"""
from __future__ import annotations

import copy
import logging
import math
import numbers
from typing import Any, Dict, Mapping, Optional, Tuple

import torch
from ray.rllib.utils.metrics import ALL_MODULES, NUM_ENV_STEPS_TRAINED

logger = logging.getLogger(__name__)

MODES = ("stop", "skip", "off")
_WATCH = ("loss", "q_mean", "value")
_IGNORE = ("explained_var", "num_", "lifetime", "throughput", "curr_lr")


class NonFiniteUpdateError(RuntimeError):
    """An iteration produced a NaN/inf or exploding loss, value or parameter."""


def _flat(tree: Any, prefix: str = "") -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    if isinstance(tree, Mapping):
        for k, v in tree.items():
            out.update(_flat(v, f"{prefix}{k}/"))
    else:
        out[prefix[:-1]] = tree
    return out


def bad_metric(learner_results: Mapping[str, Any], max_abs: Optional[float]) -> Optional[Tuple[str, float]]:
    """First watched learner metric that is non-finite or above ``max_abs``."""
    for key, value in sorted(_flat(learner_results).items()):
        leaf = key.rsplit("/", 1)[-1]
        if not any(w in leaf for w in _WATCH) or any(i in leaf for i in _IGNORE):
            continue
        if isinstance(value, torch.Tensor) and value.numel() == 1:
            value = value.item()
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            continue
        value = float(value)
        if not math.isfinite(value) or (max_abs is not None and abs(value) > max_abs):
            return key, value
    return None


def _modules(algo) -> Dict[str, torch.nn.Module]:
    return {k: v for k, v in algo.stateful_components().items() if isinstance(v, torch.nn.Module)}


def bad_parameter(algo) -> Optional[str]:
    """Name of the first module parameter holding a NaN/inf (one host sync per module)."""
    for name, module in _modules(algo).items():
        params = [p for p in module.parameters() if p.is_floating_point()]
        if params and not bool(torch.stack([torch.isfinite(p).all() for p in params]).all()):
            for pname, p in module.named_parameters():
                if p.is_floating_point() and not bool(torch.isfinite(p).all()):
                    return f"{name}.{pname}"
    return None


def _guarded(algo) -> Dict[str, Any]:
    """What 'skip' rolls back: the algorithm's ``guarded_components()`` (its
    stateful components, less what must not go back), for algorithms without
    that hook all of ``stateful_components()``."""
    hook = getattr(algo, "guarded_components", None)
    return hook() if hook is not None else algo.stateful_components()


def rollback_to(algo, snapshot: Optional[Dict[str, Any]]) -> None:
    """Load a :meth:`UpdateGuard.snapshot` back into ``algo``."""
    for k, v in _guarded(algo).items():
        if snapshot and k in snapshot:
            v.load_state_dict(snapshot[k])


class UpdateGuard:
    """Per-iteration check; see the module docstring."""

    def __init__(self, mode: str = "stop", max_abs: Optional[float] = 1e10):
        if mode not in MODES:
            raise ValueError(f"`nonfinite_guard` = {mode!r} is not allowed; allowed: {', '.join(map(repr, MODES))}")
        self.mode = mode
        self.max_abs = max_abs

    @classmethod
    def from_config(cls, config) -> "UpdateGuard":
        return cls(getattr(config, "nonfinite_guard", "stop"), getattr(config, "nonfinite_guard_max_abs", 1e10))

    def snapshot(self, algo) -> Optional[Dict[str, Any]]:
        """Copies of module and optimizer state, only in ``skip`` mode."""
        if self.mode != "skip":
            return None
        return {k: copy.deepcopy(v.state_dict()) for k, v in _guarded(algo).items()
                if isinstance(v, (torch.nn.Module, torch.optim.Optimizer))}

    def check(self, algo, result: Dict[str, Any], snapshot: Optional[Dict[str, Any]]) -> Dict[str, Any]:
        if self.mode == "off":
            return result
        problem = None
        learners = result.get("learners", {})
        # An iteration that trained nothing (DQN below one update's worth of credit, a
        # run refilling its replay after a restore) logged no learner scalars, and
        # RLlib reduces a window stat without new values to NaN: not a bad update.
        # Parameters are still checked.
        trained = learners.get(ALL_MODULES, {}).get(NUM_ENV_STEPS_TRAINED) if isinstance(learners, Mapping) else None
        found = None if trained == 0 else bad_metric(learners, self.max_abs)
        if found is not None:
            key, value = found
            what = "is not finite" if not math.isfinite(value) else f"exceeds nonfinite_guard_max_abs={self.max_abs:g}"
            problem = f"learner metric `learners/{key}` = {value!r} {what}"
        else:
            pname = bad_parameter(algo)
            if pname is not None:
                problem = f"parameter `{pname}` holds NaN/inf"
        skipped = getattr(algo, "nonfinite_skipped_updates", 0)
        if problem is not None:
            iteration = algo.iteration + 1
            name = type(algo).__name__
            if self.mode == "stop":
                raise NonFiniteUpdateError(
                    f"{name}: {problem} at training iteration {iteration}; stopping the trial so the last good "
                    "checkpoint stays intact (config nonfinite_guard='skip' discards bad updates instead)")
            rollback_to(algo, snapshot)
            group = getattr(algo, "_dp_group", None)
            if group is not None:   # data-parallel learners took the same update: all discard it
                group.rollback()
            skipped += 1
            algo.nonfinite_skipped_updates = skipped
            logger.warning("%s: %s at iteration %d; update skipped (nonfinite_guard='skip')", name, problem, iteration)
        result.setdefault("guard", {})["skipped_updates"] = skipped
        return result
