"""Restoring with a source that cannot restore its own state (gymnasium here;
envpool, Isaac and mjlab alike): the env keeps running its own episodes, so
the restored algorithm keeps the live observation and running returns, and
every episode the checkpoint had in flight ends at the checkpoint (replays and
n-step windows cut there as truncations), instead of pairing the checkpoint's
observation with an unrelated next one."""
import torch

from rllib_fast.algorithms.dqn import FastDQNConfig
from rllib_fast.algorithms.pql import DDPGNConfig
from rllib_fast.algorithms.ppo import FastPPOConfig


def _restore_into_fresh(cfg, path):
    """A fresh build (its env just reset) restored from ``path``; also returns its
    observation and running returns before the restore."""
    algo = cfg.build_algo()
    obs, running = algo.obs.clone(), algo.tracker.in_flight()
    algo.restore_from_path(path)
    return algo, obs, running


def test_dqn_keeps_the_live_episodes_and_cuts_the_replay(tmp_path):
    cfg = (FastDQNConfig().environment("gym:CartPole-v1", num_envs=4)
           .training(learning_starts=32, rollout_length=8, checkpoint_replay=True).debugging(seed=0))
    algo = cfg.build_algo()
    algo.train(); algo.train()
    assert algo.env.get_state() is None            # the premise: this source cannot restore
    last = (algo.replay.t - 1) % algo.replay.C
    assert not algo.replay.data["done"][last].all()  # some episode is in flight at the checkpoint
    path = algo.save_to_path(str(tmp_path / "c"))

    restored, live_obs, live_running = _restore_into_fresh(cfg, path)
    assert torch.equal(restored.obs, live_obs)       # not the checkpoint's observation
    for k, v in live_running.items():
        assert torch.equal(getattr(restored.tracker, k), v)
    assert restored.replay.t == algo.replay.t        # the replay itself was restored ...
    assert restored.replay.data["done"][last].all()  # ... with every in-flight episode ended
    # as truncations: the terminations stay what they were (the cut steps bootstrap)
    assert torch.equal(restored.replay.data["terminated"][last], algo.replay.data["terminated"][last])
    r = restored.train()
    assert r["num_env_steps_sampled_lifetime"] > 0
    algo.stop(); restored.stop()


def test_restorable_source_still_resumes_its_episodes(tmp_path):
    cfg = FastDQNConfig().environment("CartPole", num_envs=4).training(learning_starts=32, rollout_length=8) \
        .debugging(seed=0)
    algo = cfg.build_algo()
    algo.train()
    path = algo.save_to_path(str(tmp_path / "c"))
    restored, _, _ = _restore_into_fresh(cfg, path)
    assert torch.equal(restored.obs, algo.obs)
    last = (algo.replay.t - 1) % algo.replay.C
    assert torch.equal(restored.replay.data["done"][last], algo.replay.data["done"][last])


def test_ddpgn_cuts_its_n_step_windows(tmp_path):
    cfg = (DDPGNConfig().environment("gym:Pendulum-v1", num_envs=4)
           .training(steps_per_iteration=5, batch_size=32, learning_starts=32, warmup_steps=2)
           .debugging(seed=0))
    algo = cfg.build_algo()
    algo.train()
    path = algo.save_to_path(str(tmp_path / "c"))
    restored, live_obs, _ = _restore_into_fresh(cfg, path)
    agg = restored.actor.aggregator
    assert torch.equal(restored.obs, live_obs)
    assert agg.t == algo.actor.aggregator.t and agg.buf["done"][(agg.t - 1) % agg.n].all()
    restored.train()
    algo.stop(); restored.stop()


def test_ppo_keeps_the_live_observation(tmp_path):
    cfg = FastPPOConfig().environment("gym:CartPole-v1", num_envs=4).training(rollout_length=16).debugging(seed=0)
    algo = cfg.build_algo()
    algo.train()
    path = algo.save_to_path(str(tmp_path / "c"))
    restored, live_obs, _ = _restore_into_fresh(cfg, path)
    assert torch.equal(restored.obs, live_obs) and not torch.equal(restored.obs, algo.obs)
    restored.train()
    algo.stop(); restored.stop()


def test_population_cuts_its_replay(tmp_path):
    from rllib_fast.algorithms.population import PopTD3Config

    cfg = (PopTD3Config().environment("gym:Pendulum-v1")
           .training(population_size=2, hidden_sizes=[16, 16], batch_size=8, learning_starts=20, rollout_length=10,
                     buffer_size=500, pbt_init="config", fused_update_steps=5)
           .debugging(seed=0))
    algo = cfg.build_algo()
    algo.train()
    path = algo.save_to_path(str(tmp_path / "c"))
    fresh = cfg.build_algo()
    live_obs, live_len = fresh.obs.clone(), fresh.returns.len.clone()
    fresh.restore_from_path(path)
    restored = fresh
    buf = restored.replay.buf
    assert torch.equal(restored.obs, live_obs)
    # fitness: the members' running episode lengths/returns are the live episodes', not the checkpoint's
    assert torch.equal(restored.returns.len, live_len) and not torch.equal(live_len, algo.returns.len)
    assert buf.t == algo.replay.buf.t and buf.data["done"][(buf.t - 1) % buf.C].all()
    restored.train()
    algo.stop(); restored.stop()
