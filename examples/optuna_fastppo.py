"""Optuna search over FastPPO's lr and clip_param on CartPole, recorded to MLflow.

    python examples/optuna_fastppo.py                       # 4 trials, 2 at a time
    python examples/optuna_fastppo.py --num-samples 16 --iterations 30
    mlflow ui --backend-store-uri sqlite:///$PWD/mlflow.db  # runs, params, curves

The same search as a CLI experiment file: ``rllib train file
tune_configs/cartpole-fastppo-optuna.py``.
"""
from __future__ import annotations

import argparse
import os

import ray
from ray import tune
from ray.tune.search import ConcurrencyLimiter
from ray.tune.search.optuna import OptunaSearch

import rllib_fast
from rllib_fast.algorithms.ppo import FastPPOConfig
from rllib_fast.tune.mlflow import MLflowRecorder, ui_command
from rllib_fast.tune.plots import CurveCollector

METRIC = "env_runners/episode_return_mean"


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--num-samples", type=int, default=4)
    p.add_argument("--max-concurrent", type=int, default=2)
    p.add_argument("--iterations", type=int, default=5, help="training iterations per trial")
    p.add_argument("--num-envs", type=int, default=16)
    p.add_argument("--storage-path", default="./runs")
    p.add_argument("--experiment-name", default="optuna-fastppo-cartpole")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    if not ray.is_initialized():
        ray.init(include_dashboard=False)
    rllib_fast.register()

    config = (
        FastPPOConfig()
        .environment("CartPole", num_envs=args.num_envs)
        .training(rollout_length=32,
                  lr=tune.loguniform(1e-4, 3e-3),
                  clip_param=tune.uniform(0.1, 0.3))
        .debugging(seed=args.seed)
    )
    searcher = ConcurrencyLimiter(OptunaSearch(seed=args.seed), max_concurrent=args.max_concurrent)
    recorder = MLflowRecorder(experiment_name=args.experiment_name)
    curves = CurveCollector(METRIC)
    tuner = tune.Tuner(
        "FastPPO",
        param_space=config,
        tune_config=tune.TuneConfig(search_alg=searcher, metric=METRIC, mode="max",
                                    num_samples=args.num_samples,
                                    # short trial dirs (searched trials are otherwise named after every key)
                                    trial_dirname_creator=lambda t: f"{t.trainable_name}_{t.trial_id}"),
        run_config=tune.RunConfig(
            name=args.experiment_name,
            storage_path=os.path.abspath(args.storage_path),
            stop={"training_iteration": args.iterations},
            checkpoint_config=tune.CheckpointConfig(checkpoint_at_end=True),
            callbacks=[recorder, curves],
            verbose=1,
        ),
    )
    results = tuner.fit()
    best = results.get_best_result()
    searched = {k: best.config[k] for k in ("lr", "clip_param")}
    png = curves.plot(os.path.join(os.path.abspath(args.storage_path), args.experiment_name,
                                   "learning_curves.png"), title=args.experiment_name)
    print(f"best config: {searched}")
    print(f"best return: {best.metrics.get('env_runners', {}).get('episode_return_mean')}")
    print(f"checkpoint: {best.checkpoint.path if best.checkpoint else None}")
    print(f"learning curves: {png}")
    print(f"mlflow: {ui_command(recorder.tracking_uri)}")
    return searched


if __name__ == "__main__":
    main()
