"""Isaac Lab adapter (rllib_fast/envs/isaaclab.py) against the DirectRLEnv stand-in
(Isaac Lab needs Isaac Sim; see rllib_fast/envs/standins/isaaclab.py)."""
import rllib_fast  # noqa: F401  (registers everything first)

import gymnasium as gym
import numpy as np
import pytest
import torch

from rllib_fast.envs import make, validate_env
from rllib_fast.envs import isaaclab as il
from rllib_fast.envs.standins.isaaclab import PointReachLabEnv, PointReachLabEnvCfg

ENV = "rllib_fast.envs.standins.isaaclab:PointReachLabEnv"


def make_env(n=8, episode_length_s=0.5, **kw):
    return make("isaaclab:PointReach-Direct-v0", num_envs=n, seed=0, env_class=ENV,
                cfg={"episode_length_s": episode_length_s, **kw.pop("cfg", {})}, **kw)


def test_same_step_reset_time_outs_and_final_obs():
    env = make_env(n=8, episode_length_s=2.0)  # max_episode_length = ceil(2.0 / 0.05) = 40
    validate_env(env)
    assert env.max_episode_steps == 40 and env.single_state_space.shape == (8,)
    assert env.single_observation_space == gym.spaces.Box(-np.inf, np.inf, (6,), np.float32)
    obs = env.reset(seed=0)
    push = torch.tensor([[1.0, 1.0]]).repeat(8, 1) * (torch.arange(8) % 2 == 0).unsqueeze(-1)
    n_term = n_trunc = 0
    for t in range(90):
        states_before = env.states.clone()
        target_before = states_before[:, 6:8]
        s = env.step(push)
        assert s.valid is None  # same-step reset: no straddling transition
        assert not bool((s.terminated & s.truncated).any())
        done = s.done
        # ended envs: obs is already the reset obs (new target); final_obs is the last obs seen
        torch.testing.assert_close(s.final_obs[done], obs[done])
        torch.testing.assert_close(s.final_obs[~done], s.obs[~done])
        same_target = (s.extras["states"][:, 6:8] == target_before).all(-1)
        assert bool(same_target[~done].all()) and not bool(same_target[done].any())
        if done.any():  # extras["log"]: statistics of the envs reset in this step
            assert env.last_log["num_resets"] == float(done.sum())
            assert isinstance(env.last_log["Episode_Reward/mean"], torch.Tensor)
        else:
            assert env.last_log == {}
        assert set(s.extras) == {"states", "final_states"}
        # final_states go with final_obs: the states the action was taken from for ended envs
        torch.testing.assert_close(s.extras["final_states"][done], states_before[done])
        torch.testing.assert_close(s.extras["final_states"][~done], s.extras["states"][~done])
        n_term += int(s.terminated.sum())
        n_trunc += int(s.truncated.sum())
        obs = s.obs
    assert n_term > 0 and n_trunc > 0


def test_live_flag_buffers_are_copied():
    env = make_env(n=4, episode_length_s=0.25)  # 5 steps
    env.reset()
    held = [env.step(torch.zeros(4, 2)) for _ in range(6)]
    assert bool(held[3].truncated.all())  # kept even though the env's reset_time_outs changed since
    assert not held[4].truncated.any()
    assert env._base.reset_time_outs is not held[3].truncated


def test_finite_horizon_time_out_is_a_termination_and_clipping():
    env = make_env(n=4, episode_length_s=0.25, cfg={"is_finite_horizon": True}, clip_actions=0.5,
                   clip_obs=0.25)
    env.reset()
    steps = [env.step(torch.full((4, 2), 9.0)) for _ in range(4)]
    assert bool(steps[3].terminated.all()) and not steps[3].truncated.any()
    assert float(env._base.actions.abs().max()) == 0.5
    assert float(steps[0].obs.abs().max()) <= 0.25 and float(env.single_observation_space.high[0]) == 0.25


def test_randomized_episode_lengths_and_prebuilt_env():
    base = PointReachLabEnv(PointReachLabEnvCfg(num_envs=16))
    env = make("isaaclab:X", num_envs=16, env=base)
    env.reset()
    env.randomize_episode_progress()
    assert len(set(base.episode_length_buf.tolist())) > 1
    with pytest.raises(ValueError, match="num_envs=16 but num_envs=4"):
        make("isaaclab:X", num_envs=4, env=base)


def test_isaaclab_name_without_isaaclab_is_a_clear_error():
    with pytest.raises(il.IsaacLabNotInstalledError, match="Isaac Lab is not installed"):
        make("isaaclab:Isaac-Ant-Direct-v0", num_envs=4)


def test_row_masks_select_rows_of_any_rank():
    """Observation groups may be images or un-flattened histories ([N, H, D]); a
    ``done.unsqueeze(-1)`` mask would line N up against the last dim (silently,
    when that dim happens to equal N)."""
    done = torch.tensor([True, False, True])
    reset, terminal = torch.zeros(3, 4, 3), torch.ones(3, 4, 3)   # trailing dim == N on purpose
    out = torch.where(il._rows(done, terminal), reset, terminal)
    assert (out[done] == 0).all() and (out[~done] == 1).all()
    flat = torch.where(il._rows(done, terminal[:, 0]), reset[:, 0], terminal[:, 0])
    assert (flat[done] == 0).all() and (flat[~done] == 1).all()
