"""Running planned experiments: Ray start-up, ``tune.run`` / ``tune.Tuner``, the
end-of-run summary, and checkpoint evaluation.

Why a module of its own: ``rllib train`` (:func:`run_plan`), ``rllib-fast
sweep`` (:func:`run_sweep`) and ``rllib-fast evaluate`` share start-up and the
summary; :mod:`rllib_fast.cli` only parses arguments and dispatches here.
"""
from __future__ import annotations

import copy
import json
import math
import os
import shlex
import sys
from typing import Any, Dict, Mapping, Optional, Tuple

from ..core.metrics import RETURN_KEY, STEP_KEY
from .plan import Plan, UsageError, check_devices, is_fast, load_sweeps, one_line, quiet_rllib

# ----------------------------------------------------------------------------------------------
# running
# ----------------------------------------------------------------------------------------------
def start_ray(args) -> bool:
    """ray.init (unless already up; a local Ray of our own, loopback only, unless
    --ray-address names a cluster) and register our names; True if we started Ray."""
    from .session import init_ray

    return init_ray(args.ray_address, num_cpus=args.ray_num_cpus, num_gpus=args.ray_num_gpus,
                    log_to_driver=args.verbose >= 1)


def run_plan(plan: Plan, args) -> int:
    import ray
    from ray import tune
    from ray.tune.experiment import Experiment

    from .mlflow import MLflowRecorder, default_tracking_uri
    from .plots import CurveCollector
    from .session import progress_reporter, temporary_env

    check_devices(plan.experiments, args)
    started = start_ray(args)
    try:
        experiments = []
        for name, spec in plan.experiments.items():
            spec = copy.deepcopy(spec)
            try:
                experiments.append(Experiment.from_json(name, spec))
            except Exception as err:
                raise UsageError(f"experiment {name!r}: {one_line(err)}") from None
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
        return summarize(analysis.trials, plan, collector, recorder, kwargs)
    finally:
        if started:
            ray.shutdown()


def _short_trial_dirname(trial) -> str:
    return f"{trial.trainable_name}_{trial.trial_id}"


def best_trial(trials, metric: str = RETURN_KEY, mode: str = "max"):
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


def summarize(trials, plan: Plan, collector, recorder, tune_kwargs) -> int:
    from .mlflow import ui_command
    from .plots import plot_curves

    out = sys.stdout
    errored = [t for t in trials if t.status == "ERROR"]
    # an interrupted run (Ctrl-C, a trial that waited for resources it never got) ends
    # with trials still pending, running or paused: not "ok", and not a success
    unfinished = [t for t in trials if t.status not in ("TERMINATED", "ERROR")]
    ok = len(trials) - len(errored) - len(unfinished)
    print("", file=out)
    print(f"trials: {len(trials)} ({ok} ok, {len(errored)} errored"
          + (f", {len(unfinished)} unfinished)" if unfinished else ")"), file=out)
    metric, mode = RETURN_KEY, "max"
    if tune_kwargs.get("metric"):
        metric, mode = tune_kwargs["metric"], tune_kwargs.get("mode") or "max"
    best, score = best_trial(trials, metric, mode)
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
            print(f"best config: {short_config(best)}", file=out)
    # One PNG per experiment directory, next to the trial directories.
    from .plots import read_trial_results, results_curve

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
    for t in unfinished:
        print(f"trial {t} did not finish ({t.status})", file=out)
    for t in errored:
        print(f"trial {t} errored: {trial_error(t)}", file=out)
    out.flush()
    if errored or unfinished:
        return 1
    return 0 if trials else 1


def short_config(trial) -> str:
    from .mlflow import algorithm_hyperparameters

    try:
        params = algorithm_hyperparameters(trial.get_trainable_cls(), trial.config)
    except Exception:
        params = {}
    evaluated = getattr(trial, "evaluated_params", None) or {}
    if evaluated:  # the searched keys are what matters
        return json.dumps({k: v for k, v in evaluated.items()}, default=str)
    return json.dumps(params, default=str)


def trial_error(trial) -> str:
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
def find_checkpoint(path: str) -> str:
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


def checkpoint_ctor(ckpt: str) -> Tuple[type, Any]:
    """(algorithm class, saved config) of an RLlib checkpoint directory."""
    import pickle

    ctor_file = os.path.join(ckpt, "class_and_ctor_args.pkl")
    if not os.path.isfile(ctor_file):
        raise UsageError(f"{ckpt} has no class_and_ctor_args.pkl (not a new-API-stack RLlib checkpoint)")
    try:
        with open(ctor_file, "rb") as f:
            ctor = pickle.load(f)
        cls = ctor["class"]
    except Exception as err:  # noqa: BLE001 - truncated, corrupted or from other code: one line
        raise UsageError(f"{ckpt}: class_and_ctor_args.pkl cannot be read ({type(err).__name__}: "
                         f"{one_line(err)})") from None
    args, kwargs = ctor.get("ctor_args_and_kwargs", ((), {}))
    config = kwargs.get("config", args[0] if args else None)
    if isinstance(config, dict):
        config = cls.get_default_config().update_from_dict(config)
    return cls, config


def evaluate_checkpoint(path: str, episodes: int, explore: bool = False, seed: Optional[int] = None,
                        progress: bool = False) -> Dict[str, Any]:
    """Restore ``path`` and run ``episodes`` evaluation episodes; returns the
    ``env_runners`` dict of the evaluation result (``episode_return_mean``,
    ``num_episodes``, ...).

    The saved config is copied with the evaluation settings changed
    (``evaluation_duration=episodes``; for RLlib built-ins also a local
    evaluation runner and no remote env runners), built, and the checkpoint
    state restored into it. rllib_fast algorithms run one episode in each of
    ``episodes`` envs; they need no Ray cluster. ``progress``: a progress bar
    of finished episodes on stderr (rllib_fast algorithms; updated at the
    evaluation's host syncs, every 50 steps).
    """
    ckpt = find_checkpoint(path)
    cls, config = checkpoint_ctor(ckpt)
    if config is None:  # unknown layout: restore as saved and use its own evaluation settings
        from ray.rllib.algorithms.algorithm import Algorithm

        algo = Algorithm.from_checkpoint(ckpt)
        return algo.evaluate().get("env_runners", {})
    config = config.copy(copy_frozen=False)
    if seed is not None:
        config.debugging(seed=seed)
    # the checkpoint's own evaluation settings (e.g. an evaluation env_config) stay; explore is ours
    eval_overrides = {**(config.evaluation_config or {}), "explore": explore}
    if is_fast(cls):
        config.evaluation(evaluation_duration=episodes, evaluation_duration_unit="episodes",
                          evaluation_config=eval_overrides)
    else:
        config.env_runners(num_env_runners=0)
        config.evaluation(evaluation_interval=1, evaluation_duration=episodes, evaluation_duration_unit="episodes",
                          evaluation_num_env_runners=0, evaluation_parallel_to_training=False,
                          evaluation_config=eval_overrides)
    try:
        with quiet_rllib():
            algo = config.build_algo()
    except ValueError as err:
        raise UsageError(one_line(err)) from None
    bar = None
    try:
        try:
            with quiet_rllib():
                algo.restore_from_path(ckpt)
        except ValueError as err:  # CheckpointReadError / CheckpointMismatchError: one line each
            raise UsageError(one_line(err)) from None
        if seed is not None and is_fast(cls):
            algo.seed = int(seed)   # the restore took the checkpoint's seed; evaluation seeds from this one
        if progress and is_fast(cls):
            bar = _episode_bar(episodes)
            algo.evaluation_progress = lambda done, total: bar.update(done - bar.n)
        result = algo.evaluate()
    finally:
        if bar is not None:
            bar.close()
        algo.stop()
    return result.get("env_runners", result)


def _episode_bar(total: int):
    """A tqdm bar of finished evaluation episodes on stderr."""
    from tqdm import tqdm

    return tqdm(total=total, desc="evaluating", unit="episode", file=sys.stderr, mininterval=0.5,
                dynamic_ncols=True)


def run_sweep(args) -> int:
    """The ``sweep`` subcommand: load, (re)start every experiment of the file, summarise."""
    import ray
    from .mlflow import MLflowRecorder, default_tracking_uri
    from .plots import CurveCollector
    from .session import dashboard_missing, init_ray, progress_reporter, temporary_env
    from .sweep import SweepError, build_tuner, cluster_gpus

    if args.resume:
        # Tuner.restore continues the sweep as it was started: its stop criteria, samples,
        # checkpointing, search space and callbacks come from the experiment state, so
        # these flags would be silently ignored (or, for --config/--seed, crash the restore).
        # (--no-mlflow is not refused: repeating the first run's flags is natural, and the
        # recording follows the first run either way.)
        fixed = [flag for flag, given in (("--stop", args.stop is not None), ("--config", bool(args.config)),
                                          ("--seed", args.seed is not None),
                                          ("--num-samples", args.num_samples is not None),
                                          ("--checkpoint-freq", args.checkpoint_freq is not None),
                                          ("--checkpoint-at-end", args.checkpoint_at_end is not None))
                 if given]
        if fixed:
            raise UsageError(f"--resume continues the sweep as it was started (Tuner.restore keeps its stop, "
                             f"samples, search space and checkpointing); {', '.join(fixed)} "
                             "cannot change it: drop them, or start a new sweep (--name NAME)")
    sweeps = load_sweeps(args.file, args)  # validate everything before starting Ray
    for sweep in sweeps:
        if args.resume and not os.path.isdir(sweep.path):
            raise UsageError(f"--resume: no sweep to resume at {sweep.path}")
        if not args.resume and os.path.isdir(sweep.path) and os.listdir(sweep.path):
            # A second Tuner in the same folder mixes two sweeps' trials (and MLflow nests the
            # new runs under the old parent): refuse, the user picks one or the other.
            raise UsageError(f"{sweep.path} already holds sweep {sweep.name!r}: use --resume or a new name "
                                 "(--name NAME or --storage-path DIR)")
    check_devices({sweep.name: {"run": sweep.run, "config": sweep.param_space} for sweep in sweeps}, args)
    address = getattr(args, "address", None) or args.ray_address
    if getattr(args, "dashboard", False):
        missing = dashboard_missing()
        if missing:
            raise UsageError(f"--dashboard needs the Ray dashboard packages: pip install 'ray[default]' "
                                 f"(missing: {missing})")
    started = init_ray(address, num_cpus=args.ray_num_cpus, num_gpus=args.ray_num_gpus,
                       dashboard=getattr(args, "dashboard", False),
                       dashboard_host=getattr(args, "dashboard_host", "127.0.0.1"), log_to_driver=args.verbose >= 1)
    rc = 0
    try:
        if cluster_gpus() > 0:  # `gpu: auto` packs fractional GPUs only where there are GPUs
            sweeps = load_sweeps(args.file, args, cluster_gpus())
        for sweep in sweeps:
            collector = CurveCollector(RETURN_KEY)
            callbacks: list = [collector]
            recorder = None
            if args.mlflow:
                recorder = MLflowRecorder(default_tracking_uri(), parent_run_name=sweep.name)
                callbacks.append(recorder)
            reporter = progress_reporter([sweep.param_space], max_report_frequency=10)
            try:
                tuner = build_tuner(sweep, callbacks, verbose=min(3, args.verbose), resume=args.resume,
                                    progress_reporter=reporter)
            except SweepError as err:
                raise UsageError(str(err)) from None
            except ValueError as err:  # Tuner.restore: the saved sweep does not fit this file
                raise UsageError(f"--resume: {sweep.path}: {one_line(err)}") from None
            with temporary_env("RAY_AIR_NEW_OUTPUT", "0"):  # the classic tables, our columns
                results = tuner.fit()
            trials = results._experiment_analysis.trials
            if recorder is not None and args.resume:
                recorder.find_experiments([sweep.name])  # the restored Tuner ran its own pickled copy
            plan = Plan()
            plan.experiments[sweep.name] = {}
            rc = max(rc, summarize(trials, plan, collector, recorder,
                                        {"metric": sweep.metric, "mode": sweep.mode,
                                         "search_alg": sweep.search_alg}))
            where = "".join(f" {flag} {shlex.quote(value)}" for flag, value in (
                ("--name", args.experiment_name), ("--storage-path", args.storage_path)) if value)
            print(f"sweep directory: {sweep.path} (report: rllib-fast report {sweep.path}; "
                  f"resume: rllib-fast sweep {shlex.quote(args.file)}{where} --resume)")
    finally:
        if started:
            ray.shutdown()
    return rc
