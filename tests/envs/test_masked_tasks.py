"""Partially observed tasks: the built-in CartPole/Pendulum with ``mask_velocity`` and mjlab's
Cartpole with ``drop_actor_terms`` hide the velocities from the policy's observation and expose
the full observation as the privileged ``states`` (what an asymmetric critic or a teacher reads)."""

import pytest
import torch

from rllib_fast.envs import registry
from rllib_fast.envs.base import validate_env


@pytest.mark.parametrize("name,kept,full", [("CartPole", [0, 2], 4), ("Pendulum", [0, 1], 3)])
def test_mask_velocity_hides_velocities_and_exposes_the_full_observation(name, kept, full):
    masked = registry.make(name, num_envs=6, seed=2, mask_velocity=True)
    plain = registry.make(name, num_envs=6, seed=2)
    validate_env(masked)
    assert masked.single_observation_space.shape == (len(kept),)
    assert masked.single_state_space == plain.single_observation_space
    obs, ref = masked.reset(seed=2), plain.reset(seed=2)
    assert torch.equal(obs, ref[:, kept]) and torch.equal(masked.states, ref)
    for _ in range(40):   # across episode ends (CartPole's random actions end episodes in ~20 steps)
        a = plain.sample_actions()
        s, r = masked.step(a), plain.step(a)
        assert torch.equal(s.obs, r.obs[:, kept]) and torch.equal(s.final_obs, r.final_obs[:, kept])
        assert torch.equal(s.extras["states"], r.obs) and torch.equal(s.extras["final_states"], r.final_obs)
        assert torch.equal(s.reward, r.reward) and torch.equal(s.terminated, r.terminated)
    assert masked.states.shape == (6, full)


def test_mask_velocity_is_cartpoles_and_pendulums():
    with pytest.raises(TypeError, match="mask_velocity"):   # like any keyword the task does not take
        registry.make("Acrobot", num_envs=2, mask_velocity=True)


def test_mjlab_cartpole_without_actor_velocities():
    pytest.importorskip("mjlab")
    env = registry.make("mjlab:Mjlab-Cartpole-Balance", num_envs=4, seed=0,
                        drop_actor_terms=["cart_vel", "pole_vel"])
    assert env.single_observation_space.shape == (3,)   # cart position, pole angle cos/sin
    assert env.single_state_space.shape == (5,)          # the critic group keeps the velocities
    obs = env.reset(seed=0)
    step = env.step(env.sample_actions())
    assert obs.shape == (4, 3) and step.extras["states"].shape == (4, 5)
    torch.testing.assert_close(step.obs, step.extras["states"][:, :3])   # the actor's terms come first
    env.close()
    with pytest.raises(ValueError, match="no actor observation term 'cart_velocity'; allowed: cart_pos"):
        registry.make("mjlab:Mjlab-Cartpole-Balance", num_envs=2, seed=0, drop_actor_terms=["cart_velocity"])
