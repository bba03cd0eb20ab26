"""VariableTimeEnv: the step-time law (mean/variance), seeding, state, pass-through."""
import numpy as np
import pytest
import torch

from rllib_fast.envs import make
from rllib_fast.envs.variable_time import StepTimeSampler, VariableTimeCreator, VariableTimeEnv


@pytest.mark.parametrize("dist,mean,std", [("exponential", 2e-3, 2e-3), ("exponential", 2e-3, 5e-4),
                                           ("gamma", 1e-3, 3e-3), ("constant", 1e-3, 0.0)])
def test_draws_have_the_requested_mean_and_std(dist, mean, std):
    s = StepTimeSampler(mean, std, dist, seed=0)
    x = np.array([s.draw() for _ in range(40_000)])
    assert x.min() >= 0
    assert x.mean() == pytest.approx(mean, rel=0.03)
    assert x.std() == pytest.approx(std, rel=0.05, abs=1e-9)


def test_bad_arguments_name_the_key():
    with pytest.raises(ValueError, match="std_s.*allowed"):
        StepTimeSampler(1e-3, 2e-3, "exponential")
    with pytest.raises(ValueError, match="distribution.*allowed"):
        StepTimeSampler(1e-3, 0.0, "uniform")


def test_wrapper_passes_tensors_through_and_is_seeded_and_checkpointable():
    inner, ref = make("CartPole", num_envs=3, seed=5), make("CartPole", num_envs=3, seed=5)
    env = VariableTimeEnv(inner, 1e-3, 1e-3, seed=7, sleep=False)
    assert env.num_envs == 3 and env.single_action_space == ref.single_action_space
    torch.testing.assert_close(env.reset(seed=1), ref.reset(seed=1), rtol=0, atol=0)
    a = torch.tensor([0, 1, 1])
    s1, s2 = env.step(a), ref.step(a)
    torch.testing.assert_close(s1.obs, s2.obs, rtol=0, atol=0)
    state = env.get_state()
    times = []
    for _ in range(5):
        env.step(a)
        times.append(env.last_step_time)
    env.set_state(state)
    again = []
    for _ in range(5):
        env.step(a)
        again.append(env.last_step_time)
    assert times == again and len(set(times)) == 5
    other = VariableTimeEnv(make("CartPole", num_envs=3), 1e-3, 1e-3, seed=8, sleep=False)
    assert [other.sampler.draw() for _ in range(5)] != times


def test_creator_sleeps_and_seeds_from_context():
    env = VariableTimeCreator("CartPole", mean_s=2e-3, std_s=1e-3)({"num_envs": 2, "seed": 3})
    env.reset()
    import time

    t = time.perf_counter()
    for _ in range(10):
        env.step(torch.zeros(2, dtype=torch.long))
    assert time.perf_counter() - t >= 0.9 * env.total_sleep_s > 0
    env2 = VariableTimeCreator("CartPole", mean_s=2e-3, std_s=1e-3)({"num_envs": 2, "seed": 3})
    assert env2.sampler.draw() == VariableTimeCreator("CartPole", mean_s=2e-3, std_s=1e-3)(
        {"num_envs": 2, "seed": 3}).sampler.draw()
