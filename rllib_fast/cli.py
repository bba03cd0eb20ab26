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

Layout: this module is argument parsing and dispatch only; planning (names,
validation, experiment specs) is :mod:`rllib_fast.tune.plan`, running and the
summary :mod:`rllib_fast.tune.run` (which ``sweep`` uses too). A new
subcommand is a ``sub.add_parser`` in :func:`build_parser` and one branch in
:func:`main`.

Every run records to MLflow (``--no-mlflow`` to disable): ``MLFLOW_TRACKING_URI``
if set, else ``sqlite:///<cwd>/mlflow.db``; see :mod:`rllib_fast.tune.mlflow`.
Errors in what the user typed (unknown algorithm, bad JSON, invalid config
values) print one line on stderr and exit with status 2.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import List, Optional

from .core.metrics import RETURN_KEY, STEP_KEY  # noqa: F401  (public here too)
from .tune.plan import (Plan, UsageError, all_algorithm_names, check_devices,  # noqa: F401
                        fast_algorithms, is_fast, is_rllib, parse_json, plan_from_file, plan_from_flags,
                        resolve_algorithm, rllib_algorithms, validate_config)
from .tune.run import (checkpoint_ctor, evaluate_checkpoint, find_checkpoint, run_plan, run_sweep,  # noqa: F401
                       start_ray, summarize)
from .tune.session import ensure_registered  # noqa: F401

__all__ = ["main", "build_parser", "cmd_list", "PROG_ENV",
           # re-exported (defined here before planning/running moved to rllib_fast.tune.plan / .run)
           "RETURN_KEY", "STEP_KEY", "Plan", "UsageError", "all_algorithm_names", "check_devices", "fast_algorithms",
           "is_fast", "is_rllib", "parse_json", "plan_from_file", "plan_from_flags", "resolve_algorithm",
           "rllib_algorithms", "validate_config", "checkpoint_ctor", "evaluate_checkpoint", "find_checkpoint",
           "run_plan", "run_sweep", "start_ray", "summarize", "ensure_registered"]

#: The command name (rllib / rllib-fast) handed to a re-executed CLI (see tune.session.reexec_for_loopback).
PROG_ENV = "RLLIB_FAST_PROG"


# ----------------------------------------------------------------------------------------------
# list
# ----------------------------------------------------------------------------------------------
def cmd_list(what: str) -> int:
    from .envs.registry import list_envs

    if what in ("all", "algorithms", "algos"):
        print("rllib_fast algorithms:")
        for name, cls in fast_algorithms().items():
            doc = (cls.__doc__ or cls.get_default_config().__class__.__doc__ or "").strip().splitlines()
            print(f"  {name:16s} {doc[0] if doc else ''}")
        print("RLlib built-in algorithms:")
        print("  " + ", ".join(rllib_algorithms()))
    if what in ("all", "envs"):
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
    p.add_argument("--storage-path", "--local-dir", default=None,
                   help="where trial directories go (default: the file's storage_path, else ./runs)")
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
    ev.add_argument("--no-progress", action="store_true",
                    help="no progress bar of finished episodes on stderr (rllib_fast algorithms draw one)")
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
    if (getattr(args, "file", None) or what) and (args.algo or args.env):
        raise UsageError("--algo/--env name a run given by flags; a file names its own `run` and `env` "
                         "(use --config '{\"env\": ...}' to change a file's env)")
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
    ckpt = find_checkpoint(args.checkpoint)
    cls, _ = checkpoint_ctor(ckpt)
    # RLlib built-ins need Ray (env runner actors, registries); ours do not
    if not is_fast(cls) and getattr(args, "console_argv", None) is not None:
        from .tune.session import reexec_for_loopback

        reexec_for_loopback("rllib_fast.cli", args.console_argv, {PROG_ENV: args.prog})
    started = False if is_fast(cls) else start_ray(args)
    try:
        res = evaluate_checkpoint(ckpt, args.episodes, explore=args.explore, seed=args.seed,
                                  progress=not args.no_progress)
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
        path = export_checkpoint(find_checkpoint(args.checkpoint), args.format, args.out, args.member)
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
