"""Built-in batched classic-control tasks against gymnasium's single envs, plus
the tensor vector-env contract (auto-reset, time limits, seeding, restore)."""
import math
import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch

from rllib_fast.envs import registry, validate_env
from rllib_fast.envs.classic import AcrobotEnv, CartPoleEnv, MountainCarContinuousEnv, PendulumEnv

TASKS = {
    "CartPole": (CartPoleEnv, "CartPole-v1"),
    "Acrobot": (AcrobotEnv, "Acrobot-v1"),
    "Pendulum": (PendulumEnv, "Pendulum-v1"),
    "MountainCarContinuous": (MountainCarContinuousEnv, "MountainCarContinuous-v0"),
}
ALL = [cls for cls, _ in TASKS.values()]
PI = math.pi

# "interesting" states written into both envs now and then, so the comparison
# covers terminations, velocity/position clipping and the Pendulum angle wrap
RANDOM_STATE = {
    "CartPole": lambda r: r.uniform([-2.4, -2, -0.21, -2], [2.4, 2, 0.21, 2]),
    "Acrobot": lambda r: r.uniform([-PI, -PI, -4 * PI, -9 * PI], [PI, PI, 4 * PI, 9 * PI]),
    "Pendulum": lambda r: r.uniform([-3 * PI, -8], [3 * PI, 8]),
    "MountainCarContinuous": lambda r: r.uniform([-1.2, -0.07], [0.6, 0.07]).astype(np.float32),
}
INJECT_P = {"CartPole": 0.1, "Acrobot": 0.3, "Pendulum": 0.1, "MountainCarContinuous": 0.3}
# actions beyond the Box bounds check the clipping (and MountainCar's penalty on the raw action)
RANDOM_ACTION = {
    "CartPole": lambda r: int(r.integers(2)),
    "Acrobot": lambda r: int(r.integers(3)),
    "Pendulum": lambda r: r.uniform(-3, 3, size=1).astype(np.float32),
    "MountainCarContinuous": lambda r: r.uniform(-1.5, 1.5, size=1).astype(np.float32),
}


def _copy_gym_state(env, row, genv):
    env.state[row] = torch.as_tensor(np.asarray(genv.unwrapped.state, dtype=np.float64),
                                     dtype=torch.float32)


def _in_init_box(env, row):
    s = env.state[row]
    low = torch.tensor(env.init_low, dtype=torch.float32)
    high = torch.tensor(env.init_high, dtype=torch.float32)
    return bool(((s >= low) & (s <= high)).all())


@pytest.mark.parametrize("name", list(TASKS))
def test_matches_gymnasium(name):
    """One row of our env tracks gymnasium's env on the same actions (obs,
    reward, terminated, truncated) over 150 steps with a 40-step limit.

    Acrobot is chaotic, so float32 (ours) and float64 (gymnasium) trajectories
    drift apart exponentially; there we re-copy gymnasium's state into our row
    before every step, which compares one-step transitions exactly."""
    cls, gym_id = TASKS[name]
    limit, row = 40, 1
    rng = np.random.default_rng(0)
    env = cls(num_envs=3, seed=1, max_episode_steps=limit)
    env.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        genv = gym.make(gym_id, max_episode_steps=limit)
        genv.reset(seed=123)
        _copy_gym_state(env, row, genv)
        terminations = truncations = 0
        for _ in range(150):
            if rng.random() < INJECT_P[name]:
                genv.unwrapped.state = RANDOM_STATE[name](rng)
                _copy_gym_state(env, row, genv)
            elif name == "Acrobot":
                _copy_gym_state(env, row, genv)
            action = RANDOM_ACTION[name](rng)
            actions = env.sample_actions()
            actions[row] = torch.as_tensor(action)
            out = env.step(actions)
            g_obs, g_rew, g_term, g_trunc, _ = genv.step(action)

            np.testing.assert_allclose(out.final_obs[row].numpy(), g_obs, rtol=1e-4, atol=1e-4)
            assert out.reward[row].item() == pytest.approx(g_rew, rel=1e-4, abs=1e-4)
            assert bool(out.terminated[row]) == g_term
            assert bool(out.truncated[row]) == (g_trunc and not g_term)
            if g_term or g_trunc:
                terminations += g_term
                truncations += g_trunc and not g_term
                assert _in_init_box(env, row) and int(env.elapsed_steps[row]) == 0
                genv.reset()
                _copy_gym_state(env, row, genv)
            else:
                assert torch.equal(out.obs[row], out.final_obs[row])
    assert truncations > 0 if name == "Pendulum" else terminations > 0


def test_pendulum_time_limit_truncates_and_autoresets():
    env = PendulumEnv(num_envs=3, seed=0, max_episode_steps=5)
    ref = PendulumEnv(num_envs=3, seed=0, max_episode_steps=None, autoreset=False)
    assert torch.equal(env.reset(), ref.reset())
    action = torch.full((3, 1), 0.5)
    for t in range(1, 6):
        out, expected = env.step(action), ref.step(action)
        assert torch.equal(out.final_obs, expected.obs)
        assert not out.terminated.any() and not expected.truncated.any()
        if t < 5:
            assert not out.truncated.any() and torch.equal(out.obs, out.final_obs)
        else:
            assert out.truncated.all()
            assert not torch.isclose(out.obs, out.final_obs).all(dim=1).any()
            assert (out.obs[:, 2].abs() <= 1).all()  # fresh initial thdot in [-1, 1]
            assert torch.allclose(out.obs[:, 0] ** 2 + out.obs[:, 1] ** 2, torch.ones(3))
            assert (env.elapsed_steps == 0).all()
    for t in range(1, 6):  # the next episode is cut at exactly the same length
        assert bool(env.step(action).truncated.all()) == (t == 5)


FALLING = torch.tensor([0.0, 0.0, 0.2, 3.0])  # pole passes 12 degrees on the next step
LEAVING = torch.tensor([2.39, 2.0, 0.0, 0.0])  # cart passes x = 2.4 on the next step


def test_cartpole_termination_autoreset():
    env = CartPoleEnv(num_envs=4, seed=0)
    env.reset()
    env.state[0], env.state[1] = FALLING, LEAVING
    out = env.step(torch.tensor([1, 1, 0, 1]))
    assert out.terminated.tolist() == [True, True, False, False]
    assert not out.truncated.any()
    assert out.final_obs[0, 2] > env.theta_threshold and out.final_obs[1, 0] > env.x_threshold
    assert (out.obs[:2].abs() <= 0.05).all()  # ended rows: fresh initial states
    assert torch.equal(out.obs[2:], out.final_obs[2:])  # others: final_obs == obs
    assert torch.equal(out.reward, torch.ones(4))  # the terminal step is rewarded too
    assert env.elapsed_steps.tolist() == [0, 0, 1, 1]


def test_cartpole_termination_at_limit_is_termination():
    env = CartPoleEnv(num_envs=3, seed=0, max_episode_steps=1)
    env.reset()
    env.state[0] = FALLING
    out = env.step(torch.ones(3, dtype=torch.long))
    assert out.terminated.tolist() == [True, False, False]
    assert out.truncated.tolist() == [False, True, True]
    assert (env.elapsed_steps == 0).all()


def test_no_autoreset_and_reset_idx():
    env = CartPoleEnv(num_envs=4, seed=0, autoreset=False)
    env.reset()
    env.state[1] = FALLING
    out = env.step(torch.ones(4, dtype=torch.long))
    assert out.terminated.tolist() == [False, True, False, False]
    assert torch.equal(out.obs, out.final_obs) and out.obs is not out.final_obs
    assert torch.equal(env.state, out.obs)  # the ended env was not reset
    assert env.elapsed_steps.tolist() == [1, 1, 1, 1]
    before = env.state.clone()
    obs = env.reset_idx(out.done)
    keep = torch.tensor([True, False, True, True])
    assert torch.equal(env.state[keep], before[keep])
    assert _in_init_box(env, 1) and not torch.equal(env.state[1], before[1])
    assert env.elapsed_steps.tolist() == [1, 0, 1, 1]
    assert torch.equal(obs, env.state)


def _rollout(env, steps=60, seed=0):
    gen = torch.Generator().manual_seed(seed)
    outs = [env.reset()]
    for _ in range(steps):
        out = env.step(env.sample_actions(gen))
        outs += [out.obs, out.reward, out.terminated, out.truncated, out.final_obs]
    return outs


def _same(a, b):
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


@pytest.mark.parametrize("cls", ALL)
def test_seeding(cls):
    # a 20-step limit makes the rollouts include auto-resets
    a = _rollout(cls(num_envs=16, seed=3, max_episode_steps=20))
    assert _same(a, _rollout(cls(num_envs=16, seed=3, max_episode_steps=20)))
    assert not torch.equal(a[0], cls(num_envs=16, seed=4).reset())
    assert torch.equal(a[0], cls(num_envs=16, seed=99).reset(seed=3))
    torch.manual_seed(7)  # seed=None draws from torch's default RNG
    first = cls(num_envs=16).reset()
    torch.manual_seed(7)
    assert torch.equal(first, cls(num_envs=16).reset())


@pytest.mark.parametrize("cls", ALL)
def test_get_set_state_round_trip(cls):
    env = cls(num_envs=8, seed=0, max_episode_steps=10)
    env.reset()
    gen = torch.Generator().manual_seed(0)
    for _ in range(15):
        env.step(env.sample_actions(gen))
    snap = env.get_state()
    assert all(t.device.type == "cpu" for t in (snap["state"], snap["elapsed_steps"], snap["rng"]))
    actions = [env.sample_actions(gen) for _ in range(30)]

    def replay(e):
        return [t for a in actions for t in e.step(a)[:5]]

    first = replay(env)
    other = cls(num_envs=8, seed=123, max_episode_steps=10)
    other.set_state(snap)
    assert _same(first, replay(other))
    env.set_state(snap)  # the snapshot is a copy, unaffected by the steps since
    assert _same(first, replay(env))


@pytest.mark.parametrize("cls", ALL)
def test_returned_tensors_are_not_mutated_later(cls):
    env = cls(num_envs=8, seed=0, max_episode_steps=3)
    outs = [env.reset()] + list(env.step(env.sample_actions())[:5])
    saved = [t.clone() for t in outs]
    for _ in range(5):
        env.step(env.sample_actions())
    env.reset_idx(torch.ones(8, dtype=torch.bool))
    assert _same(outs, saved)


@pytest.mark.parametrize("name", list(TASKS))
def test_contract_spaces_and_registry(name):
    cls, gym_id = TASKS[name]
    env = cls(num_envs=5, seed=0)
    validate_env(env, num_steps=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        genv = gym.make(gym_id)
    assert env.single_observation_space == genv.observation_space
    assert env.single_action_space == genv.action_space
    assert env.single_observation_space.dtype == np.float32
    assert env.max_episode_steps == genv.spec.max_episode_steps
    assert env.device == torch.device("cpu")
    made = registry.make(name, num_envs=8, device="cpu", seed=0)
    assert type(made) is cls and made.num_envs == 8
    validate_env(made)
    assert torch.equal(made.reset(seed=0), cls(num_envs=8, seed=0).reset())


@pytest.mark.parametrize("cls", [CartPoleEnv, AcrobotEnv])
def test_discrete_actions_accept_column_shape(cls):
    a, b = cls(num_envs=6, seed=0), cls(num_envs=6, seed=0)
    a.reset(), b.reset()
    actions = a.sample_actions()
    assert _same(a.step(actions)[:5], b.step(actions[:, None].int())[:5])


@pytest.mark.parametrize("cls", ALL)
def test_large_batch(cls):
    n = 4096
    env = cls(num_envs=n, seed=0, max_episode_steps=3)
    obs_dim = env.single_observation_space.shape[0]
    assert env.reset().shape == (n, obs_dim)
    for _ in range(4):
        out = env.step(env.sample_actions())
    for t in (out.obs, out.final_obs):
        assert t.shape == (n, obs_dim) and t.dtype == torch.float32 and torch.isfinite(t).all()
    assert out.reward.shape == (n,) and out.reward.dtype == torch.float32
    assert out.terminated.shape == out.truncated.shape == (n,)
    assert out.terminated.dtype == out.truncated.dtype == torch.bool
    assert env.state.shape == (n, env.state_dim) and env.elapsed_steps.max() <= 3


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("cls", ALL)
def test_cuda_step_is_sync_free(cls):
    env = cls(num_envs=256, device="cuda", seed=0, max_episode_steps=5)
    env.reset()
    actions = env.sample_actions()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(10):
            out = env.step(actions)
        env.reset_idx(out.done)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    validate_env(env)
