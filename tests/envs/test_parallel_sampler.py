"""Multi-process samplers (rllib_fast.envs.parallel): the contract, parallel ==
serial transitions for the same seeds and actions (sync and alternating groups),
autoreset/final_obs/valid/extras passthrough, no aliasing of shared memory,
failure reporting and clean shutdown.

Every env here starts real worker processes, so the envs are module-scoped
and reseeded per test, and most use the forkserver context (see ``CTX``).
The stand-in env below lives at module level so spawned workers can import it.
"""
from __future__ import annotations

import functools
import gc
import importlib.util
import multiprocessing as mp
import os
import pickle
import signal
import time

import gymnasium as gym
import numpy as np
import pytest
import torch

from rllib_fast.envs import Step, TensorVecEnv, validate_env
from rllib_fast.envs.alternating import (AlternatingVecEnv, alternating_rollout, alternating_steps, concat_groups,
                                         split_groups)
from rllib_fast.envs.parallel import NamedEnvFactory, ParallelEnvCreator, ParallelVecEnv, SerialVecEnv
from rllib_fast.core.seeding import worker_seed
from rllib_fast.envs.workers import WorkerError

HAS_MINATAR = importlib.util.find_spec("minatar") is not None


# ---------------------------------------------------------------------------
# a tiny deterministic CPU source (importable by the workers)
# ---------------------------------------------------------------------------
class CountEnv(TensorVecEnv):
    """Random walk per env, fully determined by (seed, actions): env ``i`` draws
    from its own ``numpy`` Generator seeded with word ``i`` of
    ``SeedSequence(seed)``. obs float32 ``[pos, t, uid]``; terminates when
    ``|pos| >= 4``, truncates at ``max_steps``; same-step autoreset; ``valid``
    is False every 5th step of an episode (to check the passthrough); extras
    ``raw`` (float32) and ``t`` (int64). ``fail_at``: raise at that step."""

    def __init__(self, num_envs, seed=None, max_steps=6, fail_at=None):
        self.num_envs = int(num_envs)
        self.device = torch.device("cpu")
        self.single_observation_space = gym.spaces.Box(-100, 100, (3,), np.float32)
        self.single_action_space = gym.spaces.Discrete(3)
        self.max_episode_steps = max_steps
        self.fail_at = fail_at
        self._seed, self._seeded, self._steps = seed, False, 0
        self.rngs = [np.random.default_rng() for _ in range(self.num_envs)]
        self.pos = np.zeros(self.num_envs)
        self.t = np.zeros(self.num_envs, dtype=np.int64)
        self.uid = np.zeros(self.num_envs)

    def _obs(self):
        return torch.tensor(np.stack([self.pos, self.t, self.uid], 1), dtype=torch.float32)

    def _reset_row(self, i):
        self.pos[i] = self.rngs[i].integers(-2, 3)
        self.uid[i] = self.rngs[i].integers(0, 1000)
        self.t[i] = 0

    def reset(self, seed=None):
        if seed is None and not self._seeded:
            seed = self._seed
        self._seeded = True
        if seed is not None:
            words = np.random.SeedSequence(int(seed)).generate_state(self.num_envs)
            self.rngs = [np.random.default_rng(int(w)) for w in words]
        for i in range(self.num_envs):
            self._reset_row(i)
        return self._obs()

    def step(self, actions):
        self._steps += 1
        if self.fail_at is not None and self._steps >= self.fail_at:
            raise RuntimeError("boom in CountEnv.step")
        a = np.asarray(actions).reshape(-1)
        n = self.num_envs
        reward = np.zeros(n, dtype=np.float32)
        for i in range(n):
            self.pos[i] += (a[i] - 1) + self.rngs[i].integers(-1, 2)
            reward[i] = self.pos[i] + self.rngs[i].random()
        self.t += 1
        term = np.abs(self.pos) >= 4
        trunc = (self.t >= self.max_episode_steps) & ~term
        valid = torch.from_numpy(self.t % 5 != 0)
        extras = {"raw": torch.from_numpy(reward * 2), "t": torch.from_numpy(self.t.copy())}
        final = self._obs()
        for i in np.flatnonzero(term | trunc):
            self._reset_row(i)
        return Step(obs=self._obs(), reward=torch.from_numpy(reward), terminated=torch.from_numpy(term),
                    truncated=torch.from_numpy(trunc), final_obs=final, valid=valid, extras=extras)

    def get_state(self):
        return {"rngs": [r.bit_generator.state for r in self.rngs], "pos": self.pos.copy(),
                "t": self.t.copy(), "uid": self.uid.copy()}

    def set_state(self, state):
        if "rngs" not in state:
            raise ValueError("bad state for CountEnv")
        for r, s in zip(self.rngs, state["rngs"]):
            r.bit_generator.state = s
        self.pos[:], self.t[:], self.uid[:] = state["pos"], state["t"], state["uid"]


MAKE = functools.partial(CountEnv, max_steps=6)
# the correctness tests fork their workers from one forkserver (torch/rllib_fast
# imported once instead of once per spawned worker); the failure and shutdown
# tests use the default, spawn
CTX = "forkserver"
FIELDS = ("obs", "reward", "terminated", "truncated", "final_obs", "valid")


def assert_same_step(a: Step, b: Step, where=""):
    for f in FIELDS:
        x, y = getattr(a, f), getattr(b, f)
        assert (x is None) == (y is None), f"{where}{f}: {x} vs {y}"
        if x is not None:
            assert x.dtype == y.dtype and torch.equal(x, y), f"{where}{f}: {x} vs {y}"
    assert sorted(a.extras) == sorted(b.extras), where
    for k in a.extras:
        assert torch.equal(a.extras[k], b.extras[k]), f"{where}extras[{k}]"


def action_seq(T, n, seed=0, high=3):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, high, (n,), generator=g) for _ in range(T)]


def live_children(pids):
    """Processes among ``pids`` still alive (zombies count: they were not reaped)."""
    alive = {p.pid for p in mp.active_children()}  # also reaps finished children
    out = []
    for pid in pids:
        try:
            os.kill(pid, 0)
            out.append(pid)
        except ProcessLookupError:
            continue
    return sorted(set(out) | (alive & set(pids)))


# ---------------------------------------------------------------------------
# fixtures: one sync env (2 workers) and one alternating env (2 groups x 2 workers)
# ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def par():
    env = ParallelVecEnv(MAKE, num_envs=6, num_workers=2, seed=5, affinity="auto", step_timeout=60,
                         context=CTX)
    first = env.reset()  # the constructor seeds
    yield env, first
    env.close()


@pytest.fixture(scope="module")
def alt():
    # spin_s/worker_spin_s: exercise the spin-then-block waits too
    env = AlternatingVecEnv(MAKE, num_envs=8, num_workers=4, seed=5, step_timeout=60, context=CTX,
                            spin_s=1e-4, worker_spin_s=1e-4)
    yield env
    env.close()


# ---------------------------------------------------------------------------
# sync sampler
# ---------------------------------------------------------------------------
def test_contract_and_layout(par):
    env, _ = par
    validate_env(env)
    assert env.num_envs == 6 and env.num_workers == 2 and env.envs_per_worker == 3
    assert env.num_groups == 1 and env.group_slices == [slice(0, 6)]
    assert env.single_action_space == gym.spaces.Discrete(3) and env.obs_shape == (3,)
    assert env.max_episode_steps == 6
    assert len(set(env.worker_pids)) == 2 and os.getpid() not in env.worker_pids
    if hasattr(os, "sched_getaffinity") and len(os.sched_getaffinity(0)) >= 2:
        cpus = sorted(os.sched_getaffinity(0))
        assert [sorted(os.sched_getaffinity(pid)) for pid in env.worker_pids] == [[cpus[0]], [cpus[1]]]


def test_parallel_equals_serial_for_same_seeds_and_actions(par):
    env, first = par
    ref = SerialVecEnv(MAKE, num_envs=6, num_workers=2, seed=5)
    assert torch.equal(first, ref.reset())  # constructor seeds: worker_seed(5, w)
    # and reset(seed) reseeds every worker with worker_seed(seed, w)
    assert torch.equal(env.reset(seed=11), ref.reset(seed=11))
    ended = {"term": 0, "trunc": 0, "invalid": 0}
    for t, a in enumerate(action_seq(40, 6)):
        s, r = env.step(a), ref.step(a)
        assert_same_step(s, r, f"t={t} ")
        ended["term"] += int(s.terminated.sum())
        ended["trunc"] += int(s.truncated.sum())
        ended["invalid"] += int((~s.valid).sum())
        done = s.done
        # autoreset passthrough: ended rows carry the terminal obs, the others equal obs
        assert torch.equal(s.final_obs[~done], s.obs[~done])
        if done.any():
            assert (s.final_obs[done, 1] > 0).all() and (s.obs[done, 1] == 0).all()
        assert s.extras["t"].dtype == torch.int64 and s.extras["raw"].dtype == torch.float32
    assert ended["term"] > 0 and ended["trunc"] > 0 and ended["invalid"] > 0, ended


def test_episode_clocks_are_randomised_in_the_workers():
    """The on-policy start-state decorrelation randomises the source's episode
    clocks (``randomize_episode_progress``); a simulator in worker processes
    gets the call too, with the same clocks as in-process stepping. Pendulum
    never terminates, so every end is a time-out: without the randomisation
    all 8 envs would time out together at step 200."""
    from rllib_fast.envs.parallel import NamedEnvFactory

    make = NamedEnvFactory("Pendulum")
    env = ParallelVecEnv(make, num_envs=8, num_workers=2, seed=3, step_timeout=60, context=CTX)
    ref = SerialVecEnv(make, num_envs=8, num_workers=2, seed=3)
    try:
        env.reset(), ref.reset()
        env.randomize_episode_progress()
        ref.randomize_episode_progress()
        first_end = torch.full((8,), -1)
        for t in range(200):
            a = torch.zeros(8, 1)
            s, r = env.step(a), ref.step(a)
            assert torch.equal(s.truncated, r.truncated) and torch.equal(s.obs, r.obs)
            first_end = torch.where((first_end < 0) & s.truncated, torch.tensor(t), first_end)
        assert (first_end >= 0).all() and len(set(first_end.tolist())) > 1, first_end
    finally:
        env.close()
        ref.close()


def test_worker_seeds_differ_and_are_reproducible():
    assert worker_seed(None, 0) is None
    assert worker_seed(3, 0) == worker_seed(3, 0) != worker_seed(3, 1) != worker_seed(4, 1)


def test_returned_tensors_do_not_alias_shared_memory(par):
    env, _ = par
    kept = [(env.reset(seed=1), None)]
    for a in action_seq(12, 6, seed=3):
        s = env.step(a)
        kept.append((s, {f: getattr(s, f).clone() for f in ("obs", "final_obs", "reward", "terminated")}))
    for s, copy in kept[1:]:
        for f, c in copy.items():
            t = getattr(s, f)
            assert torch.equal(t, c), f  # not overwritten by later steps
            assert not any(np.shares_memory(t.numpy(), buf) for buf in env._v.values()), f
    assert not any(np.shares_memory(kept[0][0].numpy(), buf) for buf in env._v.values())


def test_state_roundtrip(par):
    env, _ = par
    env.reset(seed=2)
    acts = action_seq(8, 6, seed=4)
    state = env.get_state()
    first = [env.step(a) for a in acts]
    env.set_state(state)
    again = [env.step(a) for a in acts]
    for x, y in zip(first, again):
        assert_same_step(x, y)


def test_bad_actions_are_rejected_in_the_main_process(par):
    env, _ = par
    env.reset(seed=0)
    with pytest.raises(ValueError, match="expected 6 actions"):
        env.step(torch.zeros(5, dtype=torch.long))
    with pytest.raises(ValueError, match="out of range"):
        env.step(torch.full((6,), 3))
    env.step(torch.zeros(6, dtype=torch.long))  # still usable


# ---------------------------------------------------------------------------
# alternating groups
# ---------------------------------------------------------------------------
def test_alternating_layout_and_independent_groups(alt):
    assert alt.num_groups == 2 and alt.workers_per_group == 2 and alt.group_num_envs == 4
    assert alt.group_slices == [slice(0, 4), slice(4, 8)]
    assert alt.group_workers == [[0, 1], [2, 3]]
    ref = SerialVecEnv(MAKE, num_envs=8, num_workers=4, seed=5, num_groups=2)
    alt.reset(seed=7), ref.reset(seed=7)
    a = torch.ones(4, dtype=torch.long)
    # B can be sent first and collected last; each group's barrier only involves its own workers
    alt.step_async_group(1, a)
    alt.step_async_group(0, a)
    with pytest.raises(RuntimeError, match="already has a step in flight"):
        alt.step_async_group(0, a)
    sb = alt.wait_group(1)
    alt.step_async_group(1, a)  # B runs again while A is still outstanding
    sa = alt.wait_group(0)
    sb2 = alt.wait_group(1)
    with pytest.raises(RuntimeError, match="no step in flight"):
        alt.wait_group(0)
    ref.step_async_group(0, a), ref.step_async_group(1, a)
    assert_same_step(sa, ref.wait_group(0))
    assert_same_step(sb, ref.wait_group(1))
    ref.step_async_group(1, a)
    assert_same_step(sb2, ref.wait_group(1))


def test_alternating_rollout_equals_serial(alt):
    T, n = 30, 8
    acts = action_seq(T, n, seed=9)
    calls = {0: 0, 1: 0}

    def policy(obs, g):
        a = acts[calls[g]][alt.group_slices[g]]
        calls[g] += 1
        return a, {"logp": torch.full((obs.shape[0],), float(g)), "seen": obs[:, 0].clone()}

    groups = alternating_rollout(alt, policy, T, seed=21)
    assert calls == {0: T, 1: T}
    assert len(groups) == 2 and groups[0].obs.shape == (T, 4, 3) and groups[1].actions.shape == (T, 4)
    both = concat_groups(groups)
    assert both.obs.shape == (T, n, 3) and both.next_obs.shape == (n, 3)
    assert torch.equal(both.policy_extras["seen"], both.obs[..., 0])

    ref = SerialVecEnv(MAKE, num_envs=n, num_workers=4, seed=5)
    obs = ref.reset(seed=21)
    for t in range(T):
        s = ref.step(acts[t])
        assert torch.equal(both.obs[t], obs), t
        assert torch.equal(both.actions[t], acts[t])
        got = Step(both.obs[t + 1] if t + 1 < T else both.next_obs, both.reward[t], both.terminated[t],
                   both.truncated[t], both.final_obs[t], both.valid[t],
                   {k: v[t] for k, v in both.extras.items()})
        assert_same_step(got, s, f"t={t} ")
        obs = s.obs
    assert both.terminated.any() and both.truncated.any()

    # the TensorVecEnv step() of the alternating env gives the same transitions too
    alt.reset(seed=21)
    for t in range(T):
        s = alt.step(acts[t])
        assert torch.equal(s.final_obs, both.final_obs[t]) and torch.equal(s.reward, both.reward[t])


def test_alternating_steps_continue_and_work_on_plain_envs(alt):
    # continuing from next_obs == one long rollout
    acts = action_seq(10, 8, seed=1)
    ctr = {0: 0, 1: 0}

    def policy(obs, g):
        ctr[g] += 1
        return acts[ctr[g] - 1][alt.group_slices[g]]

    long = concat_groups(alternating_rollout(alt, policy, 10, seed=3))
    ctr.update({0: 0, 1: 0})
    g1 = alternating_rollout(alt, policy, 4, obs=split_groups(alt, alt.reset(seed=3)))
    g2 = alternating_rollout(alt, policy, 6, obs=[g.next_obs for g in g1])
    joined = torch.cat([concat_groups(g1).final_obs, concat_groups(g2).final_obs])
    assert torch.equal(joined, long.final_obs)
    # a plain TensorVecEnv is one group driven through step()
    plain = CountEnv(8, seed=5)
    steps = list(alternating_steps(plain, lambda o, g: torch.ones(o.shape[0], dtype=torch.long), 3))
    assert [g for g, *_ in steps] == [0, 0, 0]


# ---------------------------------------------------------------------------
# MinAtar, the real CPU source
# ---------------------------------------------------------------------------
@pytest.mark.skipif(not HAS_MINATAR, reason="minatar not installed (the `atari` extra)")
def test_minatar_parallel_equals_serial():
    # built the way an algorithm builds it: config.environment(ParallelEnvCreator(...)) gets the env context
    creator = ParallelEnvCreator("minatar:breakout", num_workers=2, context=CTX, step_timeout=60)
    env = creator({"num_envs": 4, "device": "cpu", "seed": 3, "max_episode_steps": 8})
    try:
        assert isinstance(env, ParallelVecEnv) and env.num_workers == 2
        assert env.obs_shape == (10, 10, 4) and env.single_action_space.n == 3 and env.max_episode_steps == 8
        ref = SerialVecEnv(NamedEnvFactory("minatar:breakout", max_episode_steps=8), num_envs=4, num_workers=2,
                           seed=3)
        assert torch.equal(env.reset(seed=8), ref.reset(seed=8))
        ended = truncs = 0
        for t, a in enumerate(action_seq(150, 4, seed=2)):
            s, r = env.step(a), ref.step(a)
            assert_same_step(s, r, f"t={t} ")
            assert s.valid is None and s.extras == {} and s.obs.dtype == torch.uint8
            if not s.done.any():
                assert s.final_obs is s.obs  # as in MinAtarVecEnv itself
            ended += int(s.done.sum())
            truncs += int(s.truncated.sum())
        assert ended > 0 and truncs > 0
        # (contract check last: MinAtar's sticky "last action" survives reset(seed),
        # so random steps before the comparison would make it differ)
        validate_env(env, num_steps=3)
    finally:
        env.close()


# ---------------------------------------------------------------------------
# failures and shutdown
# ---------------------------------------------------------------------------
def test_worker_exception_is_raised_with_traceback_and_gc_reaps():
    env = ParallelVecEnv(functools.partial(CountEnv, fail_at=2), num_envs=2, num_workers=1, seed=0,
                         step_timeout=60, context=CTX)
    pids = list(env.worker_pids)
    env.reset()
    env.step(torch.zeros(2, dtype=torch.long))
    with pytest.raises(WorkerError, match="boom in CountEnv.step") as info:
        env.step(torch.zeros(2, dtype=torch.long))
    assert "Traceback" in str(info.value)
    with pytest.raises(WorkerError, match="unusable"):
        env.step(torch.zeros(2, dtype=torch.long))
    del env, info
    gc.collect()
    assert not live_children(pids)


def test_dead_worker_is_detected_and_close_leaves_no_children():
    env = ParallelVecEnv(MAKE, num_envs=4, num_workers=2, seed=0, poll_s=0.05, step_timeout=60)
    pids = list(env.worker_pids)
    env.reset()
    env.step(torch.zeros(4, dtype=torch.long))
    os.kill(pids[1], signal.SIGKILL)
    t0 = time.monotonic()
    with pytest.raises(WorkerError, match=r"worker 1 .*died with exit code -9"):
        env.step(torch.zeros(4, dtype=torch.long))
    assert time.monotonic() - t0 < 10
    env.close()
    env.close()  # idempotent
    assert env.closed
    with pytest.raises(WorkerError):
        env.reset()
    assert not live_children(pids)


def test_argument_errors_start_nothing():
    with pytest.raises(ValueError, match="must be divisible by `num_workers`"):
        ParallelVecEnv(MAKE, num_envs=5, num_workers=2)
    with pytest.raises(ValueError, match="must be divisible by `num_groups`"):
        AlternatingVecEnv(MAKE, num_envs=6, num_workers=3)
    with pytest.raises(ValueError, match="context"):
        ParallelVecEnv(MAKE, num_envs=2, num_workers=1, context="thread")
    before = {p.pid for p in mp.active_children()}
    with pytest.raises((AttributeError, TypeError, pickle.PicklingError), match="pickle"):  # spawn pickles it
        ParallelVecEnv(lambda n, s: CountEnv(n, s), num_envs=2, num_workers=1)
    assert {p.pid for p in mp.active_children()} <= before


def test_critic_states_cross_the_process_boundary():
    """An asymmetric source's ``single_state_space`` and current ``states`` reach the
    main process (after reset and every step), so a simulator in worker processes
    (``ParallelEnvCreator``, HTS's ``executor_processes``) keeps the critic on its
    privileged states. The stand-in's states are its observation (position,
    velocity, target - position) plus the target; it draws from torch's global
    RNG, as Isaac Gym tasks do, so no in-process reference replays its draws."""
    from rllib_fast.envs.parallel import NamedEnvFactory

    make = NamedEnvFactory("isaacgym:PointReach", task_class="rllib_fast.envs.standins.vectask:PointReachTask",
                           cfg={"env": {"episodeLength": 5}})
    env = ParallelVecEnv(make, num_envs=6, num_workers=2, seed=3, step_timeout=60, context=CTX)
    ref = SerialVecEnv(make, num_envs=6, num_workers=2, seed=3)
    try:
        assert env.single_state_space == ref.single_state_space and env.single_state_space.shape == (8,)
        obs = env.reset()
        assert torch.equal(env.states[:, :6], obs) and env.states[:, 6:].abs().sum() > 0
        gen = torch.Generator().manual_seed(0)
        ends = 0
        for _ in range(12):   # through two episode ends: the new episodes' states
            s = env.step(torch.rand(6, 2, generator=gen) * 2 - 1)
            ends += int((s.terminated | s.truncated).sum())
            assert torch.equal(env.states, s.extras["states"]) and torch.equal(env.states[:, :6], s.obs)
        assert ends > 0
        states = env.states
        states.zero_()          # a copy: the mirror in shared memory is untouched
        assert env.states.abs().sum() > 0
    finally:
        env.close()
        ref.close()


def test_worker_activity_counts_the_seconds_each_worker_ran_commands(par):
    env, _ = par
    before = env.worker_activity()
    assert set(before) == {"busy_s", "cpu_s"} and before["busy_s"].shape == (2,)
    for a in action_seq(20, 6):
        env.step(a)
    after = env.worker_activity()
    assert (after["busy_s"] > before["busy_s"]).all()      # every worker stepped
    assert (after["cpu_s"] >= before["cpu_s"]).all()
    after["busy_s"][:] = -1.0                               # a copy, not the shared counters
    assert (env.worker_activity()["busy_s"] >= 0).all()
