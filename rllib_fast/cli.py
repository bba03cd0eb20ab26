"""``rllib`` / ``rllib-fast``: the classic RLlib command line, restored for Ray 2.60.

Ray 2.60 ships no ``rllib`` console script. This argparse CLI brings back the
forms of the old one (ray-project/ray PRs #2375, #29204) on top of
``tune.run`` with legacy ``Experiment`` specs, for rllib_fast algorithms and
RLlib's built-ins alike::

    rllib train --algo FastPPO --env CartPole --config '{"num_envs": 64}' --stop '{"training_iteration": 20}'
    rllib train --algo PPO --env CartPole-v1 --config '{"num_env_runners": 0}'
    rllib train file tune_configs/cartpole-fastppo.yaml [--stop '{...}']
    rllib train -f tune_configs/cartpole-fastppo-grid.yaml
    rllib train file tune_configs/cartpole-fastppo-optuna.py
    rllib-fast sweep tune_configs/sweep-fastppo-pbt.yaml [--resume] [--address auto]   (tune.Tuner)
    rllib-fast report runs/<sweep name>
    rllib-fast evaluate CHECKPOINT --episodes 10
    rllib-fast list [algorithms|envs]

Experiment files
----------------
* YAML/JSON (classic tuned-example format): ``{experiment_name: {run, env, stop,
  config, checkpoint_config, num_samples, storage_path}}``; ``{"grid_search":
  [...]}`` dicts anywhere in ``config``. Legacy ``checkpoint_freq`` /
  ``checkpoint_at_end`` / ``local_dir`` keys are accepted.
* Python: the module must define ``config`` (an ``AlgorithmConfig``; its values
  may be Tune search-space objects such as ``tune.loguniform``) and may define
  ``stop`` (dict), ``name`` (str), ``checkpoint_config`` (dict or
  ``tune.CheckpointConfig``) and ``tune_config`` -- a ``tune.TuneConfig`` or a
  dict with the same keys: ``search_alg`` (e.g. ``OptunaSearch``), ``scheduler``,
  ``metric``, ``mode``, ``num_samples``, ``max_concurrent_trials``. Top-level
  ``search_alg`` / ``scheduler`` / ``num_samples`` / ``metric`` / ``mode`` also
  work. The algorithm is ``config.algo_class`` (or the config class name minus
  ``Config``, as in the old CLI).

Command-line flags override file values (``--stop``, ``--num-samples``,
``--config`` merged into every experiment's config, checkpoint flags).

Every run records to MLflow (``--no-mlflow`` to disable): ``MLFLOW_TRACKING_URI``
if set, else ``sqlite:///<cwd>/mlflow.db``; see :mod:`rllib_fast.tune.mlflow`.
Errors in what the user typed (unknown algorithm, bad JSON, invalid config
values) print one line on stderr and exit with status 2.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import difflib
import json
import math
import os
import re
import sys
from typing import Any, Dict, List, Mapping, Optional, Tuple

RETURN_KEY = "env_runners/episode_return_mean"
STEP_KEY = "num_env_steps_sampled_lifetime"
METRIC_COLUMNS = {RETURN_KEY: "return", STEP_KEY: "env_steps", "time_total_s": "time (s)"}
#: The command name (rllib / rllib-fast) handed to a re-executed CLI (see tune.session.reexec_for_loopback).
PROG_ENV = "RLLIB_FAST_PROG"
_SEARCH_KEYS = ("search_alg", "scheduler", "metric", "mode", "num_samples", "max_concurrent_trials")


class UsageError(Exception):
    """A mistake in what the user typed: printed as one line, exit status 2."""


# ----------------------------------------------------------------------------------------------
# algorithm names
# ----------------------------------------------------------------------------------------------
def fast_algorithms() -> Dict[str, type]:
    from .algorithms import ALGORITHMS

    return dict(ALGORITHMS)


def rllib_algorithms() -> List[str]:
    from ray.rllib.algorithms.registry import ALGORITHMS

    return sorted(ALGORITHMS)


def resolve_algorithm(name: Any) -> type:
    """Trainable class for an algorithm name (ours, RLlib's, Tune-registered, or
    ``pkg.module:Class``); raises :class:`UsageError` with suggestions."""
    if not isinstance(name, str) or not name:
        raise UsageError(f"no algorithm given (--algo); allowed: {', '.join(all_algorithm_names())}")
    ours = fast_algorithms()
    if name in ours:
        return ours[name]
    if name in rllib_algorithms():
        from ray.rllib.algorithms.registry import _get_algorithm_class

        return _get_algorithm_class(name)
    if ":" in name:
        import importlib

        mod, _, attr = name.partition(":")
        try:
            return getattr(importlib.import_module(mod), attr)
        except (ImportError, AttributeError) as err:
            raise UsageError(f"cannot import algorithm {name!r}: {err}") from None

    from ray.tune.registry import TRAINABLE_CLASS, _global_registry

    try:
        if _global_registry.contains(TRAINABLE_CLASS, name):
            return _global_registry.get(TRAINABLE_CLASS, name)
    except Exception:
        pass
    allowed = all_algorithm_names()
    close = difflib.get_close_matches(name, allowed, n=1, cutoff=0.5)
    if not close:
        close = [a for a in allowed if a.lower() == name.lower()]
    hint = f" Did you mean {close[0]!r}?" if close else ""
    raise UsageError(f"unknown algorithm {name!r}.{hint} Allowed: {', '.join(allowed)}")


def all_algorithm_names() -> List[str]:
    return list(fast_algorithms()) + rllib_algorithms()


def _is_fast(cls: type) -> bool:
    from .core.algorithm import FastAlgorithm

    return isinstance(cls, type) and issubclass(cls, FastAlgorithm)


def _is_rllib(cls: type) -> bool:
    from ray.rllib.algorithms.algorithm import Algorithm

    return isinstance(cls, type) and issubclass(cls, Algorithm)


# ----------------------------------------------------------------------------------------------
# config validation (before any trial starts, so mistakes are one line, not a trial traceback)
# ----------------------------------------------------------------------------------------------
def _grid_points(config: Any, path: Tuple = ()) -> List[Tuple[Tuple, list]]:
    out = []
    if isinstance(config, Mapping):
        if set(config) == {"grid_search"}:
            return [(path, list(config["grid_search"]))]
        for k, v in config.items():
            out += _grid_points(v, path + (k,))
    return out


def _set_path(tree: dict, path: Tuple, value: Any) -> None:
    for k in path[:-1]:
        tree = tree[k]
    tree[path[-1]] = value


def _strip_search_space(config: Any) -> Any:
    """Copy of ``config`` without Tune Domain objects (they are sampled later)."""
    from ray.tune.search.sample import Domain

    if isinstance(config, Mapping):
        return {k: _strip_search_space(v) for k, v in config.items() if not isinstance(v, Domain)}
    return config


def validate_config(cls: type, config: Mapping[str, Any]) -> None:
    """Validate ``config`` for algorithm ``cls``: every grid_search value once;
    search-space objects are skipped. Raises :class:`UsageError`."""
    if not _is_rllib(cls):
        return
    base = _strip_search_space(copy.deepcopy(dict(config)))
    grids = _grid_points(base)
    variants = []
    first = copy.deepcopy(base)
    for path, values in grids:
        _set_path(first, path, values[0] if values else None)
    variants.append(first)
    for path, values in grids:
        for v in values[1:]:
            variant = copy.deepcopy(first)
            _set_path(variant, path, v)
            variants.append(variant)
    for variant in variants:
        try:
            with _quiet_rllib():
                cfg = cls.get_default_config()
                if not _is_fast(cls):
                    _warn_unknown_rllib_keys(cls, variant)
                cfg = cfg.update_from_dict(variant)
                cfg.validate()
        except (ValueError, TypeError) as err:
            raise UsageError(_one_line(err)) from None


@contextlib.contextmanager
def _quiet_rllib():
    """Silence RLlib's driver-side warnings (e.g. "You are running X on the new
    API stack!") while we only validate; the trial logs them anyway."""
    import logging

    # ray._common.deprecation: RLlib 2.60's RLModule.__init__ builds an RLModuleConfig itself,
    # which logs "RLModule(config=...) has been deprecated" although no caller passed one.
    logs = [logging.getLogger(name) for name in ("ray.rllib", "ray.tune", "ray._common.deprecation")]
    old = [log.level for log in logs]
    for log in logs:
        log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for log, level in zip(logs, old):
            log.setLevel(level)


def _warn_unknown_rllib_keys(cls: type, config: Mapping[str, Any]) -> None:
    """RLlib's update_from_dict silently accepts any key; at least warn."""
    cfg = cls.get_default_config()
    known = set(cfg.to_dict()) | set(vars(cfg)) | {"env", "lambda", "callbacks", "multiagent", "model"}
    for key in config:
        if key not in known:
            close = difflib.get_close_matches(key, sorted(known), n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            print(f"warning: {cls.__name__} has no config key {key!r}.{hint}", file=sys.stderr)


def _one_line(err: BaseException) -> str:
    text = str(err).strip()
    # RLlib appends a hint on how to switch validation off; not useful here.
    text = text.split("\nTo suppress all validation errors")[0]
    return " ".join(text.split()) or type(err).__name__


def parse_json(text: Optional[str], flag: str) -> Dict[str, Any]:
    if text is None or text == "":
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise UsageError(f"invalid JSON for {flag}: {err.msg} at line {err.lineno} column {err.colno} "
                         f"in {text!r}") from None
    if not isinstance(value, dict):
        raise UsageError(f"{flag} must be a JSON object such as '{{\"key\": value}}', got {text!r}")
    return value


# ----------------------------------------------------------------------------------------------
# experiment specs
# ----------------------------------------------------------------------------------------------
class Plan:
    """What to run: experiment specs (classic dict form) plus Tune-level options."""

    def __init__(self):
        self.experiments: Dict[str, Dict[str, Any]] = {}
        self.tune_kwargs: Dict[str, Any] = {}
        # per experiment: Tune-level keys of a sweep file (scheduler, search_alg, metric, ...)
        self.sweep_kwargs: Dict[str, Dict[str, Any]] = {}


def _checkpoint_config(spec: Dict[str, Any], args) -> Dict[str, Any]:
    """Merge legacy keys, the spec's checkpoint_config and CLI flags (flags win)."""
    from ray.tune import CheckpointConfig

    ckpt = spec.pop("checkpoint_config", None) or {}
    if isinstance(ckpt, CheckpointConfig):
        ckpt = {k: getattr(ckpt, k) for k in ("num_to_keep", "checkpoint_score_attribute", "checkpoint_score_order",
                                              "checkpoint_frequency", "checkpoint_at_end")}
    ckpt = dict(ckpt)
    for legacy, new in (("checkpoint_freq", "checkpoint_frequency"), ("checkpoint_at_end", "checkpoint_at_end"),
                        ("keep_checkpoints_num", "num_to_keep")):
        if legacy in spec:
            ckpt.setdefault(new, spec.pop(legacy))
    if args.checkpoint_freq is not None:
        ckpt["checkpoint_frequency"] = args.checkpoint_freq
    if args.checkpoint_at_end is not None:
        ckpt["checkpoint_at_end"] = args.checkpoint_at_end
    ckpt.setdefault("checkpoint_at_end", True)
    return ckpt


def _finish_spec(name: str, spec: Dict[str, Any], args, overrides: Dict[str, Any]) -> Dict[str, Any]:
    spec = dict(spec)
    run = spec.pop("run", None) or spec.pop("algo", None)
    cls = resolve_algorithm(run)
    config = dict(spec.pop("config", None) or {})
    if "env" in spec:
        config.setdefault("env", spec.pop("env"))
    config.update(overrides)
    if args.seed is not None:
        config["seed"] = args.seed
    validate_config(cls, config)
    if "local_dir" in spec:
        spec.setdefault("storage_path", spec.pop("local_dir"))
    out = {
        "run": run,
        "config": config,
        "stop": parse_json(args.stop, "--stop") if args.stop is not None else dict(spec.pop("stop", None) or {}),
        "checkpoint_config": _checkpoint_config(spec, args),
        "storage_path": os.path.abspath(os.path.expanduser(spec.pop("storage_path", None) or args.storage_path)),
        "num_samples": args.num_samples if args.num_samples is not None else int(spec.pop("num_samples", 1)),
    }
    spec.pop("stop", None)
    spec.pop("num_samples", None)
    from .tune.stop_keys import stop_key_error

    err = stop_key_error(out["stop"], _is_fast(cls))
    if err:
        raise UsageError(f"experiment {name!r}: {err}")
    for key in spec:  # anything else must be an Experiment argument (e.g. max_failures)
        if key not in _experiment_keys():
            allowed = sorted(set(_experiment_keys()) | {"env", "checkpoint_freq", "checkpoint_at_end",
                                                        "keep_checkpoints_num"})
            close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise UsageError(f"experiment {name!r}: unknown key {key!r}.{hint} Allowed: {', '.join(allowed)}")
    out.update(spec)
    return out


def _experiment_keys() -> List[str]:
    """The keys of an experiment spec (``ray.tune.Experiment``'s arguments) plus the sweep keys."""
    import inspect

    from ray.tune.experiment import Experiment

    from .tune.sweep import SWEEP_KEYS

    params = [p for p in inspect.signature(Experiment.__init__).parameters if p not in ("self", "name")]
    return params + list(SWEEP_KEYS)


def check_devices(experiments: Mapping[str, Mapping[str, Any]], args) -> None:
    """Raise :class:`UsageError` when an experiment asks for a GPU a local Ray cannot
    have (see :func:`rllib_fast.tune.session.device_error`). Called just before Ray
    starts, not while parsing: a GPU sweep file still parses on a laptop."""
    from .tune.session import device_error, names_cluster

    local = not any(names_cluster(a) for a in (getattr(args, "ray_address", None), getattr(args, "address", None),
                                               os.environ.get("RAY_ADDRESS")))
    for name, spec in experiments.items():
        err = device_error(spec.get("config") or {}, local=local)
        if err:
            raise UsageError(f"experiment {name!r}: {err}")


def plan_from_flags(args) -> Plan:
    if not args.algo:
        raise UsageError("train needs --algo ALGO (or `train file FILE` / `train -f FILE`)")
    cls = resolve_algorithm(args.algo)
    config = parse_json(args.config, "--config")
    if args.env:
        config["env"] = args.env
    if "env" not in config:
        default_env = getattr(cls.get_default_config(), "env", None) if _is_rllib(cls) else None
        if default_env is None:
            raise UsageError("no env given; use --env NAME (see `rllib-fast list envs`)")
    name = args.experiment_name or _safe_name(f"{args.algo}_{config.get('env', '')}")
    plan = Plan()
    spec = {"run": args.algo, "config": config}
    plan.experiments[name] = _finish_spec(name, spec, args, {})
    return plan


def _safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.\-]+", "_", text).strip("_") or "experiment"


def plan_from_file(path: str, args, gpus_available: float = 0.0) -> Plan:
    if not os.path.isfile(path):
        raise UsageError(f"experiment file not found: {path}")
    overrides = parse_json(args.config, "--config")
    plan = Plan()
    if path.endswith(".py"):
        return _plan_from_py(path, args, overrides)
    import yaml

    with open(path) as f:
        try:
            data = yaml.safe_load(f)
        except yaml.YAMLError as err:
            raise UsageError(f"cannot parse {path}: {_one_line(err)}") from None
    if not isinstance(data, dict) or not data or not all(isinstance(v, dict) for v in data.values()):
        raise UsageError(f"{path}: expected a mapping of experiment name -> {{run, env, stop, config, ...}}")
    for name, spec in data.items():
        if "run" not in spec and "algo" not in spec:
            raise UsageError(f"{path}: experiment {name!r} has no `run` (the algorithm name)")
        exp_name = args.experiment_name if (args.experiment_name and len(data) == 1) else str(name)
        from .tune.sweep import SweepError, split_sweep_keys  # search spaces, scheduler, search, resources

        try:
            spec, sweep_kwargs = split_sweep_keys(spec, f"{path}: experiment {name!r}", gpus_available)
        except SweepError as err:
            raise UsageError(str(err)) from None
        plan.experiments[exp_name] = _finish_spec(exp_name, spec, args, overrides)
        plan.sweep_kwargs[exp_name] = sweep_kwargs
    if len(plan.experiments) == 1:
        plan.tune_kwargs = dict(next(iter(plan.sweep_kwargs.values())))
    elif any(plan.sweep_kwargs.values()):
        raise UsageError(f"{path}: scheduler/search/metric keys need one experiment per file")
    return plan


def _plan_from_py(path: str, args, overrides: Dict[str, Any]) -> Plan:
    import runpy

    from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
    from ray.tune import TuneConfig

    try:
        module = runpy.run_path(path, run_name="__rllib_fast_experiment__")
    except Exception as err:
        raise UsageError(f"{path} raised {type(err).__name__}: {_one_line(err)}") from None
    config = module.get("config")
    if not isinstance(config, AlgorithmConfig):
        raise UsageError(f"{path} must define `config` (an AlgorithmConfig), found {type(config).__name__}")
    cls = config.algo_class
    if cls is None:
        run = type(config).__name__.replace("Config", "")
    else:
        run = next((k for k, v in fast_algorithms().items() if v is cls), None) or cls.__name__
    tune_cfg = module.get("tune_config") or {}
    if isinstance(tune_cfg, TuneConfig):
        tune_cfg = {k: getattr(tune_cfg, k) for k in _SEARCH_KEYS}
    tune_cfg = {k: v for k, v in dict(tune_cfg).items() if v is not None}
    for key in _SEARCH_KEYS:
        if module.get(key) is not None:
            tune_cfg.setdefault(key, module[key])
    unknown = set(tune_cfg) - set(_SEARCH_KEYS)
    if unknown:
        raise UsageError(f"{path}: unknown tune_config key(s) {sorted(unknown)}; allowed: {', '.join(_SEARCH_KEYS)}")
    spec = {"run": run, "config": config.to_dict(), "stop": module.get("stop") or {}}
    if module.get("checkpoint_config") is not None:
        spec["checkpoint_config"] = module["checkpoint_config"]
    if "num_samples" in tune_cfg:
        spec["num_samples"] = tune_cfg.pop("num_samples")
    name = args.experiment_name or module.get("name") or _safe_name(os.path.splitext(os.path.basename(path))[0])
    plan = Plan()
    plan.experiments[name] = _finish_spec(name, spec, args, overrides)
    plan.tune_kwargs = tune_cfg
    return plan


# ----------------------------------------------------------------------------------------------
# running
# ----------------------------------------------------------------------------------------------
def _init_ray(args) -> bool:
    """ray.init (unless already up; a local Ray of our own, loopback only, unless
    --ray-address names a cluster) and register our names; True if we started Ray."""
    from .tune.session import init_ray

    return init_ray(args.ray_address, num_cpus=args.ray_num_cpus, num_gpus=args.ray_num_gpus,
                    log_to_driver=args.verbose >= 1)


def ensure_registered() -> None:
    """Kept for callers of the old name; see :func:`rllib_fast.tune.session.ensure_registered`."""
    from .tune.session import ensure_registered as _register

    _register()


def run_plan(plan: Plan, args) -> int:
    import ray
    from ray import tune
    from ray.tune.experiment import Experiment

    from .tune.mlflow import MLflowRecorder, default_tracking_uri
    from .tune.plots import CurveCollector
    from .tune.session import progress_reporter, temporary_env

    check_devices(plan.experiments, args)
    started = _init_ray(args)
    try:
        experiments = []
        for name, spec in plan.experiments.items():
            spec = copy.deepcopy(spec)
            try:
                experiments.append(Experiment.from_json(name, spec))
            except Exception as err:
                raise UsageError(f"experiment {name!r}: {_one_line(err)}") from None
        collector = CurveCollector(RETURN_KEY)
        callbacks: list = [collector]
        recorder = None
        if args.mlflow:  # MLflow experiment = Tune experiment name
            recorder = MLflowRecorder(default_tracking_uri())
            callbacks.append(recorder)
        reporter = progress_reporter([spec.get("config") or {} for spec in plan.experiments.values()],
                                     max_report_frequency=10)
        kwargs = dict(plan.tune_kwargs)
        if kwargs.get("search_alg") is not None and len(experiments) > 1:
            raise UsageError("a search_alg works with one experiment per file")
        verbose = min(3, args.verbose)
        if kwargs.get("search_alg") is not None:
            # Keyword form: a search_alg only sees the search space through `config=`.
            (name, spec), = plan.experiments.items()
            spec = copy.deepcopy(spec)
            run = spec.pop("run")
            ckpt = spec.pop("checkpoint_config")
            target: Any = run
            if isinstance(spec.get("sync_config"), dict):
                spec["sync_config"] = tune.SyncConfig(**spec["sync_config"])
            kwargs.update(name=name, checkpoint_config=tune.CheckpointConfig(**ckpt), **spec)
            # searched trials would otherwise be named after every config key
            kwargs.setdefault("trial_dirname_creator", _short_trial_dirname)
        else:
            target = experiments  # the classic run_experiments route
        with temporary_env("RAY_AIR_NEW_OUTPUT", "0"):  # the classic CLIReporter tables
            analysis = tune.run(target, callbacks=callbacks, progress_reporter=reporter,
                                verbose=verbose, raise_on_failed_trial=False, **kwargs)
        # Summarise while Ray is still up: a trial's error file is found through its
        # storage context, which needs the Ray session.
        return _summarize(analysis.trials, plan, collector, recorder, kwargs)
    finally:
        if started:
            ray.shutdown()


def _short_trial_dirname(trial) -> str:
    return f"{trial.trainable_name}_{trial.trial_id}"


def _best_trial(trials, metric: str = RETURN_KEY, mode: str = "max"):
    def score(t):
        v = (t.last_result or {}).get(metric)
        if v is None:
            node = t.last_result or {}
            for part in metric.split("/"):
                node = node.get(part) if isinstance(node, Mapping) else None
            v = node
        try:
            v = float(v)
        except (TypeError, ValueError):
            return None
        return None if math.isnan(v) else v

    scored = [(score(t), t) for t in trials]
    scored = [(s, t) for s, t in scored if s is not None]
    if not scored:
        return None, None
    s, t = (max if mode == "max" else min)(scored, key=lambda st: st[0])
    return t, s


def _summarize(trials, plan: Plan, collector, recorder, tune_kwargs) -> int:
    from .tune.mlflow import ui_command
    from .tune.plots import plot_curves

    out = sys.stdout
    errored = [t for t in trials if t.status == "ERROR"]
    print("", file=out)
    print(f"trials: {len(trials)} ({len(trials) - len(errored)} ok, {len(errored)} errored)", file=out)
    metric, mode = RETURN_KEY, "max"
    if tune_kwargs.get("metric"):
        metric, mode = tune_kwargs["metric"], tune_kwargs.get("mode") or "max"
    best, score = _best_trial(trials, metric, mode)
    if best is not None:
        print(f"best trial: {best} ({best.trainable_name}, {best.status})", file=out)
        print(f"final return: {score:.4g}" + ("" if metric == RETURN_KEY else f" ({metric})"), file=out)
        last = best.last_result or {}
        if STEP_KEY in last:
            print(f"trained: {int(last[STEP_KEY]):,} env steps, {last.get('training_iteration', 0)} iterations, "
                  f"{last.get('time_total_s', 0.0):.1f} s", file=out)
        ckpt = getattr(best, "checkpoint", None)
        print(f"checkpoint: {ckpt.path if ckpt is not None else '(none)'}", file=out)
        if plan.tune_kwargs.get("search_alg") is not None or len(trials) > 1:
            print(f"best config: {_short_config(best)}", file=out)
    # One PNG per experiment directory, next to the trial directories.
    from .tune.plots import read_trial_results, results_curve

    by_dir: Dict[str, Dict[str, list]] = {}
    for t in trials:
        exp_dir = os.path.dirname(t.path) if getattr(t, "path", None) else os.getcwd()
        curve = collector.curves.get(t.trial_id) if collector is not None else None
        if not curve and getattr(t, "path", None) and os.path.isdir(t.path):
            # a resumed sweep (Tuner.restore runs the callbacks pickled with the first
            # Tuner) or a trial finished before the resume: the trial's own files
            curve = results_curve(read_trial_results(t.path), RETURN_KEY)
        by_dir.setdefault(exp_dir, {})[str(t)] = curve or []
    for exp_dir, curves in by_dir.items():
        png = os.path.join(exp_dir, "learning_curves.png")
        try:
            plot_curves(curves, png, title=os.path.basename(exp_dir))
            print(f"learning curve: {png}", file=out)
        except Exception as err:  # plotting must not fail a finished run
            print(f"learning curve: not written ({err})", file=out)
    if recorder is not None:
        names = ", ".join(repr(n) for n in recorder.experiment_ids) or "(none)"
        print(f"mlflow: experiment {names}; view with: {ui_command(recorder.tracking_uri)}", file=out)
    # The errors come last, so the real cause is what a user sees at the bottom of the console.
    for t in errored:
        print(f"trial {t} errored: {_trial_error(t)}", file=out)
    out.flush()
    if best is None and not errored:
        return 0 if trials else 1
    return 1 if errored else 0


def _short_config(trial) -> str:
    from .tune.mlflow import algorithm_hyperparameters

    try:
        params = algorithm_hyperparameters(trial.get_trainable_cls(), trial.config)
    except Exception:
        params = {}
    evaluated = getattr(trial, "evaluated_params", None) or {}
    if evaluated:  # the searched keys are what matters
        return json.dumps({k: v for k, v in evaluated.items()}, default=str)
    return json.dumps(params, default=str)


def _trial_error(trial) -> str:
    path = getattr(trial, "error_file", None) or ""
    try:
        text = open(path).read().strip().splitlines() if path and os.path.isfile(path) else []
    except OSError:
        text = []
    last = next((ln for ln in reversed(text) if ln.strip()), "")
    return f"{last} (see {path})" if path else last


# ----------------------------------------------------------------------------------------------
# evaluate
# ----------------------------------------------------------------------------------------------
def _find_checkpoint(path: str) -> str:
    path = os.path.abspath(os.path.expanduser(path))
    if not os.path.exists(path):
        raise UsageError(f"checkpoint not found: {path}")
    if os.path.isfile(os.path.join(path, "rllib_checkpoint.json")) or \
            os.path.isfile(os.path.join(path, "class_and_ctor_args.pkl")):
        return path
    subs = sorted(d for d in os.listdir(path) if d.startswith("checkpoint_") and os.path.isdir(os.path.join(path, d)))
    if subs:  # a trial directory: its latest checkpoint
        return os.path.join(path, subs[-1])
    raise UsageError(f"{path} is not an RLlib checkpoint (no rllib_checkpoint.json) nor a trial directory "
                     "with checkpoint_* subdirectories")


def _checkpoint_ctor(ckpt: str) -> Tuple[type, Any]:
    """(algorithm class, saved config) of an RLlib checkpoint directory."""
    import pickle

    ctor_file = os.path.join(ckpt, "class_and_ctor_args.pkl")
    if not os.path.isfile(ctor_file):
        raise UsageError(f"{ckpt} has no class_and_ctor_args.pkl (not a new-API-stack RLlib checkpoint)")
    with open(ctor_file, "rb") as f:
        ctor = pickle.load(f)
    cls = ctor["class"]
    args, kwargs = ctor.get("ctor_args_and_kwargs", ((), {}))
    config = kwargs.get("config", args[0] if args else None)
    if isinstance(config, dict):
        config = cls.get_default_config().update_from_dict(config)
    return cls, config


def evaluate_checkpoint(path: str, episodes: int, explore: bool = False, seed: Optional[int] = None) -> Dict[str, Any]:
    """Restore ``path`` and run ``episodes`` evaluation episodes; returns the
    ``env_runners`` dict of the evaluation result (``episode_return_mean``,
    ``num_episodes``, ...).

    The saved config is copied with the evaluation settings changed
    (``evaluation_duration=episodes``; for RLlib built-ins also a local
    evaluation runner and no remote env runners), built, and the checkpoint
    state restored into it. rllib_fast algorithms run one episode in each of
    ``episodes`` envs; they need no Ray cluster.
    """
    ckpt = _find_checkpoint(path)
    cls, config = _checkpoint_ctor(ckpt)
    if config is None:  # unknown layout: restore as saved and use its own evaluation settings
        from ray.rllib.algorithms.algorithm import Algorithm

        algo = Algorithm.from_checkpoint(ckpt)
        return algo.evaluate().get("env_runners", {})
    config = config.copy(copy_frozen=False)
    if seed is not None:
        config.debugging(seed=seed)
    if _is_fast(cls):
        config.evaluation(evaluation_duration=episodes, evaluation_duration_unit="episodes",
                          evaluation_config=type(config).overrides(explore=explore))
    else:
        config.env_runners(num_env_runners=0)
        config.evaluation(evaluation_interval=1, evaluation_duration=episodes, evaluation_duration_unit="episodes",
                          evaluation_num_env_runners=0, evaluation_parallel_to_training=False,
                          evaluation_config=type(config).overrides(explore=explore))
    try:
        with _quiet_rllib():
            algo = config.build_algo()
    except ValueError as err:
        raise UsageError(_one_line(err)) from None
    try:
        with _quiet_rllib():
            algo.restore_from_path(ckpt)
        result = algo.evaluate()
    finally:
        algo.stop()
    return result.get("env_runners", result)


# ----------------------------------------------------------------------------------------------
# list
# ----------------------------------------------------------------------------------------------
def cmd_list(what: str) -> int:
    from .envs.registry import list_envs, _ensure_builtin_sources

    if what in ("all", "algorithms", "algos"):
        print("rllib_fast algorithms:")
        for name, cls in fast_algorithms().items():
            doc = (cls.__doc__ or cls.get_default_config().__class__.__doc__ or "").strip().splitlines()
            print(f"  {name:16s} {doc[0] if doc else ''}")
        print("RLlib built-in algorithms:")
        print("  " + ", ".join(rllib_algorithms()))
    if what in ("all", "envs"):
        _ensure_builtin_sources()
        print("envs (rllib_fast tensor envs; RLlib built-ins take gymnasium ids such as CartPole-v1):")
        for name in list_envs():
            print(f"  {name}")
    if what == "envs":  # (not in `list` alone: importing mjlab's tasks takes seconds)
        from .envs.mjlab import mjlab_tasks  # imports mjlab only when it is installed

        tasks = mjlab_tasks()
        if tasks:
            print("mjlab tasks:")
            for task in tasks:
                print(f"  mjlab:{task}")
    return 0


# ----------------------------------------------------------------------------------------------
# argparse
# ----------------------------------------------------------------------------------------------
def _add_run_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--stop", help="stop criteria as JSON, e.g. '{\"training_iteration\": 10}' (overrides the file)")
    p.add_argument("--config", "-c", help="algorithm config as JSON (merged into a file's config)")
    p.add_argument("--num-samples", type=int, default=None, help="trials per grid point / search samples")
    p.add_argument("--checkpoint-freq", type=int, default=None, help="checkpoint every N iterations")
    p.add_argument("--checkpoint-at-end", action=argparse.BooleanOptionalAction, default=None,
                   help="checkpoint when a trial ends (default: on)")
    p.add_argument("--storage-path", "--local-dir", default="./runs", help="where trial directories go (./runs)")
    p.add_argument("--experiment-name", "--name", default=None, help="experiment (and MLflow experiment) name")
    p.add_argument("--seed", type=int, default=None, help="set config seed")
    p.add_argument("--mlflow", action=argparse.BooleanOptionalAction, default=True,
                   help="record to MLflow: MLFLOW_TRACKING_URI or sqlite:///<cwd>/mlflow.db (default: on)")
    p.add_argument("--ray-address", default=None, help="connect to a running Ray cluster")
    p.add_argument("--ray-num-cpus", type=int, default=None)
    p.add_argument("--ray-num-gpus", type=int, default=None)
    p.add_argument("-v", "--verbose", action="count", default=1,
                   help="more progress output (-v: trial results, -vv: everything)")
    p.add_argument("-q", "--quiet", dest="verbose", action="store_const", const=0, help="no progress tables")
    p.add_argument("--framework", default=None, help=argparse.SUPPRESS)  # accepted for old scripts; torch only


def build_parser(prog: str = "rllib") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog, description="Train, tune and evaluate RLlib / rllib_fast algorithms (the classic RLlib CLI).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
               "  rllib train --algo FastPPO --env CartPole --stop '{\"training_iteration\": 20}'\n"
               "  rllib train --algo PPO --env CartPole-v1 --config '{\"num_env_runners\": 0}'\n"
               "  rllib train file tune_configs/cartpole-fastppo-grid.yaml\n"
               "  rllib-fast evaluate runs/<exp>/<trial>/checkpoint_000000 --episodes 10\n"
               "  rllib-fast list")
    sub = parser.add_subparsers(dest="command", metavar="{train,sweep,report,evaluate,export,list}")

    train = sub.add_parser("train", help="train an algorithm (flags) or run an experiment file",
                           description="rllib train --algo X --env Y [--config JSON] [--stop JSON] | "
                                       "rllib train file FILE | rllib train -f FILE")
    train.add_argument("what", nargs="*", metavar="file FILE",
                       help="`file FILE`: run a YAML/JSON/.py experiment file")
    train.add_argument("--algo", "--run", "-a", "-r", dest="algo", default=None,
                       help="algorithm: ours (FastPPO, ...) or RLlib's (PPO, SAC, ...)")
    train.add_argument("--env", "-e", default=None, help="env name (see `rllib-fast list envs`)")
    train.add_argument("-f", "--file", "--config-file", dest="file", default=None,
                       help="experiment file (YAML/JSON/.py)")
    _add_run_options(train)

    sweep = sub.add_parser("sweep", help="run a sweep file with tune.Tuner (schedulers, searchers, packing, "
                                         "--resume, --address); see rllib_fast/tune/sweep.py")
    sweep.add_argument("file", help="YAML/JSON/.py sweep file, e.g. tune_configs/sweep-fastppo-pbt.yaml")
    _add_run_options(sweep)
    from .tune.sweep import add_arguments as _sweep_arguments

    _sweep_arguments(sweep)

    report = sub.add_parser("report", help="Markdown summary + learning-curve PNGs of an experiment directory")
    from .tune.report import add_arguments as _report_arguments

    _report_arguments(report)

    ev = sub.add_parser("evaluate", help="evaluate a checkpoint",
                        description="Restore CHECKPOINT and report the mean episode return.")
    ev.add_argument("checkpoint", help="checkpoint directory (or a trial directory: its latest checkpoint)")
    ev.add_argument("--episodes", type=int, default=10, help="evaluation episodes (default 10)")
    ev.add_argument("--explore", action="store_true", help="sample actions instead of acting greedily")
    ev.add_argument("--seed", type=int, default=None)
    ev.add_argument("--algo", "--run", "-a", "-r", dest="algo", default=None, help=argparse.SUPPRESS)
    ev.add_argument("--env", "-e", default=None, help=argparse.SUPPRESS)
    ev.add_argument("--ray-address", default=None)
    ev.add_argument("--ray-num-cpus", type=int, default=None)
    ev.add_argument("--ray-num-gpus", type=int, default=None)
    ev.add_argument("-v", "--verbose", action="count", default=0)

    exp = sub.add_parser("export", help="export a checkpoint's greedy policy as ONNX or TorchScript",
                         description="Write the checkpoint's actor (greedy, observation normalisation and action "
                                     "scaling included) as one file; see docs/deploy.md.")
    exp.add_argument("checkpoint", help="checkpoint directory (or a trial directory: its latest checkpoint)")
    exp.add_argument("--format", default="onnx", choices=("onnx", "torchscript"))
    exp.add_argument("--out", default=None, help="output file (default: CHECKPOINT/policy.onnx or policy.pt)")
    exp.add_argument("--member", type=int, default=None,
                     help="population algorithms: export member K (default: the best member; CEM-RL: the mean)")

    sub.add_parser("demo", help="the main job: PBT over FastPPO on CartPole and Pendulum, recorded in MLflow "
                                "(options: rllib-fast demo --help)", add_help=False)

    ls = sub.add_parser("list", help="list algorithms and envs")
    ls.add_argument("what", nargs="?", default="all", choices=("all", "algorithms", "algos", "envs"))
    return parser


def _train(args) -> int:
    what = list(getattr(args, "what", []) or [])
    if getattr(args, "file", None) and not what:
        plan = plan_from_file(args.file, args)
    elif what:
        if what[0] == "file" and len(what) == 2:
            path = what[1]
        elif len(what) == 1 and what[0] != "file":
            path = what[0]
        else:
            raise UsageError(f"unexpected arguments {' '.join(what)!r}; use `train file FILE` or `train --algo ...`")
        plan = plan_from_file(path, args)
    else:
        plan = plan_from_flags(args)
    return run_plan(plan, args)


def _evaluate(args) -> int:
    if args.episodes < 1:
        raise UsageError(f"--episodes must be >= 1, got {args.episodes}")
    ckpt = _find_checkpoint(args.checkpoint)
    cls, _ = _checkpoint_ctor(ckpt)
    # RLlib built-ins need Ray (env runner actors, registries); ours do not
    if not _is_fast(cls) and getattr(args, "console_argv", None) is not None:
        from .tune.session import reexec_for_loopback

        reexec_for_loopback("rllib_fast.cli", args.console_argv, {PROG_ENV: args.prog})
    started = False if _is_fast(cls) else _init_ray(args)
    try:
        res = evaluate_checkpoint(ckpt, args.episodes, explore=args.explore, seed=args.seed)
    finally:
        if started:
            import ray

            ray.shutdown()
    mean = res.get("episode_return_mean", float("nan"))
    n = res.get("num_episodes", res.get("num_episodes_lifetime", 0))
    length = res.get("episode_len_mean")
    extra = f" (episode_len_mean: {float(length):.4g})" if length is not None else ""
    print(f"mean_return: {float(mean):.4f} over {int(n)} episodes{extra}")
    return 0


def _export(args) -> int:
    from .export import ExportError, export_checkpoint

    try:
        path = export_checkpoint(_find_checkpoint(args.checkpoint), args.format, args.out, args.member)
    except ExportError as err:
        raise UsageError(str(err)) from None
    print(f"exported {args.format} policy: {path}")
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point of ``rllib`` and ``rllib-fast``; returns the exit status."""
    console = argv is None  # the console script or `python -m rllib_fast.cli` (not a test's main([...]))
    prog = os.path.basename(sys.argv[0]) if console and sys.argv and sys.argv[0] else "rllib"
    prog = os.environ.get(PROG_ENV, prog) if console else prog
    argv = list(sys.argv[1:] if argv is None else argv)
    if console and argv[:1] in (["train"], ["sweep"], ["demo"]):
        from .tune.session import reexec_for_loopback

        # a local Ray listens on loopback only: needs a switch set before ray is imported
        reexec_for_loopback("rllib_fast.cli", argv, {PROG_ENV: prog})
    if argv[:1] == ["demo"]:  # the demo owns its own argument parser
        from .demo import main as demo_main

        return demo_main(argv[1:])
    if prog not in ("rllib", "rllib-fast"):
        prog = "rllib"
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    args.prog, args.console_argv = prog, (argv if console else None)
    if not args.command:
        parser.print_help()
        return 2
    try:
        if args.command == "list":
            return cmd_list(args.what)
        if args.command == "evaluate":
            return _evaluate(args)
        if args.command == "sweep":
            from .tune.sweep import run_sweep

            return run_sweep(args)
        if args.command == "report":
            from .tune.report import run_report

            return run_report(args)
        if args.command == "export":
            return _export(args)
        return _train(args)
    except UsageError as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130


def _console_main() -> None:  # pragma: no cover
    sys.exit(main())


if __name__ == "__main__":  # pragma: no cover
    # `python -m rllib_fast.cli`: run the package's module, not this __main__ copy, so that
    # UsageError raised in rllib_fast.tune.* is the class main() catches.
    from rllib_fast.cli import main as _main

    sys.exit(_main())
