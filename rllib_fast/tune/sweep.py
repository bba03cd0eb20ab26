"""``rllib-fast sweep FILE``: one sweep file -> one ``tune.Tuner``, on a workstation or a Ray cluster.

Why a Tuner (not the classic ``tune.run``): ``Tuner.restore`` resumes an
interrupted sweep with finished trials untouched (``--resume``), and the same
object is what a Python user builds -- :func:`build_tuner` returns it.

Sweep file (YAML/JSON; the classic experiment format plus sweep keys)::

    cartpole-fastppo-pbt:            # experiment name = Tune experiment dir = MLflow experiment
      run: FastPPO
      env: CartPole
      stop: {num_env_steps_sampled_lifetime: 200000}
      num_samples: 8
      config:                         # values may be search spaces:
        lr: {loguniform: [1.0e-4, 3.0e-3]}     # uniform, loguniform, quniform, qloguniform,
        seed: {randint: [0, 10000]}            # randint, lograndint, choice, randn, grid_search
      metric: env_runners/episode_return_mean  # default
      mode: max                                # default
      scheduler: {type: pbt, perturbation_interval: 4,
                  hyperparam_mutations: {lr: {loguniform: [1.0e-4, 1.0e-2]}, clip_param: [0.1, 0.2, 0.3]}}
      # scheduler: {type: asha, max_t: 50, grace_period: 5}  (time_attr: training_iteration)
      # search: {type: optuna, seed: 0}                      (or random)
      resources: {cpu: 1, gpu: auto, trials_per_gpu: 4}     # packing, see below
      max_concurrent_trials: 2
      max_failures: 2                 # FailureConfig: restart a crashed trial from its last checkpoint
      checkpoint_config: {checkpoint_frequency: 4, checkpoint_at_end: true, num_to_keep: 2}
      reuse_actors: true

``.py`` files work as for ``rllib train file`` (``config``, ``stop``,
``tune_config`` with ``search_alg``/``scheduler``/...).

Resource packing: each trial is one Ray actor asking for ``resources.cpu``
CPUs (``num_cpus_for_main_process``) and ``resources.gpu`` GPUs
(``num_gpus_per_learner``; fractional values pack several small-env trials on
one GPU). ``gpu: auto`` means ``1/trials_per_gpu`` when the Ray cluster has a
GPU and 0 otherwise. Tune starts as many trials as fit, so on a 2-core
workstation ``cpu: 1`` runs two trials at a time and on a cluster they spread
over all nodes. ``--address auto|HOST:PORT`` connects to a running cluster;
the file is the same.
"""
from __future__ import annotations

import copy
import math
import os
from typing import Any, Dict, Mapping, Optional

from ..core.metrics import RETURN_KEY
from .session import init_ray  # noqa: F401  (public here too: sweep.init_ray)

#: YAML search-space forms ``{name: [args...]}`` -> ``ray.tune`` sampler name.
DOMAINS = ("uniform", "loguniform", "quniform", "qloguniform", "randint", "lograndint", "qrandint",
           "choice", "randn")
#: Per-experiment keys this module consumes (everything else is checked by tune.plan).
SWEEP_KEYS = ("scheduler", "search", "metric", "mode", "resources", "max_concurrent_trials", "max_failures",
              "failure_config", "reuse_actors", "callbacks")
SCHEDULERS = ("fifo", "pbt", "asha", "median")
SEARCHERS = ("random", "optuna")


class SweepError(ValueError):
    """A mistake in a sweep file (turned into a one-line CLI error)."""


# ----------------------------------------------------------------------------------------------
# search spaces
# ----------------------------------------------------------------------------------------------
def to_search_space(value: Any, where: str = "config") -> Any:
    """Turn YAML forms such as ``{loguniform: [1e-4, 1e-2]}`` into Tune domains (recursively).
    ``{grid_search: [...]}`` is left for Tune; a plain list stays a list."""
    from ray import tune

    if isinstance(value, Mapping):
        if len(value) == 1:
            (key, args), = value.items()
            if key in DOMAINS:
                if key == "choice":
                    if not isinstance(args, list) or not args:
                        raise SweepError(f"{where}: `choice` needs a non-empty list, got {args!r}")
                    return tune.choice(args)
                args = args if isinstance(args, list) else [args]
                try:
                    return getattr(tune, key)(*args)
                except (TypeError, ValueError) as err:
                    raise SweepError(f"{where}: bad `{key}` arguments {args!r}: {err}") from None
        return {k: to_search_space(v, f"{where}.{k}") for k, v in value.items()}
    return value


def _mutations(spec: Mapping[str, Any]) -> Dict[str, Any]:
    """PBT ``hyperparam_mutations``: a list = choices, a domain form = resampling distribution."""
    return {k: (list(v) if isinstance(v, list) else to_search_space(v, f"hyperparam_mutations.{k}"))
            for k, v in spec.items()}


# ----------------------------------------------------------------------------------------------
# schedulers and searchers
# ----------------------------------------------------------------------------------------------
def _not_a_spec(spec: Any, what: str) -> bool:
    """True for an object to pass through (a scheduler/searcher instance); raises
    for plain values that are neither that nor a ``{type: ...}`` mapping."""
    if isinstance(spec, (list, tuple, int, float, bool)):
        raise SweepError(f"`{what}` = {spec!r} is not allowed; allowed: a mapping {{type: ..., <arguments>}}, "
                         f"a type name, or a Tune {what} object")
    return spec is None or not isinstance(spec, (Mapping, str))


def make_scheduler(spec: Any):
    """A Tune scheduler from ``{type: pbt|asha|median|fifo, ...kwargs}`` (metric/mode are
    set on the TuneConfig, not here). An object is passed through."""
    if _not_a_spec(spec, "scheduler"):
        return spec
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler, MedianStoppingRule, PopulationBasedTraining

    spec = {"type": spec} if isinstance(spec, str) else dict(spec)
    kind = str(spec.pop("type", "")).lower()
    if kind not in SCHEDULERS:
        raise SweepError(f"scheduler type {kind!r} is not allowed; allowed: {', '.join(SCHEDULERS)}")
    try:
        if kind == "fifo":
            return FIFOScheduler()
        if kind == "pbt":
            spec.setdefault("time_attr", "training_iteration")
            if "hyperparam_mutations" not in spec:
                raise SweepError("scheduler pbt needs `hyperparam_mutations` (key -> list or distribution)")
            spec["hyperparam_mutations"] = _mutations(spec["hyperparam_mutations"])
            return PopulationBasedTraining(**spec)
        if kind == "asha":
            spec.setdefault("time_attr", "training_iteration")
            return ASHAScheduler(**spec)
        spec.setdefault("time_attr", "training_iteration")
        return MedianStoppingRule(**spec)
    except (TypeError, ValueError, AssertionError) as err:  # Tune checks its arguments with asserts too
        raise SweepError(f"scheduler {kind}: {err}") from None


def make_searcher(spec: Any, max_concurrent: Optional[int] = None):
    """A Tune search algorithm from ``{type: optuna|random, ...kwargs}`` (None = random/grid)."""
    if _not_a_spec(spec, "search"):
        return spec
    spec = {"type": spec} if isinstance(spec, str) else dict(spec)
    kind = str(spec.pop("type", "")).lower()
    if kind not in SEARCHERS:
        raise SweepError(f"search type {kind!r} is not allowed; allowed: {', '.join(SEARCHERS)}")
    if kind == "random":
        return None
    from ray.tune.search import ConcurrencyLimiter
    from ray.tune.search.optuna import OptunaSearch

    try:
        searcher = OptunaSearch(**spec)
    except (TypeError, ValueError, AssertionError) as err:
        raise SweepError(f"search optuna: {err}") from None
    return ConcurrencyLimiter(searcher, max_concurrent=max_concurrent) if max_concurrent else searcher


# ----------------------------------------------------------------------------------------------
# resources
# ----------------------------------------------------------------------------------------------
def cluster_gpus() -> float:
    import ray

    return float(ray.cluster_resources().get("GPU", 0)) if ray.is_initialized() else 0.0


def resource_overrides(resources: Optional[Mapping[str, Any]], gpus_available: float) -> Dict[str, Any]:
    """Config keys that make each trial ask for ``resources`` (see module docstring)."""
    if not resources:
        return {}
    allowed = {"cpu", "gpu", "trials_per_gpu"}
    unknown = set(resources) - allowed
    if unknown:
        raise SweepError(f"resources: unknown key(s) {sorted(unknown)}; allowed: {', '.join(sorted(allowed))}")
    out: Dict[str, Any] = {}
    if resources.get("cpu") is not None:
        out["num_cpus_for_main_process"] = resources["cpu"]
    gpu = resources.get("gpu", 0)
    per = whole_number(resources.get("trials_per_gpu", 4), "resources.trials_per_gpu", minimum=1)
    if gpu == "auto":
        gpu = 1.0 / per if gpus_available > 0 else 0
    if not isinstance(gpu, (int, float)) or gpu < 0:
        raise SweepError(f"resources.gpu = {gpu!r}; allowed: a number >= 0 (fractions pack trials) or 'auto'")
    if gpu:
        out["num_gpus_per_learner"] = gpu
    return out


# ----------------------------------------------------------------------------------------------
# loading a file
# ----------------------------------------------------------------------------------------------
class Sweep:
    """One Tune experiment of a sweep file, ready for :func:`build_tuner`."""

    def __init__(self, name: str, spec: Dict[str, Any], tune_kwargs: Dict[str, Any]):
        self.name = name
        self.run: str = spec["run"]
        self.param_space: Dict[str, Any] = spec["config"]
        self.stop = spec["stop"]
        self.checkpoint_config: Dict[str, Any] = spec["checkpoint_config"]
        self.storage_path: str = spec["storage_path"]
        self.num_samples: int = spec["num_samples"]
        self.max_failures: int = int(spec.get("max_failures", 0))
        self.fail_fast = tune_kwargs.get("fail_fast", False)
        self.scheduler = tune_kwargs.get("scheduler")
        self.search_alg = tune_kwargs.get("search_alg")
        self.metric: str = tune_kwargs.get("metric") or RETURN_KEY
        self.mode: str = tune_kwargs.get("mode") or "max"
        self.max_concurrent_trials: Optional[int] = tune_kwargs.get("max_concurrent_trials")
        self.reuse_actors: bool = bool(tune_kwargs.get("reuse_actors", False))

    @property
    def path(self) -> str:
        """The experiment directory (what ``--resume`` and ``rllib-fast report`` take)."""
        return os.path.join(self.storage_path, self.name)


def _import(name: str):
    import importlib

    mod, _, attr = name.replace(":", ".").rpartition(".")
    try:
        return getattr(importlib.import_module(mod), attr)
    except (ImportError, AttributeError, ValueError) as err:
        raise SweepError(f"cannot import {name!r}: {err}") from None


def check_search_space(searcher: Any, param_space: Mapping[str, Any]) -> None:
    """Optuna cannot sample every Tune domain (``randn``, ``grid_search``): say so
    now, in one line, not from inside ``Tuner.fit`` after Ray started."""
    from ray.tune.search import ConcurrencyLimiter

    inner = searcher.searcher if isinstance(searcher, ConcurrencyLimiter) else searcher
    try:
        from ray.tune.search.optuna import OptunaSearch
    except ImportError:
        return
    if isinstance(inner, OptunaSearch):
        try:
            OptunaSearch.convert_search_space(dict(param_space))
        except (ValueError, TypeError) as err:
            raise SweepError(f"search optuna: the config's search space: {err} (allowed with optuna: "
                             "uniform, quniform, loguniform, qloguniform, randint, qrandint, lograndint, "
                             "choice; no grid_search, randn or sample_from)") from None


def whole_number(value: Any, key: str, minimum: Optional[int] = None) -> int:
    """A file's count (``num_samples``, ``max_failures``, ...) as an int: numbers and
    numeric strings (YAML 1.1 reads ``1e3`` as a string); anything else is one line."""
    allowed = "a whole number" + (f" >= {minimum}" if minimum is not None else "")
    try:
        out = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        out = math.nan
    if not math.isfinite(out) or out != int(out) or (minimum is not None and out < minimum):
        raise SweepError(f"`{key}` = {value!r} is not allowed; allowed: {allowed}")
    return int(out)


def failure_config(spec: Any) -> Dict[str, Any]:
    """``failure_config`` checked against ``tune.FailureConfig``'s arguments."""
    if not isinstance(spec, Mapping):
        raise SweepError(f"`failure_config` = {spec!r} is not allowed; allowed: a mapping with max_failures, "
                         "fail_fast")
    unknown = sorted(set(spec) - {"max_failures", "fail_fast"})
    if unknown:
        raise SweepError(f"`failure_config` key {unknown[0]!r} is not allowed; allowed: max_failures, fail_fast")
    out = dict(spec)
    if "max_failures" in out:
        out["max_failures"] = whole_number(out["max_failures"], "failure_config.max_failures")
    return out


def split_sweep_keys(raw: Mapping[str, Any], where: str, gpus_available: float = 0.0):
    """Split one experiment of a YAML file into its classic spec (search-space
    forms in ``config`` turned into Tune domains, ``resources`` into config
    keys, ``max_failures`` kept) and the Tune-level keyword arguments
    (``scheduler``, ``search_alg``, ``metric``, ``mode``,
    ``max_concurrent_trials``, ``reuse_actors``) -- only the keys given.
    Used by ``rllib-fast sweep`` and by ``rllib train file`` alike."""
    raw = copy.deepcopy(dict(raw))
    extra = {k: raw.pop(k) for k in SWEEP_KEYS if k in raw}
    try:
        config = to_search_space(dict(raw.get("config") or {}))
        config.update(resource_overrides(extra.get("resources"), gpus_available))
        if extra.get("callbacks"):
            config["callbacks"] = _import(extra["callbacks"])
        raw["config"] = config
        failure = failure_config(extra.get("failure_config") or {})
        if "max_failures" in extra:
            failure["max_failures"] = whole_number(extra["max_failures"], "max_failures")
        if "max_failures" in failure:   # an Experiment argument (also read by `rllib train file`)
            raw["max_failures"] = failure["max_failures"]
        kw: Dict[str, Any] = {}
        if extra.get("scheduler") is not None:
            kw["scheduler"] = make_scheduler(extra["scheduler"])
        if extra.get("search") is not None:
            kw["search_alg"] = make_searcher(extra["search"], extra.get("max_concurrent_trials"))
            if kw["search_alg"] is not None:
                check_search_space(kw["search_alg"], config)
        for key in ("metric", "mode", "max_concurrent_trials", "reuse_actors"):
            if extra.get(key) is not None:
                kw[key] = extra[key]
        if "fail_fast" in failure:      # a tune.run / FailureConfig argument
            kw["fail_fast"] = failure["fail_fast"]
    except SweepError as err:
        raise SweepError(f"{where}: {err}") from None
    if kw.get("mode") not in (None, "max", "min"):
        raise SweepError(f"{where}: mode {kw['mode']!r} is not allowed; allowed: 'max', 'min'")
    if kw.get("scheduler") is not None or kw.get("search_alg") is not None:
        kw.setdefault("metric", RETURN_KEY)
        kw.setdefault("mode", "max")
    return raw, kw


# ----------------------------------------------------------------------------------------------
# the Tuner
# ----------------------------------------------------------------------------------------------
def _trial_dirname(trial) -> str:
    return f"{trial.trainable_name}_{trial.trial_id}"


def build_tuner(sweep: Sweep, callbacks: Optional[list] = None, *, verbose: int = 1, resume: bool = False,
                progress_reporter=None):
    """The ``tune.Tuner`` for ``sweep`` (``resume=True``: ``Tuner.restore`` of its
    experiment directory, unfinished and errored trials resumed, finished ones untouched)."""
    from ray import tune

    if resume:
        if not tune.Tuner.can_restore(sweep.path):
            raise SweepError(f"--resume: no sweep to resume at {sweep.path} (no experiment state there)")
        return tune.Tuner.restore(sweep.path, trainable=sweep.run, resume_unfinished=True, resume_errored=True,
                                  param_space=sweep.param_space)
    tune_config = tune.TuneConfig(
        metric=sweep.metric, mode=sweep.mode, scheduler=sweep.scheduler, search_alg=sweep.search_alg,
        num_samples=sweep.num_samples, max_concurrent_trials=sweep.max_concurrent_trials,
        reuse_actors=sweep.reuse_actors, trial_dirname_creator=_trial_dirname)
    run_config = tune.RunConfig(
        name=sweep.name, storage_path=sweep.storage_path, stop=sweep.stop, callbacks=list(callbacks or []),
        checkpoint_config=tune.CheckpointConfig(**sweep.checkpoint_config),
        failure_config=tune.FailureConfig(max_failures=sweep.max_failures, fail_fast=sweep.fail_fast),
        verbose=verbose,
        progress_reporter=progress_reporter)
    return tune.Tuner(sweep.run, param_space=sweep.param_space, tune_config=tune_config, run_config=run_config)


def add_arguments(p) -> None:
    """Sweep-only flags (the run options are the CLI's, shared with ``train``)."""
    p.add_argument("--address", default=None, metavar="auto|HOST:PORT",
                   help="run the same file on a Ray cluster ('auto': the one this machine is part of)")
    p.add_argument("--resume", action="store_true",
                   help="resume the interrupted sweep in <storage-path>/<name> (Tuner.restore): "
                        "unfinished and errored trials continue from their last checkpoints, finished ones are kept")
    p.add_argument("--dashboard", action="store_true", help="start the Ray dashboard (local Ray only)")
    p.add_argument("--dashboard-host", default="127.0.0.1",
                   help="dashboard bind address (default 127.0.0.1; 0.0.0.0 exposes it to the network)")


# ----------------------------------------------------------------------------------------------
# where trials run
# ----------------------------------------------------------------------------------------------
from ray.rllib.callbacks.callbacks import RLlibCallback  # noqa: E402  (rllib is loaded with rllib_fast anyway)


class ReportNodeCallback(RLlibCallback):
    """Adds ``node_id`` (the Ray node the trial runs on) to every result, so a
    sweep on a cluster shows where each trial landed (``callbacks:
    rllib_fast.tune.sweep:ReportNodeCallback`` in a sweep file)."""

    def on_train_result(self, *, algorithm=None, metrics_logger=None, result=None, **kwargs) -> None:
        import ray

        if result is not None:
            result["node_id"] = ray.get_runtime_context().get_node_id()
