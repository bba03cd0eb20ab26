"""What a restore leaves does not depend on what the algorithm held before it.

A checkpoint is restored into fresh builds (a resumed run) and into live ones
that trained on (a rollback, Tune's PBT exploit with reused actors). Both must
end in the same state: a replay the checkpoint did not save is empty, the run's
own seed goes on (evaluation seeds its episodes from it), and a wrapper around a
source that cannot restore says so.
"""
import pytest
import torch

from rllib_fast.algorithms.dqn import FastDQNConfig
from rllib_fast.algorithms.population import PopDQNConfig
from rllib_fast.algorithms.ppo import FastPPOConfig
from rllib_fast.algorithms.pql import DDPGNConfig, PQLConfig
from rllib_fast.envs.variable_time import VariableTimeCreator


def _dqn():
    return FastDQNConfig().environment("CartPole", num_envs=4).training(
        learning_starts=32, rollout_length=8, n_step=3, buffer_size=4096, batch_size=16,
        prioritized_replay=True, checkpoint_replay=False)


def _pop_dqn():
    return PopDQNConfig().environment("CartPole").training(
        population_size=2, num_envs_per_member=2, hidden_sizes=[16], buffer_size=512, batch_size=16,
        learning_starts=8, rollout_length=4, fused_update_steps=2, checkpoint_replay=False)


def _ddpgn():
    return DDPGNConfig().environment("Pendulum", num_envs=4).training(
        steps_per_iteration=5, batch_size=32, learning_starts=32, warmup_steps=2, hidden_sizes=[16, 16],
        checkpoint_replay=False)


def _pql():
    return PQLConfig().environment("Pendulum", num_envs=4).training(
        batch_size=32, learning_starts=32, warmup_steps=2, hidden_sizes=[16, 16], checkpoint_replay=False)


def _stored(algo) -> list:
    """Transitions each replay of ``algo`` holds."""
    if hasattr(algo, "v") and algo.v is not None:      # PQL family: the learners' replays
        return [len(algo.v.replay)] + ([len(algo.p.replay)] if algo.p.replay is not algo.v.replay else [])
    return [len(algo.replay)]


@pytest.mark.parametrize("make", [_dqn, _pop_dqn, _ddpgn, _pql], ids=["FastDQN", "PopDQN", "DDPGN", "PQL"])
def test_a_checkpoint_without_replay_restores_an_empty_replay_into_a_live_run(tmp_path, make):
    algo = make().debugging(seed=0).build_algo()
    try:
        algo.train(); algo.train()
        path = algo.save_to_path(str(tmp_path / "c"))
        algo.train(); algo.train()
        assert all(n > 0 for n in _stored(algo))
        algo.restore_from_path(path)              # a rollback: the replay it filled since is not the checkpoint's
        assert _stored(algo) == [0] * len(_stored(algo))
        fresh = make().debugging(seed=0).build_algo()
        try:
            fresh.restore_from_path(path)
            assert _stored(fresh) == _stored(algo)
        finally:
            fresh.stop()
        algo.train()                              # refills, and learns again once learning_starts is stored
        assert all(n > 0 for n in _stored(algo))
    finally:
        algo.stop()


def test_prioritized_replay_restarts_its_priorities_when_emptied(tmp_path):
    algo = _dqn().debugging(seed=0).build_algo()
    try:
        algo.train(); algo.train()
        path = algo.save_to_path(str(tmp_path / "c"))
        algo.train()
        algo.restore_from_path(path)
        assert float(algo.replay.tree.tree.sum()) == 0.0 and float(algo.replay.max_priority) == 1.0
    finally:
        algo.stop()


def test_a_restored_run_keeps_its_seed_and_evaluates_the_same_episodes(tmp_path):
    # seed=None: each build draws its own seed; the checkpoint's goes on after a restore
    cfg = FastPPOConfig().environment("CartPole", num_envs=8).training(rollout_length=16).evaluation(
        evaluation_interval=1, evaluation_duration=8)
    algo = cfg.build_algo()
    try:
        algo.train()
        path = algo.save_to_path(str(tmp_path / "c"))
        expected = algo.train()["evaluation"]["env_runners"]["episode_return_mean"]
        fresh = cfg.build_algo()
        try:
            fresh.restore_from_path(path)
            assert fresh.seed == algo.seed
            assert fresh.train()["evaluation"]["env_runners"]["episode_return_mean"] == expected
        finally:
            fresh.stop()
    finally:
        algo.stop()


def test_variable_time_around_an_unrestorable_source_keeps_the_live_episodes(tmp_path):
    env = VariableTimeCreator("gym:CartPole-v1", 0.0, 0.0, "constant")
    cfg = FastDQNConfig().environment(env, num_envs=4).training(
        learning_starts=32, rollout_length=8, checkpoint_replay=True).debugging(seed=0)
    algo = cfg.build_algo()
    try:
        algo.train(); algo.train()
        assert algo.env.get_state() is None       # the wrapper says what its source says
        path = algo.save_to_path(str(tmp_path / "c"))
        last = (algo.replay.t - 1) % algo.replay.C
        fresh = cfg.build_algo()
        try:
            live_obs = fresh.obs.clone()
            fresh.restore_from_path(path)
            assert torch.equal(fresh.obs, live_obs)              # not the checkpoint's observation
            assert fresh.replay.data["done"][last].all()         # in-flight episodes end at the checkpoint
        finally:
            fresh.stop()
    finally:
        algo.stop()


def test_evaluate_checkpoint_seeds_its_episodes_from_the_seed_asked_for(tmp_path):
    # the restore takes the checkpoint's seed; `rllib-fast evaluate --seed S` must still evaluate under S
    from rllib_fast.tune.run import evaluate_checkpoint

    algo = FastPPOConfig().environment("Pendulum", num_envs=4).training(rollout_length=8).debugging(
        seed=5).build_algo()
    try:
        algo.train()
        path = algo.save_to_path(str(tmp_path / "c"))
    finally:
        algo.stop()
    ret = {s: evaluate_checkpoint(path, episodes=3, seed=s, progress=False)["episode_return_mean"]
           for s in (None, 1, 2)}
    assert ret[1] != ret[2] and ret[1] != ret[None]
    assert evaluate_checkpoint(path, episodes=3, seed=1, progress=False)["episode_return_mean"] == ret[1]
