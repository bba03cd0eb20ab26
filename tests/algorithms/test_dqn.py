"""FastDQN family: presets, large-batch rules, constant training intensity,
exploration, checkpoints (with and without replay), bad inputs, learning."""
import math

import pytest
import torch
from ray.rllib.algorithms.algorithm import Algorithm

from rllib_fast.algorithms.dqn import (EpsRainbow, EpsRainbowConfig, FastDQN, FastDQNConfig, Rainbow,
                                       RainbowConfig)
from rllib_fast.algorithms.dqn.rules import apply_rule, dqn_lr, resolve_rule
from rllib_fast.presets import preset


def small(cls=FastDQNConfig, n=4, **kw):
    base = dict(rollout_length=4, buffer_size=2000, batch_size=16, learning_starts=32, hidden_sizes=[32])
    base.update(kw)
    cfg = cls().environment("CartPole", num_envs=n).training(**base).debugging(seed=1)
    cfg.min_sample_timesteps_per_iteration = 0
    return cfg


def qparams(algo):
    return torch.cat([p.detach().flatten() for p in algo.module.parameters()])


def test_presets_switch_components_on():
    r, e = RainbowConfig(), EpsRainbowConfig()
    for c in (r, e):
        assert c.double_q and c.dueling and c.prioritized_replay and c.n_step == 3 and c.num_atoms == 51
    assert r.noisy and r.exploration == "none"
    assert not e.noisy and e.exploration == "schedule" and e.batch_rule == "eps_rainbow"
    assert isinstance(small(RainbowConfig, v_min=0.0, v_max=100.0).build_algo(), Rainbow)


def test_large_batch_rules_match_the_paper():
    assert dqn_lr(32) == 2.5e-4 and dqn_lr(512) == 7.5e-4 and dqn_lr(1024) == pytest.approx(1.5e-3)
    assert 2.5e-4 < dqn_lr(128) < 7.5e-4 and dqn_lr(4096) == pytest.approx(1.5e-3)
    assert apply_rule("categorical", 256, 1e-4, None) == (4.2e-4, 0.01 / 256)
    assert apply_rule("categorical", 64, 1e-4, None) == (1e-4, 0.01 / 64)
    assert apply_rule("eps_rainbow", 512, 6.25e-5, None) == (6.25e-5, 0.005 / 512)
    assert resolve_rule("auto", 1, False, False) == "dqn"
    assert resolve_rule("auto", 51, False, True) == "eps_rainbow"
    algo = small(batch_rule="dqn", batch_size=512, buffer_size=4096).build_algo()
    assert algo.optimizer.param_groups[0]["lr"] == 7.5e-4


def test_training_intensity_is_constant_across_env_counts():
    for n, batch in ((4, 16), (16, 64)):
        algo = small(n=n, batch_size=batch, training_intensity=2.0, learning_starts=0).build_algo()
        for _ in range(5):
            algo.train()
        generated = algo.env_steps - 0
        consumed = algo.num_updates * batch
        assert consumed / generated == pytest.approx(2.0, rel=0.1)
        algo.stop()


def test_per_env_epsilon_spread_apex():
    algo = small(n=8, exploration="per_env", apex_epsilon=0.4, apex_alpha=7.0).build_algo()
    eps = algo.per_env_eps
    assert eps[0] == pytest.approx(0.4) and eps[-1] == pytest.approx(0.4 ** 8)
    assert bool((eps[1:] < eps[:-1]).all())


def test_epsilon_schedule_anneals_linearly():
    algo = small(epsilon_initial=1.0, epsilon_final=0.1, epsilon_timesteps=100).build_algo()
    algo.env_steps = 50
    assert algo.epsilon() == pytest.approx(0.55)
    algo.env_steps = 1000
    assert algo.epsilon() == pytest.approx(0.1)


@pytest.mark.parametrize("cls,kw", [(FastDQNConfig, {}), (RainbowConfig, {"v_min": 0.0, "v_max": 100.0})])
def test_checkpoint_with_replay_resumes_exactly(tmp_path, cls, kw):
    algo = small(cls, checkpoint_replay=True, learning_starts=0, **kw).build_algo()
    algo.train(); algo.train()
    path = algo.save_to_path(str(tmp_path / "c"))
    algo.train()
    restored = Algorithm.from_checkpoint(path)
    assert restored.replay.t == 2 * 4 and len(restored.replay) == 2 * 4 * 4
    restored.train()
    torch.testing.assert_close(qparams(restored), qparams(algo), rtol=0, atol=0)
    assert restored.num_updates == algo.num_updates


def test_checkpoint_without_replay_restores_weights_only(tmp_path):
    algo = small(learning_starts=0).build_algo()
    algo.train()
    path = algo.save_to_path(str(tmp_path / "c"))
    restored = Algorithm.from_checkpoint(path)
    torch.testing.assert_close(qparams(restored), qparams(algo))
    assert restored.replay.t == 0  # replay not stored: refilled after restore


def test_learning_waits_for_the_replay_after_a_restore_without_it(tmp_path):
    """`learning_starts` counts what the replay holds: a run restored without its
    replay refills it before updating again (not 2 updates on 16 transitions)."""
    algo = small(learning_starts=32).build_algo()
    for _ in range(3):
        algo.train()
    assert algo.num_updates > 0
    path = algo.save_to_path(str(tmp_path / "c"))
    restored = Algorithm.from_checkpoint(path)
    updates = restored.num_updates
    restored.train()                 # 16 transitions stored: below learning_starts
    assert restored.num_updates == updates
    restored.train()                 # 32: learning resumes
    assert restored.num_updates > updates
    algo.stop(); restored.stop()


def test_iterations_without_an_update_do_not_trip_the_nonfinite_guard():
    """At a low training intensity some iterations earn no whole update; their
    learner scalars reduce to NaN in RLlib's logger, which is not a bad update."""
    algo = small(learning_starts=32, training_intensity=0.5).build_algo()
    counts = []
    for _ in range(8):
        algo.train()
        counts.append(algo.num_updates)
    assert counts[-1] > 0 and len(set(counts)) < len(counts)   # some iterations did not update
    algo.stop()


def test_an_adam_eps_the_user_sets_wins_over_the_batch_rule():
    assert apply_rule("eps_rainbow", 128, 5e-4, 1e-4) == (5e-4, 1e-4)
    assert apply_rule("categorical", 64, 1e-4, 3e-4) == (1e-4, 3e-4)
    algo = small(EpsRainbowConfig, adam_eps=1e-4).build_algo()
    assert algo.optimizer.param_groups[0]["eps"] == 1e-4


@pytest.mark.parametrize("per_env", [True, False])
def test_noisy_nets_act_with_one_noise_draw_per_env(per_env):
    """N envs are N actors: each explores under its own draw (one draw shared by
    all envs would move them all in the same direction at once)."""
    algo = small(RainbowConfig, n=8, v_min=0.0, v_max=100.0, noise_per_env=per_env).build_algo()
    obs = torch.randn(1, 4).expand(8, 4).contiguous()   # the same observation in every env
    algo._act(obs, 0.0)
    q = algo.module(obs)                                 # the draw the act step used
    layer = algo.module.advantage.out
    if per_env:
        assert layer.eps_in.shape == (8, layer.in_features)
        assert not torch.allclose(q[0], q[1])
    else:
        assert layer.eps_in.shape == (layer.in_features,)
        torch.testing.assert_close(q[0], q[1])
    algo._learn(1)                                       # learner batches: one shared draw (the paper)
    assert layer.eps_in.shape == (layer.in_features,)
    algo.stop()


@pytest.mark.parametrize("kw,needle", [
    ({"num_atoms": 51, "v_min": 5.0, "v_max": 5.0}, "`v_min` < `v_max`"),
    ({"per_alpha": -0.1}, "`per_alpha` = -0.1 is out of range"),
    ({"exploration": "boltzmann"}, "'schedule', 'per_env', 'none'"),
    ({"batch_rule": "linear"}, "'eps_rainbow'"),
    ({"num_atoms": 2}, "`num_atoms` = 2"),
])
def test_bad_inputs_fail_at_validation(kw, needle):
    with pytest.raises(ValueError) as e:
        small(**kw).validate()
    assert needle in str(e.value).splitlines()[0]


def test_image_env_with_mlp_trunk_fails_at_validation():
    cfg = FastDQNConfig().environment("minatar:breakout").training(trunk="mlp")
    with pytest.raises(ValueError, match="`trunk` = 'mlp' cannot encode image observations"):
        cfg.validate()


def test_continuous_action_env_is_rejected_clearly():
    # a source that is cheap to build: at validation, before Ray or Tune start anything
    with pytest.raises(ValueError, match="needs a Discrete action space; env 'Pendulum' has Box"):
        FastDQNConfig().environment("Pendulum", num_envs=2).validate()
    # a source validation does not build (a callable, a simulator): the same message at build
    from rllib_fast.envs import registry

    with pytest.raises(TypeError, match="needs a Discrete action space"):
        FastDQNConfig().environment(lambda ctx: registry.make_from_context("Pendulum", ctx), num_envs=2).build_algo()


def test_greedy_evaluation_and_noisy_eval_mode():
    algo = small(RainbowConfig, v_min=0.0, v_max=100.0).evaluation(evaluation_duration=3).build_algo()
    obs = torch.randn(5, 4)
    a1, a2 = algo.compute_actions(obs, explore=False), algo.compute_actions(obs, explore=False)
    assert torch.equal(a1, a2)  # noisy layers use their means when evaluating
    assert algo.evaluate()["env_runners"]["num_episodes"] == 3


def _train_until(cfg, threshold, max_env_steps):
    algo = cfg.build_algo()
    best = -math.inf
    while algo.env_steps < max_env_steps and best < threshold:
        ret = algo.train()["env_runners"]["episode_return_mean"]
        best = max(best, ret if ret == ret else -math.inf)
    algo.stop()
    return best


def _preset(cls, algo):
    return cls().environment("CartPole").training(**preset(algo, "CartPole")).debugging(seed=0)


@pytest.mark.slow
def test_fastdqn_learns_cartpole_to_475():
    """With its defaults: they are the settings measured to learn the built-in tasks."""
    cfg = FastDQNConfig().environment("CartPole").debugging(seed=0)
    assert _train_until(cfg, 475, 500_000) >= 475


@pytest.mark.slow
def test_rainbow_learns_cartpole_to_400():
    assert _train_until(_preset(RainbowConfig, "Rainbow"), 400, 300_000) >= 400


def test_minatar_smoke_with_cnn_trunk_and_uint8_replay():
    cfg = (RainbowConfig().environment("minatar:breakout", num_envs=8)
           .training(rollout_length=8, buffer_size=4096, batch_size=32, learning_starts=256, training_intensity=1.0,
                     v_min=0.0, v_max=20.0).debugging(seed=0))
    cfg.min_sample_timesteps_per_iteration = 0
    algo = cfg.build_algo()
    assert algo.replay.data["obs"].dtype == torch.uint8  # images stored as bytes
    assert any(isinstance(m, torch.nn.Conv2d) for m in algo.module.modules())  # CNN trunk chosen by "auto"
    while algo.env_steps < 3000:
        r = algo.train()
    assert algo.num_updates > 0 and math.isfinite(r["learners"]["default_policy"]["td_loss"])
    algo.stop()


@pytest.mark.parametrize("cls,kw", [(FastDQNConfig, {}), (RainbowConfig, {"v_min": 0.0, "v_max": 100.0})])
def test_prioritized_replay_stores_abs_td_error_or_c51_kl(cls, kw):
    """Scalar Q stores |delta|^alpha (Schaul et al.), not the Huber loss
    (delta^2/2 for |delta| < 1); C51 stores the KL divergence from target to
    prediction, as Rainbow prioritises (the cross-entropy minus the target's
    entropy: a return between two atoms has entropy ln 2)."""
    eps = 1e-9
    algo = small(cls, prioritized_replay=True, per_alpha=0.5, per_eps=eps, n_step=1, double_q=False,
                 learning_starts=0, **kw).build_algo()
    algo.train()
    flat, action, obs = torch.tensor([0, 1, 2, 3]), torch.tensor([0, 1, 1, 0]), torch.randn(4, 4)
    algo.module.reset_noise = algo.target.reset_noise = lambda: None  # keep the noise fixed across forwards
    with torch.no_grad():
        if cls is FastDQNConfig:
            q_sa = algo.module(obs)[torch.arange(4), action]
        else:
            log_p = torch.log_softmax(algo.module.logits(obs), -1)[torch.arange(4), action]
    if cls is FastDQNConfig:
        delta = torch.tensor([0.5, -0.3, 2.0, -0.05])
        ret = q_sa + delta  # discount 0: the target is the reward, delta away from Q(s, a)
        expected = (delta.abs().double() + eps).sqrt()
    else:
        atoms = torch.tensor([0, 1, 2, 25])  # support 0, 2, ..., 100: these returns project onto one atom
        ret = atoms.float() * 2.0
        kl = -log_p[torch.arange(4), atoms].double()
        ret[1] = 1.0                          # halfway between atoms 0 and 1: mass 1/2 on each
        kl[1] = -math.log(2) - 0.5 * (log_p[1, 0] + log_p[1, 1]).double()
        expected = (kl + eps).sqrt()
    batch = {"obs": obs, "action": action, "return": ret, "discount": torch.zeros(4), "next_obs": obs}
    algo.replay.sample_prioritized = lambda n, beta: (flat, torch.ones(4))
    algo.replay.gather = lambda f, n, g: batch
    algo._learn(1)
    torch.testing.assert_close(algo.replay.tree.leaves()[:4], expected, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("double_q", [True, False])
def test_double_q_target_selects_with_online_net_and_evaluates_with_target_net(double_q):
    """Double DQN (van Hasselt et al. 2016): the next action is the online net's
    argmax, its value the target net's; plain DQN takes the target net's max."""
    algo = small(FastDQNConfig, prioritized_replay=True, per_alpha=1.0, per_eps=1e-9, n_step=1,
                 double_q=double_q, learning_starts=0).build_algo()
    algo.train()
    with torch.no_grad():  # make the two nets disagree
        for p in algo.target.parameters():
            p.add_(torch.randn_like(p))
    flat, action = torch.tensor([0, 1, 2, 3]), torch.tensor([0, 1, 1, 0])
    obs, next_obs = torch.randn(4, 4), torch.randn(4, 4)
    with torch.no_grad():
        q_sa = algo.module(obs)[torch.arange(4), action]
        q_next_target = algo.target(next_obs)
        if double_q:
            next_value = q_next_target.gather(1, algo.module(next_obs).argmax(1, keepdim=True)).squeeze(1)
        else:
            next_value = q_next_target.max(1).values
    batch = {"obs": obs, "action": action, "return": torch.zeros(4), "discount": torch.ones(4), "next_obs": next_obs}
    algo.replay.sample_prioritized = lambda n, beta: (flat, torch.ones(4))
    algo.replay.gather = lambda f, n, g: batch
    algo._learn(1)
    expected = (next_value - q_sa).abs().double() + 1e-9
    torch.testing.assert_close(algo.replay.tree.leaves()[:4], expected, rtol=1e-4, atol=1e-6)
    algo.stop()
