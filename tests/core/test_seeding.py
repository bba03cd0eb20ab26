"""Every derived seed comes from core.seeding; every env split from envs.base.env_share."""
import numpy as np
import pytest

from rllib_fast.algorithms.ppo import FastPPOConfig
from rllib_fast.core.multi_learner import learner_config
from rllib_fast.core.seeding import (ASYNC_LEARNER, EVALUATION, EXECUTOR, LEARNER, PQL_LEARNER, derive_seed, env_seeds,
                                     worker_seed)
from rllib_fast.envs.base import env_share


def test_derived_seeds_are_independent_children_not_offsets():
    tags = (EXECUTOR, LEARNER, ASYNC_LEARNER, EVALUATION, PQL_LEARNER)
    assert len(set(tags)) == len(tags) and all(t > 1000 for t in tags)   # never a worker index
    seeds = {derive_seed(7, tag, r) for tag in tags for r in range(4)} | {worker_seed(7, w) for w in range(4)}
    assert len(seeds) == 4 * len(tags) + 4 and 7 not in seeds
    # seed + k offsets made trial s's learner 1 the same stream as trial s + k's learner 0; children do not
    assert derive_seed(7, LEARNER, 1) != derive_seed(8, LEARNER, 1)
    assert worker_seed(None, 3) is None
    # the SeedSequence child at that key: the values simulator workers have always been given
    assert worker_seed(5, 2) == int(np.random.SeedSequence(5, spawn_key=(2,)).generate_state(1)[0])
    assert list(env_seeds(5, 3)) == list(np.random.SeedSequence(5).generate_state(3))


def test_learner_zero_is_the_trial_and_the_others_get_children():
    cfg = FastPPOConfig().environment("CartPole", num_envs=8).debugging(seed=11)
    assert learner_config(cfg, 0).seed == 11
    assert learner_config(cfg, 1).seed == derive_seed(11, LEARNER, 1)


@pytest.mark.parametrize("n,parts", [(10, 4), (8, 0)])
def test_uneven_env_split_names_the_key(n, parts):
    with pytest.raises(ValueError, match=rf"X: `num_envs` = {n} must be divisible by `num_workers` = {parts}"):
        env_share(n, parts, "num_workers", "X")
    assert env_share(12, 4, "num_workers", "X") == 3
