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
        backend="thread", batch_size=32, learning_starts=32, warmup_steps=2, hidden_sizes=[16, 16], checkpoint_replay=False)


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


def test_a_restore_keeps_the_configs_optimizer_settings_and_the_checkpoints_moments(tmp_path):
    # PBT mutating rmsprop_eps / adam_eps / weight_decay: the exploited trial ran with the
    # donor checkpoint's values (torch restores each param group's settings) while its config
    # and report showed the mutated ones
    from rllib_fast.algorithms.a2c import FastA2CConfig
    from rllib_fast.algorithms.population import PopTD3Config

    def a2c(eps):
        return FastA2CConfig().environment("CartPole", num_envs=4).training(
            rollout_length=8, optimizer="rmsprop", rmsprop_eps=eps, rmsprop_alpha=0.99).debugging(seed=0)

    algo = a2c(1e-5).build_algo()
    try:
        algo.train()
        path = algo.save_to_path(str(tmp_path / "a2c"))
        moments = {k: v.clone() for k, v in algo.optimizer.state_dict()["state"][0].items()}
    finally:
        algo.stop()
    mutated = a2c(1e-2).build_algo()
    try:
        mutated.restore_from_path(path)
        group = mutated.optimizer.param_groups[0]
        assert group["eps"] == 1e-2 and group["alpha"] == 0.99
        for k, v in mutated.optimizer.state_dict()["state"][0].items():
            assert torch.equal(v, moments[k]), k
    finally:
        mutated.stop()

    def pop(eps):
        return PopTD3Config().environment("Pendulum").training(
            population_size=2, hidden_sizes=[16, 16], batch_size=8, learning_starts=20, rollout_length=10,
            buffer_size=500, adam_eps=eps).debugging(seed=0)

    algo = pop(1e-8).build_algo()
    try:
        algo.train(); algo.train()
        path = algo.save_to_path(str(tmp_path / "pop"))
        steps = algo.actor_opt.step_count.clone()
    finally:
        algo.stop()
    mutated = pop(1e-2).build_algo()
    try:
        mutated.restore_from_path(path)
        assert torch.allclose(mutated.actor_opt.eps, torch.full_like(mutated.actor_opt.eps, 1e-2))
        assert torch.equal(mutated.actor_opt.step_count, steps)
    finally:
        mutated.stop()
