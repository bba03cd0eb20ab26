"""Experiment planning for the command line and sweeps: algorithm names, config
validation and experiment specs, all checked before Ray starts.

Why a module of its own (not in ``rllib_fast.cli``): ``rllib train``,
``rllib-fast sweep`` and Python callers plan the same way, and the CLI is only
argument parsing and dispatch. Mistakes are :class:`UsageError` -- one line,
exit status 2 from the CLI. Running a plan is :mod:`rllib_fast.tune.run`.
"""
from __future__ import annotations

import contextlib
import copy
import difflib
import json
import os
import re
import sys
from typing import Any, Dict, List, Mapping, Optional, Tuple

#: Where trial directories go when neither ``--storage-path`` nor the file says.
DEFAULT_STORAGE_PATH = "./runs"

_SEARCH_KEYS = ("search_alg", "scheduler", "metric", "mode", "num_samples", "max_concurrent_trials", "reuse_actors")


class UsageError(Exception):
    """A mistake in what the user typed: printed as one line, exit status 2."""


# ----------------------------------------------------------------------------------------------
# algorithm names
# ----------------------------------------------------------------------------------------------
def fast_algorithms() -> Dict[str, type]:
    from ..algorithms import ALGORITHMS

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


def is_fast(cls: type) -> bool:
    from ..core.algorithm import FastAlgorithm

    return isinstance(cls, type) and issubclass(cls, FastAlgorithm)


def is_rllib(cls: type) -> bool:
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


def _check_search_spaces(cls: type, config: Mapping[str, Any]) -> None:
    """Search spaces of declared hyperparameters produce only allowed values
    (probed, see ``core.params.space_probes``): one line here instead of a
    traceback in every trial."""
    from ray.tune.search.sample import Domain

    from ..core.params import space_error

    if not is_fast(cls):
        return
    spec = cls.get_default_config().hyperparameter_spec()
    for key, value in config.items():
        if isinstance(value, Domain) and key in spec:
            err = space_error(key, spec[key], value)
            if err:
                raise UsageError(f"{cls.__name__}: {err}")


def validate_config(cls: type, config: Mapping[str, Any]) -> None:
    """Validate ``config`` for algorithm ``cls``: every grid_search value once;
    search-space objects are skipped. Raises :class:`UsageError`."""
    if not is_rllib(cls):
        return
    _check_search_spaces(cls, config)
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
        _reject_read_only_keys(cls, variant)
        try:
            with quiet_rllib():
                cfg = cls.get_default_config()
                if not is_fast(cls):
                    _warn_unknown_rllib_keys(cls, variant)
                cfg = cfg.update_from_dict(variant)
                cfg.validate()
        except (ValueError, TypeError, AttributeError) as err:
            raise UsageError(one_line(err)) from None


def _config_properties(cfg: Any) -> Dict[str, property]:
    """The config class's properties (RLlib stores some keys behind them, e.g.
    ``train_batch_size_per_learner`` in ``_train_batch_size_per_learner``)."""
    import inspect

    return dict(inspect.getmembers(type(cfg), lambda v: isinstance(v, property)))


def _reject_read_only_keys(cls: type, config: Mapping[str, Any]) -> None:
    """A key that is a read-only property of the config class (RLlib's ``model_config``,
    ``learner_class``, ...) cannot be set from a dict: one line naming the key that can."""
    cfg = cls.get_default_config()
    props = _config_properties(cfg)
    for key in config:
        prop = props.get(key)
        if prop is not None and prop.fset is None:
            stored = f"_{key}"
            hint = f"; in a config dict set {stored!r}" if stored in cfg.to_dict() else ""
            raise UsageError(f"{cls.__name__}: config key {key!r} is a read-only property{hint}")


@contextlib.contextmanager
def quiet_rllib():
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
    settable = {n for n, v in _config_properties(cfg).items() if v.fset is not None}
    known = set(cfg.to_dict()) | set(vars(cfg)) | settable | {"env", "lambda", "callbacks", "multiagent", "model"}
    for key in config:
        if key not in known:
            close = difflib.get_close_matches(key, sorted(known), n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            print(f"warning: {cls.__name__} has no config key {key!r}.{hint}", file=sys.stderr)


def one_line(err: BaseException) -> str:
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
    allowed = ("num_to_keep", "checkpoint_score_attribute", "checkpoint_score_order", "checkpoint_frequency",
               "checkpoint_at_end")
    for key in ckpt:
        if key not in allowed:
            close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise UsageError(f"checkpoint_config key {key!r} is not allowed.{hint} Allowed: {', '.join(allowed)}")
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
        # the flag wins over the file, the file over the default (./runs)
        "storage_path": os.path.abspath(os.path.expanduser(
            args.storage_path or spec.pop("storage_path", None) or DEFAULT_STORAGE_PATH)),
        "num_samples": args.num_samples,
    }
    from .stop_keys import numeric_stop, stop_key_error
    from .sweep import SweepError, whole_number

    try:
        if args.num_samples is None:
            out["num_samples"] = whole_number(spec.pop("num_samples", 1), "num_samples", minimum=1)
        out["stop"] = numeric_stop(out["stop"])
    except (SweepError, ValueError) as err:
        raise UsageError(f"experiment {name!r}: {err}") from None
    spec.pop("storage_path", None)
    spec.pop("stop", None)
    spec.pop("num_samples", None)
    err = stop_key_error(out["stop"], is_fast(cls))
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

    from .sweep import SWEEP_KEYS

    params = [p for p in inspect.signature(Experiment.__init__).parameters if p not in ("self", "name")]
    return params + list(SWEEP_KEYS)


def check_devices(experiments: Mapping[str, Mapping[str, Any]], args) -> None:
    """Raise :class:`UsageError` when an experiment asks for a GPU a local Ray cannot
    have (see :func:`rllib_fast.tune.session.device_error`). Called just before Ray
    starts, not while parsing: a GPU sweep file still parses on a laptop."""
    from .session import cpu_error, device_error, names_cluster

    local = not any(names_cluster(a) for a in (getattr(args, "ray_address", None), getattr(args, "address", None),
                                               os.environ.get("RAY_ADDRESS")))
    cpus = getattr(args, "ray_num_cpus", None) or os.cpu_count() or 1
    for name, spec in experiments.items():
        err = device_error(spec.get("config") or {}, local=local)
        if err is None and local and spec.get("run"):
            try:
                cls = resolve_algorithm(spec["run"]) if isinstance(spec["run"], str) else spec["run"]
            except UsageError:
                cls = None
            err = cpu_error(cls, spec.get("config") or {}, float(cpus)) if cls is not None else None
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
        default_env = getattr(cls.get_default_config(), "env", None) if is_rllib(cls) else None
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
            raise UsageError(f"cannot parse {path}: {one_line(err)}") from None
    if not isinstance(data, dict) or not data or not all(isinstance(v, dict) for v in data.values()):
        raise UsageError(f"{path}: expected a mapping of experiment name -> {{run, env, stop, config, ...}}")
    for name, spec in data.items():
        if "run" not in spec and "algo" not in spec:
            raise UsageError(f"{path}: experiment {name!r} has no `run` (the algorithm name)")
        exp_name = args.experiment_name if (args.experiment_name and len(data) == 1) else str(name)
        from .sweep import SweepError, split_sweep_keys  # search spaces, scheduler, search, resources

        try:
            sched = spec.get("scheduler")
            if isinstance(sched, Mapping) and isinstance(sched.get("hyperparam_mutations"), Mapping):
                try:
                    check_mutation_keys(sched["hyperparam_mutations"], spec.get("run") or spec.get("algo"))
                except SweepError as err:
                    raise SweepError(f"{path}: experiment {name!r}: {err}") from None
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
        raise UsageError(f"{path} raised {type(err).__name__}: {one_line(err)}") from None
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
        default = TuneConfig()
        ignored = sorted(k for k in vars(tune_cfg) if k not in _SEARCH_KEYS and not k.startswith("_")
                         and getattr(tune_cfg, k) != getattr(default, k, None))
        if ignored:
            raise UsageError(f"{path}: tune_config key(s) {ignored} are not supported here; allowed: "
                             f"{', '.join(_SEARCH_KEYS)}")
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


def mutable_keys(algo: Any) -> List[str]:
    """Config keys PBT may mutate for ``algo`` (a name or class): an rllib_fast
    algorithm's declared hyperparameters (``hyperparameter_spec()``), else the keys
    of the algorithm's RLlib config."""
    from ..core.algorithm import FastAlgorithm

    if isinstance(algo, str):
        try:
            algo = resolve_algorithm(algo)
        except UsageError:
            return []  # the unknown algorithm is reported on its own
    if isinstance(algo, type) and issubclass(algo, FastAlgorithm):
        return sorted(algo.get_default_config().hyperparameter_spec())
    get_config = getattr(algo, "get_default_config", None)
    return sorted(k for k in get_config().to_dict() if not k.startswith("_")) if get_config else []


def check_mutation_keys(mutations: Mapping[str, Any], algo: Any) -> None:
    """Raise :class:`SweepError` (one line) for a PBT ``hyperparam_mutations`` key that
    is not a hyperparameter of ``algo`` -- before Ray starts, not in every trial."""
    from .sweep import SweepError

    allowed = mutable_keys(algo)
    if not allowed:
        return
    for key in mutations:
        if key not in allowed:
            close = difflib.get_close_matches(str(key), allowed, n=1, cutoff=0.6)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            name = algo if isinstance(algo, str) else getattr(algo, "__name__", algo)
            raise SweepError(f"scheduler pbt: hyperparam_mutations key {key!r} is not a hyperparameter of "
                             f"{name}.{hint} Allowed: {', '.join(allowed)}")
    _check_mutation_values(mutations, algo)


def _check_mutation_values(mutations: Mapping[str, Any], algo: Any) -> None:
    """The values PBT would give an rllib_fast algorithm's keys are allowed ones (lists,
    domain forms; probed as search spaces are): a bad value otherwise fails in the trial
    that explores it, minutes into the sweep."""
    from ..core.algorithm import FastAlgorithm
    from ..core.params import space_error
    from .sweep import SweepError, to_search_space

    if isinstance(algo, str):
        try:
            algo = resolve_algorithm(algo)
        except UsageError:
            return
    if not (isinstance(algo, type) and issubclass(algo, FastAlgorithm)):
        return
    spec = algo.get_default_config().hyperparameter_spec()
    for key, value in mutations.items():
        space = list(value) if isinstance(value, (list, tuple)) else to_search_space(value, f"hyperparam_mutations.{key}")
        err = space_error(key, spec[key], space) if key in spec and not callable(space) else None
        if err:
            raise SweepError(f"scheduler pbt: hyperparam_mutations: {err}")


def load_sweeps(path: str, args, gpus_available: float = 0.0) -> list:
    """Parse a sweep file into :class:`rllib_fast.tune.sweep.Sweep` objects (validated, nothing started)."""
    from .sweep import SWEEP_KEYS, Sweep

    plan = plan_from_file(path, args, gpus_available=gpus_available)
    sweeps = []
    for name, spec in plan.experiments.items():
        kwargs = dict(plan.sweep_kwargs.get(name, plan.tune_kwargs))
        if kwargs.get("metric") is None and kwargs.get("search_alg") is not None:
            kwargs["metric"] = getattr(kwargs["search_alg"], "metric", None)
        unknown = set(spec) - {"run", "config", "stop", "checkpoint_config", "storage_path", "num_samples",
                               "max_failures"}
        if unknown:
            raise UsageError(f"{path}: experiment {name!r}: unknown key(s) {sorted(unknown)}; allowed: run, "
                                 "env, stop, config, checkpoint_config, storage_path, num_samples, "
                                 f"{', '.join(SWEEP_KEYS)}")
        sweeps.append(Sweep(name, spec, kwargs))
    return sweeps
