"""The off-policy recipe keys of PQL, DDPGN and SACN (FastTD3 / FastSAC):
the C51 critic's categorical projection on hand-computed examples, the clipped
double-Q choice over distributions, LayerNorm networks, per-env exploration σ
redrawn at resets, their validation and exact resume, and learning Pendulum
with the C51 critic and LayerNorm."""
import math
from pathlib import Path

import pytest
import torch
import yaml

from rllib_fast.algorithms.pql import DDPGNConfig, PQLConfig, SACNConfig
from rllib_fast.algorithms.pql.nets import DoubleQ, build_policy, pql_mlp
from rllib_fast.algorithms.pql.targets import (clipped_double_q_target, distributional_double_q_target,
                                               redrawn_sigma)
from rllib_fast.core.nets import mlp
from rllib_fast.algorithms.pql.nstep import NStepAggregator
from rllib_fast.core.qnets import categorical_projection
from rllib_fast.envs.base import Step
from rllib_fast.presets import preset

TUNE_CONFIGS = Path(__file__).resolve().parents[2] / "tune_configs"

SUPPORT = torch.linspace(0.0, 4.0, 5)   # atoms 0, 1, 2, 3, 4: atom width 1


def _onehot(i, k=5):
    p = torch.zeros(k)
    p[i] = 1.0
    return p


def _project(probs, r, d, support=SUPPORT):
    return categorical_projection(torch.stack(probs), torch.tensor(r), torch.tensor(d), support)


# ------------------------------------------------------------------ the projection, by hand
def test_projection_splits_mass_between_neighbouring_atoms():
    # z = 1 shifted by r = 0.5: Tz = 1.5, half to atom 1, half to atom 2
    # z = 2 shifted by r = 0.25: Tz = 2.25, 0.75 to atom 2, 0.25 to atom 3
    t = _project([_onehot(1), _onehot(2)], [0.5, 0.25], [1.0, 1.0])
    assert torch.allclose(t[0], torch.tensor([0.0, 0.5, 0.5, 0.0, 0.0]))
    assert torch.allclose(t[1], torch.tensor([0.0, 0.0, 0.75, 0.25, 0.0]))
    # a two-atom distribution: each atom's mass is split on its own
    p = torch.tensor([0.0, 0.4, 0.0, 0.6, 0.0])   # 0.4 at z=1, 0.6 at z=3
    t = _project([p], [0.5], [1.0])[0]              # -> 1.5 and 3.5
    assert torch.allclose(t, torch.tensor([0.0, 0.2, 0.2, 0.3, 0.3]))


def test_projection_clips_beyond_the_support():
    # Tz = 4 + 2 = 6 > v_max: all mass at v_max; Tz = 1 - 3 = -2 < v_min: all at v_min
    t = _project([_onehot(4), _onehot(1)], [2.0, -3.0], [1.0, 1.0])
    assert torch.allclose(t[0], _onehot(4)) and torch.allclose(t[1], _onehot(0))
    # a spread distribution pushed half over the top: what lands beyond piles up on the last atom
    t = _project([torch.full((5,), 0.2)], [2.0], [1.0])[0]   # 2, 3, 4, 5, 6 -> 2, 3, 4, 4, 4
    assert torch.allclose(t, torch.tensor([0.0, 0.0, 0.2, 0.2, 0.6]))


def test_projection_at_termination_collapses_to_the_reward():
    # discount 0 (terminated): whatever the next distribution, all mass sits at r
    t = _project([torch.full((5,), 0.2), _onehot(4)], [2.25, 3.0], [0.0, 0.0])
    assert torch.allclose(t[0], torch.tensor([0.0, 0.0, 0.75, 0.25, 0.0]))
    assert torch.allclose(t[1], _onehot(3))


def test_projection_scales_the_support_by_gamma_to_the_n():
    g, n = 0.5, 3
    # z = 4 scaled by 0.5^3 = 0.125 -> 0.5, plus r = 1: Tz = 1.5
    t = _project([_onehot(4)], [1.0], [g ** n])[0]
    assert torch.allclose(t, torch.tensor([0.0, 0.5, 0.5, 0.0, 0.0]))
    # z in {0, 4} halved (discount 0.5) plus r = 1: atoms 1 and 3 exactly
    t = _project([torch.tensor([0.5, 0.0, 0.0, 0.0, 0.5])], [1.0], [0.5])[0]
    assert torch.allclose(t, torch.tensor([0.0, 0.5, 0.0, 0.5, 0.0]))


def test_time_outs_bootstrap_and_terminations_do_not_through_the_projection():
    """The discounts the n-step aggregator stores go straight into the projection:
    a window truncated after 2 steps bootstraps with gamma^2, a terminated one with 0."""
    g = 0.5
    agg = NStepAggregator(2, 3, g, (1,), (1,), torch.device("cpu"))
    term = [torch.tensor([False, False]), torch.tensor([True, False]), torch.tensor([False, False])]
    trunc = [torch.tensor([False, False]), torch.tensor([False, True]), torch.tensor([False, False])]
    out = None
    for t in range(3):
        obs = torch.zeros(2, 1)
        out = agg.push(obs, torch.zeros(2, 1), torch.tensor([1.0, 1.0]), term[t], trunc[t], obs, None) or out
    assert torch.allclose(out["discount"], torch.tensor([0.0, g ** 2]))
    assert torch.allclose(out["reward"], torch.tensor([1.5, 1.5]))
    t = categorical_projection(torch.stack([_onehot(4), _onehot(4)]), out["reward"], out["discount"], SUPPORT)
    assert torch.allclose(t[0], torch.tensor([0.0, 0.5, 0.5, 0.0, 0.0]))   # terminated: at r = 1.5
    assert torch.allclose(t[1], torch.tensor([0.0, 0.0, 0.5, 0.5, 0.0]))   # time-out: 1.5 + 0.25 * 4 = 2.5


def test_a_shift_by_one_atom_width_moves_the_distribution_one_atom():
    """C51 at its coarsest step: a reward of exactly one atom width (discount 1)
    moves every atom's mass one atom up, with no smearing, and the top atom's
    mass stays at v_max."""
    p = torch.tensor([0.1, 0.2, 0.3, 0.15, 0.25])
    t = _project([p], [1.0], [1.0])[0]
    assert torch.allclose(t, torch.tensor([0.0, 0.1, 0.2, 0.3, 0.4]))


def test_projection_keeps_the_scalar_td_target_in_expectation():
    """Inside the support the projection preserves the mean, so the C51 target's
    expected value is the scalar target r + d * E[z]: the distributional critic
    reduces to the scalar one in expectation."""
    g = torch.Generator().manual_seed(0)
    support = torch.linspace(-10.0, 10.0, 101)
    p = torch.softmax(torch.randn(64, 101, generator=g), -1)
    r = torch.rand(64, generator=g) * 2 - 1
    d = torch.rand(64, generator=g) * 0.5    # |r + d z| <= 6 < 10: nothing clipped
    t = categorical_projection(p, r, d, support)
    assert torch.allclose(t.sum(-1), torch.ones(64), atol=1e-5)
    assert torch.allclose((t * support).sum(-1), r + d * (p * support).sum(-1), atol=1e-4)


# ------------------------------------------------------------------ clipped double Q over distributions
def test_clipped_double_q_takes_per_sample_the_twin_with_the_lower_expectation():
    support = SUPPORT
    l1 = torch.log(torch.stack([_onehot(1) + 1e-9, _onehot(3) + 1e-9]))   # E: 1 then 3
    l2 = torch.log(torch.stack([_onehot(2) + 1e-9, _onehot(0) + 1e-9]))   # E: 2 then 0
    r, d = torch.tensor([0.5, 0.5]), torch.tensor([1.0, 1.0])
    t = distributional_double_q_target(r, d, l1, l2, support)
    # sample 0 takes twin 1 (1 < 2): 1.5; sample 1 takes twin 2 (0 < 3): 0.5
    assert torch.allclose(t[0], torch.tensor([0.0, 0.5, 0.5, 0.0, 0.0]), atol=1e-6)
    assert torch.allclose(t[1], torch.tensor([0.5, 0.5, 0.0, 0.0, 0.0]), atol=1e-6)
    # a whole distribution is taken (not an element-wise min of two), and its mean is the
    # scalar clipped double-Q target of the twins' expectations
    e1, e2 = (torch.softmax(l1, -1) * support).sum(-1), (torch.softmax(l2, -1) * support).sum(-1)
    assert torch.allclose((t * support).sum(-1), clipped_double_q_target(r, d, e1, e2), atol=1e-5)


def test_c51_critic_loss_and_policy_objective_use_the_expected_value():
    """DoubleQ with atoms: heads are logits, q() their expectations over the support
    (what the policy maximises)."""
    torch.manual_seed(0)
    q = DoubleQ(3, 2, [8], "elu", num_atoms=11, v_min=-5.0, v_max=5.0, layer_norm=True)
    s, a = torch.randn(4, 3), torch.randn(4, 2)
    h1, h2 = q.heads(s, a)
    assert h1.shape == (4, 11)
    q1, q2 = q.q(s, a)
    assert torch.allclose(q1, (torch.softmax(h1, -1) * torch.linspace(-5, 5, 11)).sum(-1))
    assert torch.allclose(q2, (torch.softmax(h2, -1) * torch.linspace(-5, 5, 11)).sum(-1))


# ------------------------------------------------------------------ LayerNorm networks
def test_layer_norm_sits_between_each_hidden_linear_and_its_activation():
    torch.manual_seed(0)
    plain = mlp(5, [16, 8], 3, "relu")
    torch.manual_seed(0)
    normed = pql_mlp(5, [16, 8], 3, "relu", layer_norm=True)
    kinds = [type(m).__name__ for m in normed]
    assert kinds == ["Linear", "LayerNorm", "ReLU", "Linear", "LayerNorm", "ReLU", "Linear"]
    # the Linear layers are initialised exactly as without LayerNorm (same draws)
    lin_p = [m for m in plain if isinstance(m, torch.nn.Linear)]
    lin_n = [m for m in normed if isinstance(m, torch.nn.Linear)]
    assert all(torch.equal(a.weight, b.weight) for a, b in zip(lin_p, lin_n))
    # the hidden pre-activations are normalised whatever the input scale
    x = torch.randn(32, 5) * 1000.0
    h = normed[1](normed[0](x))
    assert torch.allclose(h.mean(-1), torch.zeros(32), atol=1e-4)
    assert torch.allclose(h.std(-1, unbiased=False), torch.ones(32), atol=1e-3)
    torch.manual_seed(0)
    assert [type(m).__name__ for m in pql_mlp(5, [16, 8], 3, "relu")] == [type(m).__name__ for m in plain]
    for kind in ("ddpg", "sac"):
        pol = build_policy(kind, 5, 2, [16], "elu", layer_norm=True)
        assert any(isinstance(m, torch.nn.LayerNorm) for m in pol.modules())


def test_layer_norm_key_reaches_every_role_and_the_exported_module():
    algo = PQLConfig().environment("Pendulum", num_envs=4).training(
        hidden_sizes=[8], buffer_size=400, layer_norm=True, backend="thread").debugging(seed=0).build_algo()
    try:
        for net in (algo.actor.policy, algo.v.critic, algo.v.target, algo.v.policy, algo.p.policy, algo.p.critic):
            assert sum(isinstance(m, torch.nn.LayerNorm) for m in net.modules()) >= 1
        module = algo.get_module()
        obs = torch.zeros(2, 3)
        assert torch.allclose(module.greedy(obs)[0], algo.compute_actions(obs, explore=False))
    finally:
        algo.stop()


# ------------------------------------------------------------------ per-env σ redrawn at resets
def test_redrawn_sigma_changes_only_the_envs_that_reset():
    g = torch.Generator().manual_seed(0)
    sigma = torch.tensor([0.1, 0.2, 0.3, 0.4])
    reset = torch.tensor([False, True, False, True])
    new = redrawn_sigma(sigma, reset, 0.05, 0.8, g)
    assert new[0] == 0.1 and new[2] == 0.3
    assert ((new[reset] >= 0.05) & (new[reset] <= 0.8)).all() and not torch.equal(new[reset], sigma[reset])
    # the draw is u ~ U[0, 1) mapped to [min, max]
    u = torch.rand(4, generator=torch.Generator().manual_seed(0))
    assert torch.allclose(new[reset], (0.05 + u * 0.75)[reset])
    # over many redraws the values cover the range uniformly
    many = redrawn_sigma(torch.zeros(20000), torch.ones(20000, dtype=torch.bool), 0.2, 1.0, g)
    assert many.min() >= 0.2 and many.max() <= 1.0 and many.mean().item() == pytest.approx(0.6, abs=0.01)


def test_mixed_random_sigma_is_per_env_and_redrawn_at_each_episode_end():
    algo = DDPGNConfig().environment("Pendulum", num_envs=4).training(
        hidden_sizes=[8], buffer_size=400, batch_size=32, noise_type="mixed_random", noise_std_min=0.1,
        noise_std_max=0.3, warmup_steps=0).debugging(seed=0).build_algo()
    try:
        actor = algo.actor
        s0 = actor.sigma().squeeze(1).clone()
        assert s0.shape == (4,) and ((s0 >= 0.1) & (s0 <= 0.3)).all() and len(set(s0.tolist())) == 4
        obs = torch.zeros(4, 3)
        no = torch.zeros(4, dtype=torch.bool)
        # env 1 terminates, env 3 is truncated (a time-out): both get a fresh sigma, the others keep theirs
        step = Step(obs, torch.zeros(4), torch.tensor([False, True, False, False]),
                    torch.tensor([False, False, False, True]), obs, torch.ones(4, dtype=torch.bool))
        actor.observe(obs, torch.zeros(4, 1), step)
        s1 = actor.sigma().squeeze(1)
        assert s1[0] == s0[0] and s1[2] == s0[2] and s1[1] != s0[1] and s1[3] != s0[3]
        assert ((s1 >= 0.1) & (s1 <= 0.3)).all()
        actor.observe(obs, torch.zeros(4, 1), Step(obs, torch.zeros(4), no, no, obs, ~no))
        assert torch.equal(actor.sigma().squeeze(1), s1)   # no episode ended: nothing redrawn
        # acting uses it: the exploration noise of env i has std sigma_i
        actor.steps = actor.cfg.warmup_steps
        many = obs.repeat(2000, 1)
        actor.sigma_table = s1.repeat(2000)
        actor.N = many.shape[0]
        spread = (actor.act(many) - actor.act(many, explore=False)).reshape(2000, 4).std(0)
        assert torch.allclose(spread, s1, rtol=0.1)
    finally:
        algo.stop()


def test_mixed_random_leaves_the_default_mixed_table_alone():
    """The default ('mixed') keeps PQL's fixed table and draws nothing new."""
    algo = DDPGNConfig().environment("Pendulum", num_envs=5).training(hidden_sizes=[8], buffer_size=400) \
        .debugging(seed=0).build_algo()
    try:
        assert algo.actor.noise_generator is None and "sigma_table" not in algo.actor.state_dict()
        assert torch.allclose(algo.actor.sigma().squeeze(1), torch.tensor([0.05, 0.2375, 0.425, 0.6125, 0.8]))
    finally:
        algo.stop()


# ------------------------------------------------------------------ validation
@pytest.mark.parametrize("kw,match", [
    (dict(distributional=True, v_min=5.0, v_max=5.0), r"`v_min` < `v_max`.*allowed: v_min < v_max"),
    (dict(noise_type="uniform"), r"`noise_type`.*allowed: (one of )?'mixed', 'mixed_random', 'fixed'"),
    (dict(layer_norm="yes"), r"`layer_norm`"),
    (dict(num_atoms=2), r"`num_atoms`"),
    (dict(noise_type="mixed_random", noise_std_min=0.9, noise_std_max=0.1), r"`noise_std_min`.*<= `noise_std_max`"),
])
def test_recipe_keys_fail_validation_with_one_clear_line(kw, match):
    for cls in (PQLConfig, DDPGNConfig):
        with pytest.raises(ValueError, match=match):
            cls().environment("Pendulum").training(**kw).validate()


def test_mixed_random_noise_is_refused_for_the_sac_policy():
    with pytest.raises(ValueError, match=r"`noise_type` = 'mixed_random'.*policy_learner='sac'"):
        SACNConfig().environment("Pendulum").training(noise_type="mixed_random").validate()


# ------------------------------------------------------------------ checkpoints
def _flat(module):
    return torch.cat([t.detach().flatten().double() for t in module.state_dict().values()])


@pytest.mark.parametrize("cfg_cls,kw", [
    (DDPGNConfig, dict(noise_type="mixed_random")),
    (SACNConfig, dict(sac_init_alpha=0.001)),
])
def test_recipe_resumes_bit_exactly(tmp_path, cfg_cls, kw):
    cfg = cfg_cls().environment("Pendulum", num_envs=8).training(
        hidden_sizes=[16], batch_size=32, steps_per_iteration=60, warmup_steps=2, checkpoint_replay=True,
        distributional=True, num_atoms=21, v_min=-100.0, v_max=0.0, layer_norm=True, weight_decay=0.1,
        beta_av=2.0, **kw).debugging(seed=0)
    algo = cfg.build_algo()
    try:
        algo.train()
        algo.train()
        algo.save_to_path(str(tmp_path))
        algo.train()   # 60 steps x 8 envs crosses an episode end (200 steps) by iteration 4
        algo.train()
        expected = (_flat(algo.v.critic), _flat(algo.p.policy), algo.obs.clone(), algo.actor.sigma_table.clone())
    finally:
        algo.stop()
    fresh = cfg.build_algo()
    try:
        fresh.restore_from_path(str(tmp_path))
        fresh.train()
        fresh.train()
        got = (_flat(fresh.v.critic), _flat(fresh.p.policy), fresh.obs.clone(), fresh.actor.sigma_table.clone())
        assert all(torch.equal(a, b) for a, b in zip(expected, got))
    finally:
        fresh.stop()


# ------------------------------------------------------------------ learning and end to end
THRESHOLD = -250.0
PENDULUM = {k: v for k, v in preset("DDPGN", "Pendulum").items() if k != "num_envs"}


@pytest.mark.slow
def test_ddpgn_with_c51_and_layer_norm_learns_pendulum():
    algo = DDPGNConfig().environment("Pendulum", num_envs=64).training(
        **PENDULUM, distributional=True, num_atoms=51, v_min=-100.0, v_max=0.0, layer_norm=True,
        noise_type="mixed_random").debugging(seed=0).evaluation(evaluation_duration=10).build_algo()
    try:
        best = -math.inf
        for _ in range(30):
            algo.train()
            best = max(best, algo.evaluate()["env_runners"]["episode_return_mean"])
            if best >= THRESHOLD:
                break
        assert best >= THRESHOLD
    finally:
        algo.stop()


def test_pql_runs_the_recipe_end_to_end_on_its_default_backend():
    cfg = PQLConfig().environment("Pendulum", num_envs=16).training(
        hidden_sizes=[16], critic_hidden_sizes=[32, 32], batch_size=64, steps_per_iteration=40, warmup_steps=2,
        distributional=True,        num_atoms=21, v_min=-100.0, v_max=0.0, layer_norm=True, noise_type="mixed_random", weight_decay=0.1,
        beta_av=2.0).debugging(seed=0)
    assert cfg.resolved_backend() == "process"
    algo = cfg.build_algo()
    try:
        for _ in range(3):
            r = algo.train()["learners"]["default_policy"]
        assert r["num_critic_updates"] > 0 and r["num_policy_updates"] > 0 and math.isfinite(r["critic_loss"])
        assert -100.0 <= r["q_mean"] <= 0.0
    finally:
        algo.stop()


def test_critic_hidden_sizes_shape_the_critics_only():
    algo = DDPGNConfig().environment("Pendulum", num_envs=4).training(
        hidden_sizes=[8], critic_hidden_sizes=[32, 16], buffer_size=400).debugging(seed=0).build_algo()
    try:
        widths = [m.out_features for m in algo.v.critic.q1 if isinstance(m, torch.nn.Linear)]
        assert widths == [32, 16, 1]
        assert [m.out_features for m in algo.p.policy.net if isinstance(m, torch.nn.Linear)] == [8, 1]
    finally:
        algo.stop()
    with pytest.raises(ValueError, match=r"`critic_hidden_sizes`.*non-empty list of positive ints"):
        DDPGNConfig().environment("Pendulum").training(critic_hidden_sizes=[]).validate()


@pytest.mark.parametrize("name", ["envpool-ant-pql.yaml", "envpool-humanoid-pql.yaml"])
def test_shipped_envpool_recipes_train_on_the_real_tasks(name):
    """The shipped recipe files, sizes shrunk, on envpool's MuJoCo tasks: the C51
    critic's expected value starts inside the file's support and updates run."""
    pytest.importorskip("envpool")
    (spec,) = yaml.safe_load((TUNE_CONFIGS / name).read_text()).values()
    config = {k: v for k, v in spec["config"].items() if k not in ("evaluation_interval", "seed")}
    config.update(num_envs=8, steps_per_iteration=10, batch_size=64, buffer_size=2000, warmup_steps=2)
    num_envs = config.pop("num_envs")
    algo = PQLConfig().environment(spec["env"], num_envs=num_envs).training(**config) \
        .debugging(seed=0).build_algo()
    try:
        assert algo.actor.noise_generator is not None
        assert any(isinstance(m, torch.nn.LayerNorm) for m in algo.actor.policy.modules())
        # the V-learner is a process that may still be importing torch when a loaded machine's
        # first short iterations end (the Actor does not wait forever): train until it has updated
        for _ in range(30):
            r = algo.train()["learners"]["default_policy"]
            if r["num_critic_updates"] > 0:
                break
        assert r["num_critic_updates"] > 0 and math.isfinite(r["critic_loss"])
        assert config["v_min"] <= r["q_mean"] <= config["v_max"]
    finally:
        algo.stop()


def test_shipped_go1_sacn_recipe_trains_on_the_real_task():
    """envpool-go1-joystick-sacn.yaml, sizes shrunk, on envpool's Go1 joystick: SAC(n) with the
    recipe's C51 critic reads the privileged states, and its updates run inside the file's support."""
    pytest.importorskip("envpool")
    (spec,) = yaml.safe_load((TUNE_CONFIGS / "envpool-go1-joystick-sacn.yaml").read_text()).values()
    assert spec["run"] == "SACN"
    config = {k: v for k, v in spec["config"].items() if k not in ("evaluation_interval", "seed", "num_envs")}
    # the file learns from its 131,072nd transition (docs/pql.md "Go1: when learning starts"):
    # shrunk with the buffer here, as the sizes are
    assert config["learning_starts"] == 131072 <= config["buffer_size"]
    config.update(steps_per_iteration=10, batch_size=64, buffer_size=2000, warmup_steps=2, learning_starts=64,
                  hidden_sizes=[32, 32], critic_hidden_sizes=[32, 32],
                  env_config=dict(config["env_config"], num_threads=1))
    env_config = config.pop("env_config")
    algo = SACNConfig().environment(spec["env"], num_envs=4, env_config=env_config).training(**config) \
        .debugging(seed=0).build_algo()
    try:
        assert algo.dims.state_dim == 123
        # the V-learner is a process that may still be importing torch when a loaded machine's
        # first short iterations end (the Actor does not wait forever): train until it has updated
        for _ in range(30):
            r = algo.train()["learners"]["default_policy"]
            if r["num_critic_updates"] > 0:
                break
        assert r["num_critic_updates"] > 0 and math.isfinite(r["critic_loss"])
        assert config["v_min"] <= r["q_mean"] <= config["v_max"]
    finally:
        algo.stop()
