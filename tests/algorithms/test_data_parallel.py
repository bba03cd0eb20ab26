"""num_learners=2 through Ray actors (gloo on CPU)."""
import math

import numpy as np
import pytest
import ray
import torch
from ray.rllib.algorithms.algorithm import Algorithm

from rllib_fast.algorithms.a2c import FastA2CConfig
from rllib_fast.algorithms.ppo import FastPPO, FastPPOConfig
from rllib_fast.core.multi_learner import module_tensors


@pytest.fixture(scope="module", autouse=True)
def ray_session():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    yield
    ray.shutdown()


def _vector(algo):
    return torch.cat([t.detach().reshape(-1).double() for t in module_tensors(algo.module)])


@pytest.mark.parametrize("cfg_cls", [FastA2CConfig, FastPPOConfig])
def test_learners_stay_bit_identical_and_count_all_env_steps(cfg_cls):
    cfg = cfg_cls().environment("CartPole", num_envs=16).training(rollout_length=8).learners(
        num_learners=2, num_cpus_per_learner=1).debugging(seed=0)
    if cfg_cls is FastPPOConfig:
        cfg.training(adaptive_lr_kl_target=0.01)  # exercises the all-reduced KL too
    algo = cfg.build_algo()
    assert algo.env.num_envs == 8 and len(algo._dp_group.remotes) == 1
    for i in range(3):
        r = algo.train()
        remote = algo._dp_group.parameter_vectors()[0]
        assert torch.equal(_vector(algo), remote), f"learners diverged at iteration {i}"
    assert r["num_env_steps_sampled_lifetime"] >= 3 * 8 * 16
    algo.stop()


def test_checkpoint_restores_every_learner(tmp_path):
    cfg = FastPPOConfig().environment("CartPole", num_envs=8).training(rollout_length=8).learners(
        num_learners=2).debugging(seed=1)
    algo = cfg.build_algo()
    algo.train()
    path = algo.save_to_path(str(tmp_path / "c"))
    algo.train()
    after = _vector(algo)
    algo.stop()
    restored = Algorithm.from_checkpoint(path)
    assert isinstance(restored, FastPPO)
    restored.train()
    assert torch.equal(_vector(restored), after)  # both learners resumed exactly
    assert torch.equal(restored._dp_group.parameter_vectors()[0], after)
    restored.stop()


def test_validation_of_learner_counts():
    with pytest.raises(ValueError, match="must be divisible by `num_learners`"):
        FastPPOConfig().environment("CartPole", num_envs=9).learners(num_learners=2).validate()
    from rllib_fast.algorithms.dqn import FastDQNConfig

    with pytest.raises(ValueError, match="`num_learners` = 2 is not supported by FastDQN"):
        FastDQNConfig().environment("CartPole", num_envs=8).learners(num_learners=2).validate()


def test_resource_request_has_one_bundle_per_learner():
    pgf = FastPPO.default_resource_request(FastPPOConfig().environment("CartPole", num_envs=8).learners(
        num_learners=3, num_cpus_per_learner=1))
    assert len(pgf.bundles) == 3


@pytest.mark.slow
def test_two_learner_ppo_learns_cartpole():
    from rllib_fast.algorithms.ppo.tuned import CARTPOLE

    algo = FastPPOConfig().environment("CartPole", num_envs=64).training(**CARTPOLE).learners(
        num_learners=2).debugging(seed=0).build_algo()
    best = -math.inf
    for _ in range(150):
        ret = algo.train()["env_runners"]["episode_return_mean"]
        best = max(best, ret if np.isfinite(ret) else -math.inf)
        if best >= 475:
            break
    algo.stop()
    assert best >= 475
