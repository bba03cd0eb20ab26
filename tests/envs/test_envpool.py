"""envpool sources for real (rllib_fast/envs/envpool.py): MuJoCo Ant and Atari Pong,
short runs."""
import rllib_fast  # noqa: F401  (registers everything first)

import math

import pytest
import torch

envpool = pytest.importorskip("envpool")

from rllib_fast.envs import make, validate_env  # noqa: E402


def test_ant_next_step_autoreset_is_masked():
    env = make("envpool:Ant-v4", num_envs=4, seed=0, max_episode_steps=20)
    validate_env(env)
    assert env.max_episode_steps == 20 and str(env.single_action_space.dtype) == "float32"
    assert env.single_observation_space.shape == (27,) and env.obs_shape == (27,)
    obs = env.reset(seed=0)
    assert obs.dtype == torch.float32
    prev_done = torch.zeros(4, dtype=torch.bool)
    n_trunc = 0
    gen = torch.Generator().manual_seed(0)
    for _ in range(45):
        s = env.step(torch.rand((4, 8), generator=gen) * 2 - 1)
        assert torch.equal(~s.valid, prev_done)  # the step after an end returns the reset obs
        assert bool((s.reward[~s.valid] == 0).all()) and not bool((s.done & ~s.valid).any())
        assert not bool((s.terminated & s.truncated).any())
        torch.testing.assert_close(s.final_obs, s.obs)
        n_trunc += int(s.truncated.sum())
        prev_done = s.done.clone()
    assert n_trunc >= 4  # everyone timed out at least once (20-step limit)


def test_reseeding_rebuilds_the_pool_reproducibly():
    env = make("envpool:HalfCheetah-v4", num_envs=3, seed=1)
    a = torch.zeros(3, 6)

    def run(seed):
        out = [env.reset(seed=seed)]
        out += [env.step(a).obs for _ in range(3)]
        return torch.cat(out)
    first = run(5)
    torch.testing.assert_close(run(5), first, rtol=0, atol=0)
    assert not torch.equal(run(6), first)


def test_pong_frames_stay_uint8():
    env = make("envpool:Pong-v5", num_envs=2, seed=0)
    obs = env.reset()
    assert obs.dtype == torch.uint8 and obs.shape == (2, 4, 84, 84) and env.max_episode_steps == 27000
    s = env.step(torch.tensor([0, 1]))
    assert s.obs.dtype == torch.uint8 and s.reward.dtype == torch.float32 and s.final_obs is s.obs
    with pytest.raises(ValueError, match="batch_size"):
        make("envpool:Pong-v5", num_envs=2, batch_size=1)


def test_fastppo_runs_on_envpool_ant():
    from rllib_fast.algorithms.ppo import FastPPOConfig

    algo = (FastPPOConfig().environment("envpool:Ant-v4", num_envs=4, env_config={"max_episode_steps": 16})
            .training(rollout_length=16, num_epochs=1, decorrelate_steps=0).debugging(seed=0)).build_algo()
    try:
        r = algo.train()
        assert algo.any_invalid and math.isfinite(r["learners"]["default_policy"]["policy_loss"])
    finally:
        algo.stop()
