"""gymnasium <-> tensor vector-env bridges (rllib_fast/envs/gymnasium.py)."""
import importlib.util
import pickle
import warnings

import rllib_fast  # noqa: F401  (registers everything first)

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.utils.env_checker import data_equivalence
from gymnasium.utils.passive_env_checker import check_obs
from gymnasium.vector import AutoresetMode

from rllib_fast.envs import Step, TensorVecEnv, validate_env
from rllib_fast.envs.gymnasium import (
    RLLIB_GYM_PREFIX,
    GymVectorEnvAdapter,
    TensorVecEnvToGym,
    make_gym,
    register_rllib_gym_envs,
    rllib_env_creator,
)
from rllib_fast.envs.registry import make

CARTPOLE_X, CARTPOLE_THETA = 2.4, 12 * 2 * np.pi / 360


# ---------------------------------------------------------------------------
# stand-in tensor envs
# ---------------------------------------------------------------------------
class _AutoCounterEnv(TensorVecEnv):
    """Deterministic stand-in. obs = (pos, t, episode); action a moves pos by a+1,
    reward a+1; terminates at pos >= goal_i = 4 + 2i, truncates at t >= T.
    Resets ended envs in the same step (like the built-in tasks by default)."""

    def __init__(self, num_envs=3, device="cpu", seed=None, max_episode_steps=5, autoreset=True):
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.max_episode_steps = max_episode_steps
        self.autoreset = autoreset
        self.single_observation_space = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
        self.single_action_space = gym.spaces.Discrete(2)
        self.goal = 4 + 2 * torch.arange(num_envs, dtype=torch.float32)
        self.state = torch.zeros(num_envs, 3)
        self.closed = False

    def reset(self, seed=None):
        self.state = torch.zeros(self.num_envs, 3)
        return self.state.clone()

    def _reset_rows(self, mask):
        s = self.state.clone()
        s[mask, 0] = 0
        s[mask, 1] = 0
        s[mask, 2] += 1
        self.state = s

    def step(self, actions):
        a = torch.as_tensor(actions).long()
        s = self.state.clone()
        s[:, 0] += a + 1
        s[:, 1] += 1
        terminated = s[:, 0] >= self.goal
        truncated = (s[:, 1] >= self.max_episode_steps) & ~terminated
        reward = (a + 1).float()
        self.state = s
        final_obs = s.clone()
        if self.autoreset:
            self._reset_rows(terminated | truncated)
        return Step(self.state.clone(), reward, terminated, truncated, final_obs,
                    extras={"pos": final_obs[:, 0].clone()})

    def close(self):
        self.closed = True


class _ManualCounterEnv(_AutoCounterEnv):
    """Same task with the built-in tasks' ``autoreset=False`` + ``reset_idx``."""

    def reset_idx(self, mask):
        self._reset_rows(torch.as_tensor(mask, dtype=torch.bool))
        return self.state.clone()


def _counter_reference(num_envs, T, actions_seq, mode):
    """Pure-python NEXT_STEP / SAME_STEP semantics of the counter task."""
    goal = 4 + 2 * np.arange(num_envs)
    pos, t, ep = np.zeros(num_envs), np.zeros(num_envs), np.zeros(num_envs)
    pending = np.zeros(num_envs, bool)
    out = []
    for a in actions_seq:
        obs, final = np.zeros((num_envs, 3)), np.zeros((num_envs, 3))
        rew, term, trunc = np.zeros(num_envs), np.zeros(num_envs, bool), np.zeros(num_envs, bool)
        for i in range(num_envs):
            if mode == "next" and pending[i]:
                pos[i], t[i], ep[i] = 0, 0, ep[i] + 1
                obs[i] = final[i] = (0, 0, ep[i])
                pending[i] = False
                continue
            pos[i] += a[i] + 1
            t[i] += 1
            term[i] = pos[i] >= goal[i]
            trunc[i] = t[i] >= T and not term[i]
            rew[i] = a[i] + 1
            obs[i] = final[i] = (pos[i], t[i], ep[i])
            if term[i] or trunc[i]:
                if mode == "next":
                    pending[i] = True
                else:
                    pos[i], t[i], ep[i] = 0, 0, ep[i] + 1
                    obs[i] = (0, 0, ep[i])
        out.append((obs, final, rew, term, trunc))
    return out


# ---------------------------------------------------------------------------
# gymnasium VectorEnv -> TensorVecEnv
# ---------------------------------------------------------------------------
def _random_actions(rng, n):
    return rng.integers(0, 2, size=n)


def test_next_step_source_marks_straddling_step_invalid():
    n, seed = 4, 3
    raw = gym.make_vec("CartPole-v1", n, vectorization_mode="sync")
    assert raw.metadata["autoreset_mode"] is AutoresetMode.NEXT_STEP  # gymnasium's default
    env = GymVectorEnvAdapter(gym.make_vec("CartPole-v1", n, vectorization_mode="sync"), seed=seed)
    assert env.autoreset_mode is AutoresetMode.NEXT_STEP and env.max_episode_steps == 500
    raw_obs, _ = raw.reset(seed=seed)
    obs = env.reset()
    np.testing.assert_array_equal(obs.numpy(), raw_obs)
    rng = np.random.default_rng(0)
    prev_done = np.zeros(n, bool)
    n_done = n_invalid = 0
    for _ in range(120):
        a = _random_actions(rng, n)
        r_obs, r_rew, r_term, r_trunc, _ = raw.step(a)
        out = env.step(torch.as_tensor(a))
        assert out.obs.dtype == torch.float32 and out.reward.dtype == torch.float32
        np.testing.assert_array_equal(out.obs.numpy(), r_obs)
        # final_obs == obs: on the done step it is the terminal obs
        np.testing.assert_array_equal(out.final_obs.numpy(), r_obs)
        assert out.valid is not None
        np.testing.assert_array_equal(out.valid.numpy(), ~prev_done)
        inv = ~out.valid.numpy()
        assert not out.terminated.numpy()[inv].any() and not out.truncated.numpy()[inv].any()
        assert (out.reward.numpy()[inv] == 0).all()
        done = out.done.numpy()
        term_rows = out.terminated.numpy()
        # terminal obs really is out of bounds (not a reset obs)
        x, th = r_obs[term_rows, 0], r_obs[term_rows, 2]
        assert ((np.abs(x) > CARTPOLE_X) | (np.abs(th) > CARTPOLE_THETA)).all()
        # the straddling step returns the reset obs
        assert (np.abs(r_obs[inv]) <= 0.05).all()
        n_done += done.sum()
        n_invalid += inv.sum()
        prev_done = done
    assert n_done > 0 and n_invalid > 0


def test_same_step_source_final_obs_from_infos():
    n, seed = 4, 5
    kw = dict(vectorization_mode="sync", vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP})
    raw = gym.make_vec("CartPole-v1", n, **kw)
    env = GymVectorEnvAdapter(gym.make_vec("CartPole-v1", n, **kw), seed=seed)
    assert env.autoreset_mode is AutoresetMode.SAME_STEP
    raw.reset(seed=seed)
    env.reset()
    rng = np.random.default_rng(1)
    n_done = 0
    for _ in range(80):
        a = _random_actions(rng, n)
        r_obs, _, r_term, r_trunc, r_info = raw.step(a)
        out = env.step(torch.as_tensor(a))
        assert out.valid is None
        np.testing.assert_array_equal(out.obs.numpy(), r_obs)  # already the reset obs
        done = r_term | r_trunc
        np.testing.assert_array_equal(out.done.numpy(), done)
        expected_final = r_obs.copy()
        for i in np.flatnonzero(done):
            assert r_info["_final_obs"][i]
            expected_final[i] = r_info["final_obs"][i]
        np.testing.assert_array_equal(out.final_obs.numpy(), expected_final)
        if done.any():
            assert (np.abs(out.obs.numpy()[done]) <= 0.05).all()
            assert not np.allclose(out.final_obs.numpy()[done], out.obs.numpy()[done])
        n_done += done.sum()
    assert n_done > 0


def test_disabled_source_is_reset_by_adapter():
    n, seed = 4, 7
    kw = dict(vectorization_mode="sync", vector_kwargs={"autoreset_mode": AutoresetMode.DISABLED})
    raw = gym.make_vec("CartPole-v1", n, **kw)
    env = GymVectorEnvAdapter(gym.make_vec("CartPole-v1", n, **kw), seed=seed)
    assert env.autoreset_mode is AutoresetMode.DISABLED
    raw.reset(seed=seed)
    env.reset()
    rng = np.random.default_rng(2)
    n_done = 0
    for _ in range(80):  # a DISABLED SyncVectorEnv asserts if an ended env is stepped
        a = _random_actions(rng, n)
        r_obs, _, r_term, r_trunc, _ = raw.step(a)
        out = env.step(torch.as_tensor(a))
        assert out.valid is None
        done = r_term | r_trunc
        np.testing.assert_array_equal(out.final_obs.numpy(), r_obs)
        if done.any():
            r_obs, _ = raw.reset(options={"reset_mask": done})
            assert (np.abs(out.obs.numpy()[done]) <= 0.05).all()
        np.testing.assert_array_equal(out.obs.numpy(), r_obs)
        n_done += done.sum()
    assert n_done > 0


def test_truncation_vs_termination_pendulum_time_limit():
    env = make("gym:Pendulum-v1", num_envs=3, seed=0, max_episode_steps=5)
    assert isinstance(env, GymVectorEnvAdapter) and env.max_episode_steps == 5
    assert env.autoreset_mode is AutoresetMode.NEXT_STEP
    env.reset()
    for t in range(1, 13):
        out = env.step(env.sample_actions())
        assert out.obs.shape == (3, 3) and out.obs.dtype == torch.float32
        assert not out.terminated.any()  # Pendulum never terminates
        assert bool(out.truncated.all()) == (t % 6 == 5)
        assert bool((~out.valid).all()) == (t % 6 == 0)
    same = make("gym:Pendulum-v1", num_envs=2, seed=0, max_episode_steps=5, autoreset_mode="same_step")
    assert same.autoreset_mode is AutoresetMode.SAME_STEP
    same.reset()
    for t in range(1, 11):
        out = same.step(same.sample_actions())
        assert out.valid is None and not out.terminated.any()
        assert bool(out.truncated.all()) == (t % 5 == 0)
        if t % 5 == 0:
            assert not torch.allclose(out.final_obs, out.obs)
        else:
            torch.testing.assert_close(out.final_obs, out.obs)


class _TieEnv(gym.Env):
    """Terminates exactly when a TimeLimit(3) truncates: both flags come True."""

    observation_space = gym.spaces.Box(-10, 10, (2,), np.float64)
    action_space = gym.spaces.Box(-1, 1, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2), {}

    def step(self, action):
        assert action.dtype == np.float32
        self.t += 1
        return np.array([self.t, float(action[0])]), 1.0, self.t >= 3, False, {}


@pytest.mark.parametrize("mode", list(AutoresetMode))
def test_terminated_wins_over_truncated(mode):
    vec = gym.vector.SyncVectorEnv([lambda: gym.wrappers.TimeLimit(_TieEnv(), 3)] * 2, autoreset_mode=mode)
    env = GymVectorEnvAdapter(vec)
    assert env.single_observation_space.dtype == np.float32
    env.reset()
    for _ in range(2):
        out = env.step(torch.zeros(2, 1, dtype=torch.float64))
        assert not out.done.any()
    out = env.step(torch.full((2, 1), 0.5))
    assert out.terminated.all() and not out.truncated.any()
    assert out.final_obs.dtype == torch.float32
    np.testing.assert_allclose(out.final_obs.numpy(), [[3, 0.5], [3, 0.5]])
    if mode is AutoresetMode.NEXT_STEP:
        torch.testing.assert_close(out.obs, out.final_obs)
    else:
        np.testing.assert_allclose(out.obs.numpy(), 0)


@pytest.mark.parametrize("name,kwargs", [
    ("gym:CartPole-v1", {}),
    ("gym:CartPole-v1", {"autoreset_mode": "same_step"}),
    ("gym:CartPole-v1", {"autoreset_mode": AutoresetMode.DISABLED}),
    ("gym:Pendulum-v1", {"max_episode_steps": 3}),
])
def test_validate_env_passes(name, kwargs):
    env = make(name, num_envs=3, seed=1, **kwargs)
    validate_env(env, num_steps=40)
    env.close()


def test_gym_prefix_make():
    env = make("gym:CartPole-v1", num_envs=8)
    assert env.num_envs == 8 and env.device == torch.device("cpu")
    assert env.max_episode_steps == 500
    # default: the id's vector entry point (gymnasium's own batched CartPole)
    assert type(env.gym_env).__name__ == "CartPoleVectorEnv"
    assert isinstance(env.single_action_space, gym.spaces.Discrete)
    sync = make("gym:CartPole-v1", num_envs=2, vectorization_mode="sync")
    assert isinstance(sync.gym_env, gym.vector.SyncVectorEnv)
    pend = make("gym:Pendulum-v1", num_envs=2, seed=0)
    assert isinstance(pend.gym_env, gym.vector.SyncVectorEnv) and pend.max_episode_steps == 200
    # seeding on first reset is reproducible
    a, b = make("gym:Pendulum-v1", num_envs=2, seed=11), make("gym:Pendulum-v1", num_envs=2, seed=11)
    torch.testing.assert_close(a.reset(), b.reset())
    with pytest.raises(ValueError):
        make_gym("CartPole-v1", num_envs=2, vectorization_mode="vector_entry_point",
                 autoreset_mode="same_step")


@pytest.mark.parametrize("packed", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.uint8])
def test_packed_step_upload_matches_the_arrays(dtype, packed):
    """One staging buffer carries a whole step (rewards, flags, obs, final obs) in one
    copy; with an odd env count the obs block needs padding to stay aligned."""
    from rllib_fast.envs.upload import StepUploader

    n, shape = 3, (2, 2)
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(n, *shape)) if dtype == np.float32 else rng.integers(0, 255, (n, *shape))
    final = obs[::-1].copy()
    rew = rng.normal(size=n)
    term, trunc, valid = np.array([1, 0, 0], bool), np.array([0, 1, 0], bool), np.array([1, 1, 0], bool)
    up = StepUploader(n, shape, torch.device("cpu"), obs_dtype=dtype, packed=packed)
    tdt = torch.float32 if dtype == np.float32 else torch.uint8
    for v in (valid, None):
        o, fo, r, te, tr, vv = up.step(obs, final, rew, term, trunc, v)
        torch.testing.assert_close(o, torch.as_tensor(obs.astype(dtype)))
        torch.testing.assert_close(fo, torch.as_tensor(final.astype(dtype)))
        torch.testing.assert_close(r, torch.as_tensor(rew, dtype=torch.float32))
        assert o.dtype == fo.dtype == tdt
        assert te.tolist() == term.tolist() and tr.tolist() == trunc.tolist()
        assert vv is None if v is None else vv.tolist() == valid.tolist()
    o, fo, *_ = up.step(obs, obs, rew, term, trunc, None)   # nobody ended: final_obs is obs
    assert fo is o
    first = up.obs(obs)
    up.obs(final)  # staging reuse must not alias earlier results
    torch.testing.assert_close(first, torch.as_tensor(obs.astype(dtype)))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_adapter_on_cuda_matches_cpu():
    dev, cpu = make("gym:CartPole-v1", num_envs=4, device="cuda", seed=2), make("gym:CartPole-v1", num_envs=4, seed=2)
    validate_env(make("gym:CartPole-v1", num_envs=4, device="cuda", seed=2), num_steps=30)
    torch.testing.assert_close(dev.reset().cpu(), cpu.reset())
    rng = np.random.default_rng(0)
    for _ in range(60):
        a = torch.as_tensor(_random_actions(rng, 4))
        x, y = dev.step(a.cuda()), cpu.step(a)
        for f in ("obs", "final_obs", "reward", "terminated", "truncated", "valid"):
            torch.testing.assert_close(getattr(x, f).cpu(), getattr(y, f))


@pytest.mark.skipif(importlib.util.find_spec("mujoco") is None, reason="mujoco not installed")
def test_gym_prefix_mujoco():
    env = make("gym:HalfCheetah-v5", num_envs=2, seed=0)
    validate_env(env, num_steps=3)
    assert env.max_episode_steps == 1000


# ---------------------------------------------------------------------------
# TensorVecEnv -> gymnasium VectorEnv
# ---------------------------------------------------------------------------
def _vector_sanity(venv, steps=30, seed=0):
    """env_checker-style checks for a numpy gymnasium VectorEnv."""
    assert isinstance(venv, gym.vector.VectorEnv)
    n = venv.num_envs
    assert venv.observation_space == gym.vector.utils.batch_space(venv.single_observation_space, n)
    assert venv.action_space == gym.vector.utils.batch_space(venv.single_action_space, n)
    assert venv.unwrapped is venv and venv.render_mode is None
    assert isinstance(venv.metadata["autoreset_mode"], AutoresetMode)
    obs, info = venv.reset(seed=seed)
    assert isinstance(info, dict)
    check_obs(obs, venv.observation_space, "reset")
    venv.action_space.seed(seed)
    for _ in range(steps):
        obs, rew, term, trunc, info = venv.step(venv.action_space.sample())
        check_obs(obs, venv.observation_space, "step")
        assert isinstance(rew, np.ndarray) and rew.shape == (n,) and np.issubdtype(rew.dtype, np.floating)
        for f in (term, trunc):
            assert isinstance(f, np.ndarray) and f.shape == (n,) and f.dtype == np.bool_
        assert not (term & trunc).any()
        assert isinstance(info, dict)
    # seed determinism
    o1, _ = venv.reset(seed=123)
    o2, _ = venv.reset(seed=123)
    assert data_equivalence(o1, o2)


def test_reverse_next_step_manual_reset_exact():
    n, T = 3, 5
    inner = _ManualCounterEnv(n, max_episode_steps=T, autoreset=False)
    venv = TensorVecEnvToGym(inner)
    assert venv.metadata["autoreset_mode"] is AutoresetMode.NEXT_STEP
    obs, _ = venv.reset()
    np.testing.assert_array_equal(obs, np.zeros((n, 3), np.float32))
    rng = np.random.default_rng(0)
    actions = [rng.integers(0, 2, n) for _ in range(40)]
    ref = _counter_reference(n, T, actions, "next")
    pending = np.zeros(n, bool)
    for a, (r_obs, _, r_rew, r_term, r_trunc) in zip(actions, ref):
        obs, rew, term, trunc, info = venv.step(a)
        assert obs.dtype == np.float32 and rew.dtype == np.float32
        np.testing.assert_array_equal(obs, r_obs)
        np.testing.assert_array_equal(rew, r_rew)
        np.testing.assert_array_equal(term, r_term)
        np.testing.assert_array_equal(trunc, r_trunc)
        # reset rows: reward 0, flags False, obs = reset obs, extras masked out
        assert (rew[pending] == 0).all() and not (term | trunc)[pending].any()
        assert (obs[pending, :2] == 0).all()
        np.testing.assert_array_equal(info["_pos"], ~pending)
        pending = term | trunc
    assert sum(r[3].sum() for r in ref) > 0 and sum(r[4].sum() for r in ref) > 0
    venv.close()
    assert inner.closed and venv.closed


def test_reverse_same_step_fallback_for_generic_env():
    n, T = 3, 5
    with pytest.warns(UserWarning, match="SAME_STEP"):
        venv = TensorVecEnvToGym(_AutoCounterEnv(n, max_episode_steps=T))
    assert venv.metadata["autoreset_mode"] is AutoresetMode.SAME_STEP
    with pytest.raises(ValueError, match="NEXT_STEP"):
        TensorVecEnvToGym(_AutoCounterEnv(n), autoreset_mode="next_step")
    venv.reset()
    rng = np.random.default_rng(1)
    actions = [rng.integers(0, 2, n) for _ in range(30)]
    for a, (r_obs, r_final, r_rew, r_term, r_trunc) in zip(actions, _counter_reference(n, T, actions, "same")):
        obs, rew, term, trunc, info = venv.step(a)
        np.testing.assert_array_equal(obs, r_obs)
        np.testing.assert_array_equal(rew, r_rew)
        np.testing.assert_array_equal(term, r_term)
        np.testing.assert_array_equal(trunc, r_trunc)
        done = term | trunc
        if done.any():
            np.testing.assert_array_equal(info["_final_obs"], done)
            for i in np.flatnonzero(done):
                np.testing.assert_array_equal(info["final_obs"][i], r_final[i])
        else:
            assert "final_obs" not in info
    # a manual-reset env can present SAME_STEP on request, same results
    venv2 = TensorVecEnvToGym(_ManualCounterEnv(n, max_episode_steps=T, autoreset=False),
                              autoreset_mode=AutoresetMode.SAME_STEP)
    venv2.reset()
    for a, (r_obs, *_r) in zip(actions, _counter_reference(n, T, actions, "same")):
        np.testing.assert_array_equal(venv2.step(a)[0], r_obs)


def test_reverse_passthrough_of_next_step_gym_source():
    """gym NEXT_STEP -> tensor -> gym reproduces the original env exactly."""
    n, seed = 4, 9
    raw = gym.make_vec("CartPole-v1", n)
    venv = TensorVecEnvToGym(make("gym:CartPole-v1", num_envs=n))
    assert venv.metadata["autoreset_mode"] is AutoresetMode.NEXT_STEP
    o_raw, _ = raw.reset(seed=seed)
    o, _ = venv.reset(seed=seed)
    np.testing.assert_array_equal(o, o_raw)
    rng = np.random.default_rng(3)
    for _ in range(100):
        a = _random_actions(rng, n)
        for x, y in zip(venv.step(a)[:4], raw.step(a)[:4]):
            np.testing.assert_array_equal(x, y)


def test_reverse_passthrough_of_late_resetting_sources_that_say_so():
    """Sources that reset one step late declare ``autoreset_mode = NEXT_STEP`` --
    Isaac Gym VecTasks, and vector envs over late-resetting sources -- so the
    bridge passes their straddling steps through as NEXT_STEP (RLlib skips
    them) instead of presenting SAME_STEP with the terminal obs as the reset
    obs and a bogus first transition after it."""
    from rllib_fast.envs.parallel import SerialVecEnv

    ig = make("isaacgym:PointReach", num_envs=2, seed=0, isolated=False,
              task_class="rllib_fast.envs.standins.vectask:PointReachTask", cfg={"env": {"episodeLength": 3}})
    serial = SerialVecEnv(lambda n, seed: make("gym:CartPole-v1", num_envs=n, seed=seed), num_envs=4,
                          num_workers=2, seed=0)
    for env in (ig, serial):
        with warnings.catch_warnings():
            warnings.simplefilter("error")   # no "presents SAME_STEP" warning
            venv = TensorVecEnvToGym(env)
        assert venv.metadata["autoreset_mode"] is AutoresetMode.NEXT_STEP
    venv = TensorVecEnvToGym(ig)
    venv.reset(seed=0)
    out = [venv.step(np.zeros((2, 2), np.float32)) for _ in range(3)]
    assert out[1][3].all()                          # time-out at step 2 ...
    assert (out[2][1] == 0).all() and not out[2][2].any() and not out[2][3].any()  # ... the reset step


@pytest.mark.parametrize("name", ["CartPole", "Pendulum"])
def test_reverse_builtin_sanity(name):
    venv = rllib_env_creator(name)({"num_envs": 4})
    assert venv.metadata["autoreset_mode"] is AutoresetMode.NEXT_STEP
    assert venv.tensor_env.autoreset is False
    _vector_sanity(venv, steps=60)


def test_reverse_builtin_cartpole_matches_tensor_env():
    """The wrapper follows the underlying task's trajectory: for every env the
    episode is identical to driving the tensor env directly, and the NEXT_STEP
    reset step returns that env's reset obs with reward 0."""
    n, seed = 6, 4
    inner = make("CartPole", num_envs=n, seed=seed, autoreset=False)
    ref = make("CartPole", num_envs=n, seed=seed, autoreset=False)
    venv = TensorVecEnvToGym(inner)
    obs, _ = venv.reset()
    np.testing.assert_array_equal(obs, ref.reset().numpy())
    rng = np.random.default_rng(5)
    pending = torch.zeros(n, dtype=torch.bool)
    n_done = 0
    for _ in range(150):
        a = _random_actions(rng, n)
        obs, rew, term, trunc, _ = venv.step(a)
        out = ref.step(torch.as_tensor(a))
        exp_obs, exp_rew = out.final_obs.clone(), out.reward.clone()
        exp_term, exp_trunc = out.terminated.clone(), out.truncated.clone()
        if pending.any():
            exp_obs[pending] = ref.reset_idx(pending)[pending]
            exp_rew[pending] = 0
            exp_term[pending] = exp_trunc[pending] = False
        np.testing.assert_array_equal(obs, exp_obs.numpy())
        np.testing.assert_array_equal(rew, exp_rew.numpy())
        np.testing.assert_array_equal(term, exp_term.numpy())
        np.testing.assert_array_equal(trunc, exp_trunc.numpy())
        # terminal obs (not a reset obs) on the done step; reset obs after it
        assert ((np.abs(obs[term, 0]) > CARTPOLE_X) | (np.abs(obs[term, 2]) > CARTPOLE_THETA)).all()
        assert (np.abs(obs[pending.numpy()]) <= 0.05).all()
        pending = torch.as_tensor(term | trunc)
        n_done += int(pending.sum())
    assert n_done > 0


def test_rllib_env_creator_picklable_and_registration():
    creator = pickle.loads(pickle.dumps(rllib_env_creator("CartPole")))
    venv = creator({"num_envs": 5, "seed": 0})
    assert venv.num_envs == 5 and venv.tensor_env.autoreset is False
    # a task kwarg from env_config reaches the tensor env
    venv = creator({"num_envs": 2, "max_episode_steps": 7})
    assert venv.tensor_env.max_episode_steps == 7
    register_rllib_gym_envs()
    from ray.tune.registry import ENV_CREATOR, _global_registry

    for name in ("CartPole", "Pendulum"):
        assert _global_registry.contains(ENV_CREATOR, RLLIB_GYM_PREFIX + name)


# ---------------------------------------------------------------------------
# RLlib's own PPO through the reverse bridge
# ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ray_session():
    import ray

    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    if started:
        ray.shutdown()


def test_rllib_ppo_runs_on_reverse_bridge(ray_session):
    from ray.rllib.algorithms.ppo import PPOConfig

    register_rllib_gym_envs()
    config = (
        PPOConfig()
        .environment(RLLIB_GYM_PREFIX + "CartPole")
        .env_runners(num_env_runners=0, num_envs_per_env_runner=8,
                     gym_env_vectorize_mode="vector_entry_point")
        .training(train_batch_size_per_learner=256, minibatch_size=64, num_epochs=1)
        .debugging(seed=0)
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        algo = config.build_algo() if hasattr(config, "build_algo") else config.build()
    try:
        runner = algo.env_runner
        assert isinstance(runner.env.unwrapped, TensorVecEnvToGym)
        assert runner.env.unwrapped.num_envs == 8
        result = algo.train()
        er = result["env_runners"]
        assert er["num_env_steps_sampled_lifetime"] > 0
        assert er["num_episodes"] > 0
        assert 8 <= er["episode_return_min"] <= er["episode_return_mean"] <= er["episode_return_max"] <= 500
        # the runner records episodes correctly: reset obs first, terminal obs last
        episodes = runner.sample(num_timesteps=400)
        # (chunks continuing episodes from `train()` have t_started > 0)
        done = [e for e in episodes if e.is_done and e.t_started == 0]
        assert done
        for e in done:
            o = np.asarray(e.get_observations())
            assert len(e) >= 8 and len(o) == len(e) + 1
            assert (np.abs(o[0]) <= 0.05).all()
            if e.is_terminated:
                assert abs(o[-1][0]) > CARTPOLE_X or abs(o[-1][2]) > CARTPOLE_THETA
            assert float(np.sum(e.get_rewards())) == len(e)
    finally:
        algo.stop()


def test_to_gym_rejects_invalid_discrete_actions():
    """-1 (which would wrap around in the source's indexing) and 0.7 (which a cast makes 0)
    are refused with one line naming the values; valid integer actions (also as floats 1.0) pass."""
    env = TensorVecEnvToGym(make("CartPole", num_envs=4, device="cpu"), autoreset_mode="same_step")
    env.reset(seed=0)
    env.step(np.array([0, 1, 1, 0]))
    env.step(np.array([0.0, 1.0, 1.0, 0.0]))
    for bad, shown in ((np.array([0, -1, 1, 0]), "[-1.0]"), (np.array([0.7, 1, 0, 1]), "[0.7]"),
                       (np.array([0, 2, 1, 0]), "[2.0]"), (np.array([0, 1]), "shape (2,)")):
        with pytest.raises(ValueError) as info:
            env.step(bad)
        msg = str(info.value)
        assert "invalid discrete actions" in msg and shown in msg and "\n" not in msg, msg
