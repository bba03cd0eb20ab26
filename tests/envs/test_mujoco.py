"""gymnasium MuJoCo sources for real (``gym:HalfCheetah-v5`` etc. through
rllib_fast/envs/gymnasium.py), sync and async vectorisation, short runs."""
import rllib_fast  # noqa: F401  (registers everything first)

import math

import pytest
import torch

pytest.importorskip("mujoco")

from rllib_fast.envs import make, validate_env  # noqa: E402


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_halfcheetah_truncation_then_masked_reset_step(mode):
    env = make("gym:HalfCheetah-v5", num_envs=2, seed=0, vectorization_mode=mode, max_episode_steps=10)
    try:
        validate_env(env)
        assert env.max_episode_steps == 10 and env.obs_shape == (17,)
        env.reset(seed=0)
        steps = [env.step(env.sample_actions()) for _ in range(12)]
        # a time limit, not a terminal
        assert bool(steps[9].truncated.all()) and not steps[9].terminated.any()
        assert steps[10].valid is not None and not steps[10].valid.any()  # reset step: not a transition
        assert all(bool(s.valid.all()) for s in steps[:10])
        assert not torch.equal(steps[9].final_obs, steps[10].obs)
    finally:
        env.close()


def test_sync_and_async_agree():
    def run(mode):
        env = make("gym:Hopper-v5", num_envs=2, seed=3, vectorization_mode=mode)
        try:
            obs = [env.reset(seed=3)]
            a = torch.full((2, 3), 0.3)
            obs += [env.step(a).obs for _ in range(5)]
            return torch.cat(obs)
        finally:
            env.close()
    torch.testing.assert_close(run("sync"), run("async"), rtol=0, atol=0)


def test_hopper_falls_and_terminates():
    env = make("gym:Hopper-v5", num_envs=2, seed=0, vectorization_mode="sync")
    env.reset(seed=0)
    ended = None
    for _ in range(300):
        s = env.step(torch.ones(2, 3))
        if s.done.any():
            ended = s
            break
    env.close()
    # full torque makes the hopper fall (unhealthy) long before the 1000-step limit: a termination
    assert ended is not None and bool(ended.terminated.any()) and not ended.truncated.any()


def test_fastppo_runs_on_halfcheetah():
    from rllib_fast.algorithms.ppo import FastPPOConfig

    algo = (FastPPOConfig().environment("gym:HalfCheetah-v5", num_envs=2,
                                        env_config={"max_episode_steps": 20})
            .training(rollout_length=16, num_epochs=1, decorrelate_steps=0).debugging(seed=0)).build_algo()
    try:
        r = algo.train()
        r = algo.train()
        assert algo.any_invalid and math.isfinite(r["learners"]["default_policy"]["policy_loss"])
    finally:
        algo.stop()
