"""Optuna search over FastPPO's lr and clip_param on CartPole (a .py experiment file).

    rllib train file tune_configs/cartpole-fastppo-optuna.py
    rllib-fast sweep tune_configs/cartpole-fastppo-optuna.py --num-samples 8

How a .py experiment file talks to the CLI (see rllib_fast/cli.py):

* ``config`` (required): an AlgorithmConfig; values may be Tune search-space
  objects (``tune.loguniform`` ...), which the search algorithm samples.
* ``stop`` (optional): the stop criteria dict (``--stop`` overrides it).
* ``tune_config`` (optional): a ``tune.TuneConfig`` or a dict with its keys
  ``search_alg``, ``scheduler``, ``metric``, ``mode``, ``num_samples``,
  ``max_concurrent_trials`` (``--num-samples`` overrides num_samples).
* ``name``, ``checkpoint_config`` (optional).
"""
from ray import tune
from ray.tune.search import ConcurrencyLimiter
from ray.tune.search.optuna import OptunaSearch

from rllib_fast.algorithms.ppo import FastPPOConfig

config = (
    FastPPOConfig()
    .environment("CartPole", num_envs=16)
    .training(rollout_length=32, lr=tune.loguniform(1e-4, 3e-3), clip_param=tune.uniform(0.1, 0.3))
    .debugging(seed=0)
)

stop = {"training_iteration": 5}

tune_config = tune.TuneConfig(
    search_alg=ConcurrencyLimiter(OptunaSearch(seed=0), max_concurrent=2),
    metric="env_runners/episode_return_mean",
    mode="max",
    num_samples=4,
)
