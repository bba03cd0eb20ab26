"""Smallest FastPPO run: build, train until CartPole is solved, checkpoint,
restore and evaluate. ``python examples/quickstart_fastppo.py``"""
import tempfile

from ray.rllib.algorithms.algorithm import Algorithm

import rllib_fast  # noqa: F401  (registers algorithms and envs)
from rllib_fast.algorithms.ppo import FastPPOConfig

config = FastPPOConfig().environment("CartPole").debugging(seed=0)  # the defaults learn it
algo = config.build_algo()
for i in range(200):
    result = algo.train()
    ret = result["env_runners"]["episode_return_mean"]
    print(f"iter {i:3d}  env steps {result['num_env_steps_sampled_lifetime']:>9,.0f}  return {ret:6.1f}")
    if ret >= 475:
        break
path = algo.save_to_path(tempfile.mkdtemp())
restored = Algorithm.from_checkpoint(path)
print("greedy evaluation:", restored.evaluate()["env_runners"]["episode_return_mean"])
