"""The main job on embedded defaults: a small PBT sweep over FastPPO.

``python -m rllib_fast.demo`` (or ``rllib-fast demo``) runs, one after the
other, a Population Based Training sweep of FastPPO on the built-in CartPole
and on Pendulum (two trials each, lr and clip mutated), records every trial in
a local SQLite MLflow store, and prints the best trial, its checkpoint, the
``mlflow ui`` command and the learning-curve PNG.

One sweep per task: PBT compares returns across trials, and returns of
different tasks are not comparable (an exploit would copy a Pendulum policy
into a CartPole trial).
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from typing import Dict, List, Optional

from .core.metrics import RETURN_KEY, STEP_KEY

TASKS = {
    # task: stop criteria. FastPPO's defaults learn both tasks (docs/defaults.md).
    # An env-step budget only: with a return threshold, trials would stop at
    # different times, and PBT (which compares trials) gains nothing from that.
    "CartPole": {STEP_KEY: 300_000},
    "Pendulum": {STEP_KEY: 400_000},
}


def build_param_space(task: str, num_envs: int):
    from ray import tune

    from .algorithms.ppo import FastPPOConfig

    cfg = (FastPPOConfig().environment(task, num_envs=num_envs)
           .reporting(min_sample_timesteps_per_iteration=16_384))  # fewer, fuller Tune iterations
    space = cfg.to_dict()
    space["lr"] = tune.loguniform(3e-4, 3e-3)
    space["seed"] = tune.randint(0, 10_000)
    return space


def run_task(task: str, args, storage: str, recorder, curves) -> Dict:
    from ray import tune
    from ray.tune.schedulers import PopulationBasedTraining

    from .tune.progress import MilestoneProgress
    from .tune.session import temporary_env

    budget = args.env_steps or TASKS[task][STEP_KEY]
    mutations = {"lr": tune.loguniform(1e-4, 5e-3), "clip_param": [0.1, 0.2, 0.3]}
    print(f"\n[{task}] PBT over FastPPO: {args.trials} trials of {budget:,} env steps, {' and '.join(mutations)} "
          f"mutated every {args.perturbation_interval} iterations", flush=True)
    # progress on events (milestones, PBT exploits, ends), not Tune's tables on a clock: the
    # output's length then does not grow with the machine's load (see tune/progress.py)
    progress = MilestoneProgress(f"[{task}]", budget, keys=list(mutations))
    pbt = PopulationBasedTraining(
        time_attr="training_iteration", perturbation_interval=args.perturbation_interval,
        hyperparam_mutations=mutations,
        quantile_fraction=0.5)
    tuner = tune.Tuner(
        "FastPPO", param_space=build_param_space(task, args.num_envs),
        tune_config=tune.TuneConfig(scheduler=pbt, metric=RETURN_KEY, mode="max", num_samples=args.trials,
                                    reuse_actors=True,  # short trial folders: the printed paths stay readable
                                    trial_dirname_creator=lambda trial: f"{trial.trainable_name}_{trial.trial_id}"),
        run_config=tune.RunConfig(
            name=f"demo-{task}", storage_path=storage, callbacks=[recorder, curves, progress],
            stop=({STEP_KEY: args.env_steps} if args.env_steps else TASKS[task]),
            checkpoint_config=tune.CheckpointConfig(checkpoint_frequency=args.perturbation_interval,
                                                    checkpoint_at_end=True),  # PBT exploits older ones: keep all
            verbose=0))
    # Tune's newer console output prints its experiment box and a TensorBoard command for Ray's
    # session folder even at verbose=0; the classic output prints nothing at verbose=0
    with temporary_env("RAY_AIR_NEW_OUTPUT", "0"):
        results = tuner.fit()
    best = results.get_best_result(metric=RETURN_KEY, mode="max", scope="all")
    return {"task": task, "return": best.metrics.get("env_runners", {}).get("episode_return_mean"),
            "env_steps": best.metrics.get(STEP_KEY),
            "checkpoint": best.checkpoint.path if best.checkpoint else None,
            "lr": best.config.get("lr"), "errors": len(results.errors)}


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="rllib-fast demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--trials", type=int, default=2, help="PBT population size per task")
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--perturbation-interval", type=int, default=4, help="Tune iterations between PBT steps")
    parser.add_argument("--out", default="runs", help="directory for Tune results, mlflow.db and plots")
    parser.add_argument("--env-steps", type=int, default=None,
                        help="env steps per trial (default: each task's budget, 300k CartPole / 400k Pendulum)")
    if argv is None:  # `python -m rllib_fast.demo`: a local Ray on loopback only (see tune.session)
        from .tune.session import reexec_for_loopback

        reexec_for_loopback("rllib_fast.demo", sys.argv[1:])
    args = parser.parse_args(argv)

    import ray

    from .tune.session import init_ray
    from .tune.mlflow import MLflowRecorder, ui_command
    from .tune.plots import CurveCollector

    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    # Tune's INFO records (result-file paths, PBT bookkeeping) repeat what the tables and the
    # summary below say, in lines of 200+ characters; its warnings still show.
    logging.getLogger("ray.tune").setLevel(logging.WARNING)
    started = init_ray(num_cpus=os.cpu_count() or 2)  # a local Ray of our own (or the one already up)
    recorder = MLflowRecorder(experiment_name="rllib_fast-demo", directory=out)
    t0 = time.time()
    summary, plots = [], []
    for task in args.tasks:
        curves = CurveCollector()
        summary.append(run_task(task, args, out, recorder, curves))
        plots.append(curves.plot(os.path.join(out, f"demo-{task}-learning-curve.png"),
                                 title=f"FastPPO + PBT on {task}"))
    if started:
        ray.shutdown()

    print(f"\nrllib_fast demo finished in {time.time() - t0:.0f} s")
    for s, png in zip(summary, plots):
        print(f"\n[{s['task']}] best trial: mean return {s['return']:.1f} after {s['env_steps']:,.0f} env steps "
              f"(lr={s['lr']:.2e}); trial errors: {s['errors']}")
        print(f"  checkpoint:     {s['checkpoint']}")
        print(f"  learning curve: {png}")
    print(f"\nMLflow store: {recorder.tracking_uri}")
    print(f"  look at it:   {ui_command(recorder.tracking_uri)}")
    print(f"  evaluate:     rllib-fast evaluate {summary[0]['checkpoint']} --episodes 10")
    return 0 if all(s["errors"] == 0 for s in summary) else 1


if __name__ == "__main__":
    sys.exit(main())
