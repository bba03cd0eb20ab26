"""Image sources for the DQN family: FrameStack, MinAtar, Atari (ale-py)."""
from __future__ import annotations

import importlib.util

import gymnasium as gym
import numpy as np
import pytest
import torch

from rllib_fast.envs import Step, TensorVecEnv, validate_env
from rllib_fast.envs.frame_stack import FrameStack
from rllib_fast.envs.registry import make

HAS_MINATAR = importlib.util.find_spec("minatar") is not None
HAS_ALE = importlib.util.find_spec("ale_py") is not None
needs_minatar = pytest.mark.skipif(not HAS_MINATAR, reason="minatar not installed (the `atari` extra)")
needs_ale = pytest.mark.skipif(not HAS_ALE, reason="ale-py cannot be imported (the `atari` extra)")


@pytest.fixture(autouse=True)
def _one_intra_op_thread():
    """These tests run many tiny torch ops; on a busy 2-core machine each parallel
    op can wait milliseconds on an OpenMP barrier. One thread keeps them fast."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


# ---------------------------------------------------------------------------
# a tiny deterministic image env
# ---------------------------------------------------------------------------
class Tiny(TensorVecEnv):
    """Env ``i`` shows frame value ``1 + t + 50*i`` (all pixels, channel ``c``
    adds ``20*c``) and ends after ``3 + i`` steps (terminated). ``late=True``
    resets one step late: the done step shows the terminal frame and the next
    step (``valid=False``) the reset frame."""

    def __init__(self, n=3, c=1, late=False):
        self.num_envs, self.device, self.late = n, torch.device("cpu"), late
        self.single_observation_space = gym.spaces.Box(0, 255, (2, 2, c), np.uint8)
        self.single_action_space = gym.spaces.Discrete(2)
        self.c = c
        self.lengths = torch.arange(n) + 3
        self.t = torch.zeros(n, dtype=torch.long)
        self.pending = torch.zeros(n, dtype=torch.bool)

    def frame(self, t):
        v = 1 + t + 50 * torch.arange(self.num_envs)
        v = v.view(-1, 1, 1, 1) + 20 * torch.arange(self.c).view(1, 1, 1, -1)
        return v.expand(-1, 2, 2, -1).to(torch.uint8).contiguous()

    def reset(self, seed=None):
        self.t.zero_()
        self.pending.zero_()
        return self.frame(self.t)

    def step(self, actions):
        n = self.num_envs
        if self.late:
            valid = ~self.pending
            self.t = torch.where(self.pending, torch.zeros_like(self.t), self.t + 1)
            done = valid & (self.t >= self.lengths)
            self.pending = done
            obs = self.frame(self.t)
            return Step(obs=obs, reward=torch.ones(n), terminated=done, truncated=torch.zeros(n, dtype=torch.bool),
                        final_obs=obs, valid=valid, extras={"x": self.t.clone()})
        self.t = self.t + 1
        done = self.t >= self.lengths
        final = self.frame(self.t)
        self.t = torch.where(done, torch.zeros_like(self.t), self.t)
        return Step(obs=self.frame(self.t), reward=torch.ones(n), terminated=done,
                    truncated=torch.zeros(n, dtype=torch.bool), final_obs=final, extras={"x": self.t.clone()})


def vals(x):
    """Per-env channel values of a stacked obs ``[N, 2, 2, k*C]`` (pixel 0,0)."""
    return x[:, 0, 0].tolist()


def act(env):
    return torch.zeros(env.num_envs, dtype=torch.long)


@pytest.mark.parametrize("masked", [False, True])
def test_frame_stack_order_reset_and_final_obs(masked):
    env = FrameStack(Tiny(), 4)
    env._sync_free = not masked  # masked=True exercises the branch-free (CUDA) path on CPU
    assert env.single_observation_space.shape == (2, 2, 4)
    validate_env(env)
    obs = env.reset()
    assert obs.dtype == torch.uint8 and obs.shape == (3, 2, 2, 4)
    assert vals(obs) == [[0, 0, 0, 1], [0, 0, 0, 51], [0, 0, 0, 101]]
    s1 = env.step(act(env))
    assert vals(s1.obs) == [[0, 0, 1, 2], [0, 0, 51, 52], [0, 0, 101, 102]]
    s2 = env.step(act(env))
    assert vals(s2.obs) == [[0, 1, 2, 3], [0, 51, 52, 53], [0, 101, 102, 103]]
    s3 = env.step(act(env))  # env 0 ends (length 3)
    assert s3.terminated.tolist() == [True, False, False]
    assert vals(s3.final_obs) == [[1, 2, 3, 4], [51, 52, 53, 54], [101, 102, 103, 104]]
    assert vals(s3.obs) == [[0, 0, 0, 1], [51, 52, 53, 54], [101, 102, 103, 104]]
    s4 = env.step(act(env))  # env 1 ends (length 4)
    assert vals(s4.final_obs) == [[0, 0, 1, 2], [52, 53, 54, 55], [102, 103, 104, 105]]
    assert vals(s4.obs) == [[0, 0, 1, 2], [0, 0, 0, 51], [102, 103, 104, 105]]
    assert s4.extras["x"].tolist() == [1, 0, 4]
    # rows that did not end: final_obs equals obs
    assert torch.equal(s4.final_obs[[0, 2]], s4.obs[[0, 2]])


@pytest.mark.parametrize("masked", [False, True])
def test_frame_stack_repeat_pad_and_channels(masked):
    env = FrameStack(Tiny(n=2, c=2), 3, pad="repeat")
    env._sync_free = not masked
    obs = env.reset()
    assert obs.shape == (2, 2, 2, 6)
    assert vals(obs)[0] == [1, 21, 1, 21, 1, 21]  # frame (c0, c1) repeated, channels stay grouped
    env.step(act(env))
    s = env.step(act(env))
    assert vals(s.obs)[0] == [1, 21, 2, 22, 3, 23]
    s = env.step(act(env))  # env 0 ends at t=3
    assert vals(s.final_obs)[0] == [2, 22, 3, 23, 4, 24]
    assert vals(s.obs)[0] == [1, 21, 1, 21, 1, 21]
    assert vals(s.obs)[1] == [52, 72, 53, 73, 54, 74]


def test_frame_stack_no_aliasing():
    env = FrameStack(Tiny(), 4)
    first = env.reset()
    kept = [first, first.clone()]
    outs = []
    for _ in range(9):
        s = env.step(act(env))
        outs.append((s.obs, s.obs.clone(), s.final_obs, s.final_obs.clone()))
    assert torch.equal(kept[0], kept[1])
    for o, oc, f, fc in outs:
        assert torch.equal(o, oc) and torch.equal(f, fc)
        assert o.data_ptr() != env._ring.data_ptr()


@pytest.mark.parametrize("masked", [False, True])
def test_frame_stack_late_reset_valid_passthrough(masked):
    inner = Tiny(late=True)
    env = FrameStack(inner, 4, late_reset=True)
    env._sync_free = not masked
    env.reset()
    for _ in range(2):
        s = env.step(act(env))
    s = env.step(act(env))  # env 0's done step: terminal obs, stack not reset
    assert s.terminated.tolist() == [True, False, False]
    assert s.valid.tolist() == [True, True, True]
    assert vals(s.obs)[0] == [1, 2, 3, 4] and torch.equal(s.obs, s.final_obs)
    s = env.step(act(env))  # straddling step for env 0: reset frame, valid False
    assert s.valid.tolist() == [False, True, True]
    assert vals(s.obs)[0] == [0, 0, 0, 1]
    assert vals(s.final_obs)[0] == [0, 0, 0, 1]  # invalid row: final_obs = obs
    assert vals(s.obs)[1] == [52, 53, 54, 55] and torch.equal(s.final_obs[1:], s.obs[1:])
    assert s.extras["x"].tolist() == [0, 4, 4]


def test_frame_stack_auto_late_reset_from_autoreset_mode():
    from gymnasium.vector import AutoresetMode

    inner = Tiny(late=True)
    inner.autoreset_mode = AutoresetMode.NEXT_STEP
    assert FrameStack(inner, 2).late_reset
    assert not FrameStack(Tiny(), 2).late_reset
    with pytest.raises(ValueError, match="channels-last"):
        FrameStack(make("CartPole", num_envs=2), 4)


# ---------------------------------------------------------------------------
# MinAtar
# ---------------------------------------------------------------------------
@needs_minatar
def test_minatar_breakout_contract():
    env = make("minatar:breakout", num_envs=8, seed=0)
    validate_env(env, num_steps=5)
    obs = env.reset()
    assert obs.dtype == torch.uint8 and obs.shape == (8, 10, 10, 4)
    assert env.single_action_space == gym.spaces.Discrete(3)  # minimal action set
    assert env.max_episode_steps == 27_000
    assert int(obs.max()) == 1
    for name, c in [("space_invaders", 6), ("freeway", 7), ("seaquest", 10), ("asterix", 4)]:
        e = make(f"minatar:{name}", num_envs=2, seed=0)
        assert e.reset().shape == (2, 10, 10, c)
    with pytest.raises(ValueError, match="unknown MinAtar game"):
        make("minatar:pong", num_envs=1)


@needs_minatar
def test_minatar_autoreset_final_obs_and_truncation():
    env = make("minatar:breakout", num_envs=8, seed=1)
    env.reset()
    seen_term = False
    for _ in range(300):
        s = env.step(env.sample_actions())
        done = s.done
        assert not bool(s.truncated.any())
        keep = ~done
        assert torch.equal(s.final_obs[keep], s.obs[keep])
        if bool(s.terminated.any()):
            seen_term = True
            i = int(s.terminated.nonzero()[0])
            o, f = s.obs[i], s.final_obs[i]
            # fresh breakout start: paddle at (9, 4), three full brick rows, ball on row 3
            assert o[9, 4, 0] == 1 and int(o[:, :, 0].sum()) == 1
            assert int(o[1:4, :, 3].sum()) == 30 and int(o[:, :, 3].sum()) == 30
            assert int(o[3, :, 1].sum()) == 1
            # terminal frame: the ball reached the bottom row
            assert int(f[9, :, 1].sum()) == 1
    assert seen_term

    env = make("minatar:breakout", num_envs=4, seed=0, max_episode_steps=5, sticky_action_prob=0.0)
    env.reset()
    for t in range(5):
        s = env.step(torch.zeros(4, dtype=torch.long))
    assert s.truncated.all() and not s.terminated.any()  # a time limit is never a termination
    assert not torch.equal(s.final_obs, s.obs)


@needs_minatar
def test_minatar_seeding_and_state():
    def rollout(seed, steps=60):
        env = make("minatar:space_invaders", num_envs=4, seed=seed)
        g = torch.Generator().manual_seed(123)
        out = [env.reset()]
        for _ in range(steps):
            s = env.step(env.sample_actions(generator=g))
            out += [s.obs, s.reward, s.done]
        return out, env

    a, _ = rollout(7)
    b, _ = rollout(7)
    c, _ = rollout(8)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not all(torch.equal(x, y) for x, y in zip(a, c))
    # envs get distinct streams
    env = make("minatar:breakout", num_envs=16, seed=3)
    obs = env.reset()
    assert len({tuple(o[3, :, 1].tolist()) for o in obs}) == 2  # both ball starts occur

    # get_state / set_state resume bit-exactly
    env = make("minatar:asterix", num_envs=3, seed=5)
    env.reset()
    acts = [env.sample_actions() for _ in range(20)]
    for x in acts[:10]:
        env.step(x)
    st = env.get_state()
    ref = [env.step(x).obs for x in acts[10:]]
    env.set_state(st)
    assert all(torch.equal(r, env.step(x).obs) for r, x in zip(ref, acts[10:]))


# ---------------------------------------------------------------------------
# Atari
# ---------------------------------------------------------------------------
def hand_crop(raw: np.ndarray) -> np.ndarray:
    """Rows 1, 3, ..., 207 and columns 0, 2, ..., 158 of the 210x160 frame."""
    rows = np.array([1 + 2 * i for i in range(104)])
    cols = np.array([2 * j for j in range(80)])
    assert rows[-1] == 207 and cols[-1] == 158
    return raw[:, rows][:, :, cols]


@needs_ale
def test_atari_breakout_contract_and_random_steps():
    env = make("atari:Breakout", num_envs=4, seed=0)
    assert env.single_observation_space.shape == (104, 80, 4)
    assert env.single_observation_space.dtype == np.uint8
    assert env.max_episode_steps == 27_000
    validate_env(env, num_steps=3)
    obs = env.reset()
    assert obs.shape == (4, 104, 80, 4) and obs.dtype == torch.uint8
    assert int(obs[..., :3].max()) == 0 and int(obs[..., 3].max()) > 0  # zero-padded start
    ended = 0
    for _ in range(200):
        s = env.step(env.sample_actions())
        assert s.obs.shape == (4, 104, 80, 4) and s.obs.dtype == torch.uint8
        raw = s.extras["raw_reward"]
        assert raw.dtype == torch.float32 and raw.shape == (4,)
        assert torch.equal(s.reward, raw.clamp(-1, 1))
        assert torch.equal(s.extras["real_done"], s.done)
        ended += int(s.done.sum())
        keep = ~s.done
        assert torch.equal(s.final_obs[keep], s.obs[keep])
    assert s.valid is None
    with pytest.raises(ValueError, match="unknown Atari game"):
        make("atari:Breakoutt", num_envs=1)


@needs_ale
def test_atari_crop_downsample_matches_hand_computation():
    env = make("atari:Breakout", num_envs=2, seed=1, keep_raw=True)
    obs = env.reset()
    raw = env.last_raw_obs
    assert raw.shape == (2, 210, 160)
    np.testing.assert_array_equal(obs[..., -1].numpy(), hand_crop(raw))
    for _ in range(5):
        s = env.step(env.sample_actions())
    np.testing.assert_array_equal(s.obs[..., -1].numpy(), hand_crop(env.last_raw_obs))
    assert float(s.obs[..., -1].float().std()) > 1.0

    # the raw frame is ALE's own greyscale screen (no resize interpolation)
    import ale_py

    frames = make("atari:Breakout", num_envs=1, seed=0, noop_max=0, frame_stack=1)
    first = frames.reset()
    ale = ale_py.ALEInterface()
    ale.setInt("random_seed", 0)
    ale.setFloat("repeat_action_probability", 0.0)
    ale.loadROM(ale_py.roms.get_rom_path("breakout"))
    ale.reset_game()
    screen = ale.getScreenGrayscale()
    np.testing.assert_array_equal(first[0, ..., 0].numpy(), hand_crop(screen[None])[0])


@needs_ale
def test_atari_time_limit_and_episodic_life():
    env = make("atari:Breakout", num_envs=2, seed=0, max_episode_steps=20)
    env.reset()
    for _ in range(20):
        s = env.step(env.sample_actions())
    assert s.truncated.all() and not s.terminated.any()
    assert s.extras["real_done"].all()

    env = make("atari:Breakout", num_envs=4, seed=0, episodic_life=True, frame_stack=1)
    env.reset()
    for _ in range(400):
        s = env.step(env.sample_actions())
        life_lost = s.terminated & ~s.extras["real_done"]
        if bool(life_lost.any()):
            i = int(life_lost.nonzero()[0])
            assert torch.equal(s.final_obs[i], s.obs[i])  # the game goes on, no reset
            break
    else:
        pytest.fail("no life lost in 400 random Breakout steps")


def test_image_sources_register_lazily():
    """Importing the registry / the source modules must not import minatar or ale_py."""
    import subprocess
    import sys

    code = ("import sys\n"
            "from rllib_fast.envs.registry import _ensure_builtin_sources, is_known\n"
            "_ensure_builtin_sources()\n"
            "import rllib_fast.envs.atari, rllib_fast.envs.minatar, rllib_fast.envs.frame_stack\n"
            "assert is_known('minatar:breakout') and is_known('atari:Breakout')\n"
            "print('minatar' in sys.modules, 'ale_py' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False"]
