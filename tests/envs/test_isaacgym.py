"""Isaac Gym adapter (rllib_fast/envs/isaacgym.py) against the VecTask stand-in.

Isaac Gym itself cannot be installed here (Python <= 3.8 + NVIDIA GPU); the
stand-in reproduces VecTask's base semantics (see
rllib_fast/envs/standins/vectask.py) and these tests pin the adapter's handling
of them: one-step-late resets in both orderings, time-outs, aliasing, clipping,
spaces, states, seeding, the import-order and one-sim-per-process errors.
"""
import rllib_fast  # noqa: F401  (registers everything first)

import gymnasium as gym
import numpy as np
import pytest
import torch

from rllib_fast.envs import make, validate_env
from rllib_fast.envs import isaacgym as ig
from rllib_fast.envs.standins import vectask as sv

TASK = "rllib_fast.envs.standins.vectask:PointReachTask"
ORDERINGS = ["post_physics_step", "pre_physics_step"]


def make_env(n=8, episode_length=12, reset_in="post_physics_step", seed=0, **kw):
    return make("isaacgym:PointReach", num_envs=n, seed=seed, task_class=TASK,
                cfg={"env": {"episodeLength": episode_length, "resetIn": reset_in}}, **kw)


class OneSimTask(sv.PointReachTask):
    ONE_SIM_PER_PROCESS = True


@pytest.fixture(autouse=True)
def _release_emulated_sim():
    yield
    sv.release_sim()


def rollout(env, steps, gen):
    """Half the envs push steadily in a fixed direction (they leave the box and
    terminate), the other half act randomly (they time out)."""
    obs = env.reset()
    out = []
    push = torch.sign(torch.rand((env.num_envs, 2), generator=gen) - 0.5)
    steady = (torch.arange(env.num_envs) % 2 == 0).unsqueeze(-1)
    for _ in range(steps):
        a = torch.where(steady, push, torch.rand((env.num_envs, 2), generator=gen) * 2 - 1)
        s = env.step(a)
        out.append((obs, s))
        obs = s.obs
    return out


# ---------------------------------------------------------------------------
# the stand-in is faithful to VecTask (what the adapter must cope with)
# ---------------------------------------------------------------------------
def test_standin_has_vectask_base_semantics():
    task = sv.PointReachTask(sv.make_cfg(num_envs=4, episode_length=5), "cpu", "cpu", -1, True)
    assert task.reset_buf.dtype == torch.long and bool((task.reset_buf == 1).all())
    assert not task.reset()["obs"].any()  # reset() does not reset the sim: obs_buf never computed
    obs_dict, rew, reset, extras = task.step(task.zero_actions())
    assert rew is task.rew_buf and reset is task.reset_buf  # live buffers, aliased
    assert obs_dict["obs"] is not task.obs_buf and obs_dict["states"].shape == (4, 8)
    assert obs_dict is task.obs_dict and extras is task.extras
    before = rew.clone()
    task.step(torch.ones(4, 2))
    assert not torch.equal(rew, before)  # overwritten in place by the next step
    for _ in range(3):
        _, _, reset, extras = task.step(task.zero_actions())
    assert bool(reset.all()) and bool(extras["time_outs"].all())  # progress 4 >= episodeLength - 1
    big = task.step(torch.full((4, 2), 100.0))  # clipActions = 1 clamps inside step
    assert float(task.actions.abs().max()) <= 1.0 and big is not None


# ---------------------------------------------------------------------------
# contract conversion
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("reset_in", ORDERINGS)
def test_no_valid_transition_straddles_a_reset(reset_in):
    env = make_env(n=16, episode_length=30, reset_in=reset_in)
    validate_env(env)
    gen = torch.Generator().manual_seed(0)
    data = rollout(env, 80, gen)
    n_term = n_trunc = 0
    target_prev = None
    prev_done = torch.zeros(16, dtype=torch.bool)
    for t, (obs, s) in enumerate(data):
        target_next = s.extras["states"][:, 6:8]  # the episode's target (constant within an episode)
        if target_prev is not None:
            same = (target_prev == target_next).all(-1)
            # valid transitions stay inside one episode; invalid ones are exactly those after a done
            assert bool(same[s.valid].all()), f"a valid transition straddles a reset at t={t}"
            assert torch.equal(~s.valid, prev_done)
            assert not bool(same[~s.valid].any())
        assert not bool((s.terminated & s.truncated).any())
        assert bool((s.reward[~s.valid] == 0).all())
        assert not bool((s.done & ~s.valid).any())
        torch.testing.assert_close(s.final_obs, s.obs)  # terminal obs is what the source returns
        prev_done = s.done.clone()
        target_prev = target_next.clone()
        n_term += int(s.terminated.sum())
        n_trunc += int(s.truncated.sum())
    assert n_term > 0 and n_trunc > 0  # both kinds happened


@pytest.mark.parametrize("reset_in", ORDERINGS)
def test_time_outs_are_truncations_and_bootstrap(reset_in):
    from rllib_fast.core.rollout import compute_gae

    env = make_env(n=4, episode_length=6, reset_in=reset_in)
    obs = env.reset()
    steps = [env.step(torch.zeros(4, 2)) for _ in range(6)]  # zero force: nobody leaves the box
    trunc_t = [t for t, s in enumerate(steps) if s.truncated.any()]
    # progress_buf counts from 0 after a post_physics_step reset, from 1 after a pre_physics_step
    # one (the reset precedes that step's own increment); time-out when progress >= 6 - 1
    k = 4 if reset_in == "post_physics_step" else 3
    assert trunc_t == [k]
    s = steps[k]
    assert bool(s.truncated.all()) and not s.terminated.any()
    # the final observation is the terminal one of the same episode (not a reset obs)
    torch.testing.assert_close(s.final_obs[:, 4:6], s.extras["states"][:, 6:8] - s.final_obs[:, 0:2])
    assert not steps[k + 1].valid.any()
    # GAE bootstraps from V(final_obs) at the truncation
    T, N = k + 1, 4
    rewards = torch.stack([x.reward for x in steps[:T]])
    values = torch.zeros(T, N)
    next_values = torch.ones(T, N) * 10.0
    term = torch.stack([x.terminated for x in steps[:T]])
    done = torch.stack([x.done for x in steps[:T]])
    adv, _ = compute_gae(rewards, values, next_values, term, done, 0.9, 1.0)
    torch.testing.assert_close(adv[k], rewards[k] + 0.9 * 10.0)
    del obs


def test_aliased_buffers_cannot_corrupt_stored_steps():
    env = make_env(n=8, episode_length=5)
    env.reset()
    held, snap = [], []
    for _ in range(12):
        s = env.step(torch.rand(8, 2) * 2 - 1)
        held.append(s)  # stored without cloning, as a replay/rollout reference would be
        fields = (s.obs, s.reward, s.terminated, s.truncated, s.valid, s.extras["states"])
        snap.append([x.clone() for x in fields])
    for s, ref in zip(held, snap):
        for a, b in zip((s.obs, s.reward, s.terminated, s.truncated, s.valid, s.extras["states"]), ref):
            assert torch.equal(a, b)
    # and the raw source does alias: its returned reward changes under our feet
    task = env.task
    _, rew, reset, _ = task.step(task.zero_actions())
    kept = rew.clone()
    task.step(torch.ones(8, 2))
    assert rew is task.rew_buf and not torch.equal(rew, kept)


def test_obs_is_copied_when_a_task_returns_its_buffer():
    class BufferObsTask(sv.PointReachTask):
        def step(self, actions):
            obs_dict, rew, reset, extras = super().step(actions)
            obs_dict["obs"] = self.obs_buf  # a task that skips VecTask's clamp-copy
            return obs_dict, rew, reset, extras

    task = BufferObsTask(sv.make_cfg(num_envs=4), "cpu", "cpu", -1, True)
    env = make("isaacgym:X", num_envs=4, seed=0, task=task)
    o0 = env.reset().clone()
    first = env.step(torch.ones(4, 2)).obs
    kept = first.clone()
    env.step(torch.ones(4, 2))
    assert torch.equal(first, kept) and not torch.equal(first, o0)


def test_spaces_clipping_states_and_first_reset():
    env = make_env(n=4, clip_actions=0.5)
    assert isinstance(env.single_observation_space, gym.spaces.Box)
    space = env.single_observation_space
    assert space.dtype == np.float32 and float(space.high[0]) == 5.0
    assert env.single_action_space == gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    assert env.single_state_space.shape == (8,) and env.max_episode_steps == 12
    obs = env.reset()
    assert obs.abs().sum() > 0 and env.states.shape == (4, 8)  # a real post-reset observation
    s = env.step(torch.full((4, 2), 3.0))
    # Step.extras: per-env tensors only (states, true_objective); scalar extras aside
    assert set(s.extras) == {"states", "true_objective"} and s.extras["true_objective"].shape == (4,)
    assert env.scalar_extras["consecutive_successes"].dim() == 0
    assert float(env.task.actions.abs().max()) == 0.5  # our clip_actions, tighter than the task's 1.0
    env2 = make_env(n=4, clip_obs=0.25)
    env2.reset()
    s = env2.step(torch.ones(4, 2))
    assert float(s.obs.abs().max()) <= 0.25 and float(env2.single_observation_space.high[0]) == 0.25


def test_seeding_before_creation_is_reproducible():
    def run(seed):
        env = make_env(n=4, seed=seed)
        obs = env.reset()
        return torch.cat([obs] + [env.step(torch.ones(4, 2)).obs for _ in range(3)])
    torch.testing.assert_close(run(7), run(7), rtol=0, atol=0)
    assert not torch.equal(run(7), run(8))


def test_randomize_episode_progress_spreads_time_outs():
    env = make_env(n=32, episode_length=20)
    env.reset()
    env.randomize_episode_progress()
    ends = [int(env.step(torch.zeros(32, 2)).truncated.sum()) for _ in range(20)]
    assert max(ends) < 32 and sum(ends) >= 32  # spread, and everyone timed out once


# ---------------------------------------------------------------------------
# process constraints
# ---------------------------------------------------------------------------
def test_isaacgym_name_resolves_with_clear_error_without_isaacgym():
    with pytest.raises(ig.IsaacGymNotInstalledError, match="Python <= 3.8.*python_executable"):
        make("isaacgym:Ant", num_envs=4)


def test_import_order_error_when_torch_came_first(monkeypatch):
    monkeypatch.setattr(ig, "_check_installed", lambda *a, **k: None)  # pretend isaacgym is installed
    with pytest.raises(ig.IsaacGymImportOrderError, match="torch was imported before isaacgym.*isolated"):
        make("isaacgym:Ant", num_envs=4, isolated=False)
    with pytest.raises(ValueError, match="isolated.*allowed"):
        make("isaacgym:Ant", num_envs=4, isolated="yes")


def test_second_sim_in_one_process_is_a_clear_error():
    first = make("isaacgym:X", num_envs=2, task_class=OneSimTask, cfg={})
    with pytest.raises(ig.IsaacGymSimExistsError, match="one sim per process.*isolated=True"):
        make("isaacgym:X", num_envs=2, task_class=OneSimTask, cfg={})
    # what the simulator itself would say, had the adapter not stopped it
    with pytest.raises(RuntimeError, match="Foundation object exists already"):
        OneSimTask(sv.make_cfg(num_envs=2), "cpu", "cpu", -1, True)
    first.close()
    sv.release_sim()
    make("isaacgym:X", num_envs=2, task_class=OneSimTask, cfg={}).close()


def test_prebuilt_instance_and_num_envs_mismatch():
    task = sv.PointReachTask(sv.make_cfg(num_envs=3), "cpu", "cpu", -1, True)
    env = make("isaacgym:PointReach", num_envs=3, task=task)
    assert env.task is task and env.num_envs == 3
    with pytest.raises(ValueError, match="num_envs=3 but num_envs=5"):
        make("isaacgym:PointReach", num_envs=5, task=task)
    with pytest.raises(ValueError, match="cannot be isolated"):
        make("isaacgym:PointReach", num_envs=3, task=task, isolated=True)


def test_simulator_sources_register_lazily():
    """The registry knows isaacgym:/isaaclab:/envpool: without importing any simulator."""
    import subprocess
    import sys

    code = ("import sys\n"
            "from rllib_fast.envs.registry import is_known\n"
            "assert is_known('isaacgym:Ant') and is_known('isaaclab:Isaac-Ant-Direct-v0') "
            "and is_known('envpool:Ant-v4')\n"
            "print(*[m in sys.modules for m in ('isaacgym', 'isaacgymenvs', 'isaaclab', 'envpool', 'mujoco')])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False"] * 5
