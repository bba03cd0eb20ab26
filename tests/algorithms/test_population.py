"""Vectorised populations: PopTD3 equals K sequential TD3s, member RNG streams, exploit, in-trial PBT,
no recompilation, checkpoint resume, learning (best member of PopTD3 K=4 on Pendulum)."""
import copy
import math

import numpy as np
import pytest
import torch
from torch import nn
from ray.rllib.algorithms.algorithm import Algorithm

from rllib_fast.algorithms.population import (CEMRLConfig, DvDConfig, PopDQNConfig, PopSACConfig,
                                              PopTD3Config)
from rllib_fast.algorithms.population import mutations as M
from rllib_fast.algorithms.population.dvd import rbf_logdet
from rllib_fast.algorithms.population.rng import MemberRNG
from rllib_fast.core.stacked import dynamo_compile_count, flat_members

RET = "env_runners/episode_return_mean"


def tiny(cls=PopTD3Config, **kw):
    base = dict(population_size=3, hidden_sizes=[16, 16], batch_size=8, learning_starts=20, rollout_length=10,
                buffer_size=500, pbt_init="config", fused_update_steps=5)
    base.update(kw)
    return cls().environment("Pendulum" if cls is not PopDQNConfig else "CartPole").training(**base).debugging(seed=0)


# ----------------------------------------------------------------------------------------------
# PopTD3 == K sequential TD3 updates
# ----------------------------------------------------------------------------------------------
def _member_net(stacked, m):
    layers = []
    for i, layer in enumerate(stacked.layers):
        layers.append(layer.member(m))
        if i < len(stacked.layers) - 1:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def _reference_td3_update(actor, actor_t, q1, q2, q1_t, q2_t, opt_a, opt_c, b, noise, h, it):
    """Textbook single-agent TD3 step (Fujimoto et al. 2018) on plain nn.Modules."""
    with torch.no_grad():
        eps = (noise * h["target_noise"]).clamp(-h["noise_clip"], h["noise_clip"])
        na = (torch.tanh(actor_t(b["next_obs"])) + eps).clamp(-1, 1)
        x = torch.cat([b["next_obs"], na], -1)
        qt = torch.min(q1_t(x), q2_t(x))[:, 0]
        y = h["reward_scale"] * b["reward"] + h["gamma"] * b["not_done"] * qt
    x = torch.cat([b["obs"], b["action"]], -1)
    loss = ((q1(x)[:, 0] - y) ** 2).mean() + ((q2(x)[:, 0] - y) ** 2).mean()
    opt_c.zero_grad()
    loss.backward()
    opt_c.step()
    if it % int(h["policy_delay"]) == 0:
        pl = -q1(torch.cat([b["obs"], torch.tanh(actor(b["obs"]))], -1)).mean()
        opt_a.zero_grad()
        pl.backward()
        opt_a.step()
        with torch.no_grad():
            for net, tgt in ((actor, actor_t), (q1, q1_t), (q2, q2_t)):
                for p, t in zip(net.parameters(), tgt.parameters()):
                    t.mul_(1 - h["tau"]).add_(h["tau"] * p)


def test_one_poptd3_update_equals_k_sequential_td3_updates():
    algo = tiny(population_size=3, pbt_init="sample").build_algo()   # never trained: updates called by hand
    algo.hp["policy_delay"].copy_(torch.tensor([1.0, 2.0, 1.0]))
    algo.hp["tau"].copy_(torch.tensor([0.005, 0.05, 0.5]))
    algo.hp["reward_scale"].copy_(torch.tensor([1.0, 0.5, 2.0]))
    algo.optimizer_hparams()
    K, C = algo.K, algo.Kc
    refs = []
    for m in range(K):
        h = {k: float(v) for k, v in algo.hp.values(m).items()}
        actor = _member_net(algo.actor, m)
        q1, q2 = _member_net(algo.critic, m), _member_net(algo.critic, C + m)
        nets = [actor, copy.deepcopy(actor), q1, q2, copy.deepcopy(q1), copy.deepcopy(q2)]
        opt_a = torch.optim.AdamW(actor.parameters(), lr=h["actor_lr"], eps=1e-8, weight_decay=0.0)
        opt_c = torch.optim.AdamW(list(q1.parameters()) + list(q2.parameters()), lr=h["critic_lr"], eps=1e-8,
                                  weight_decay=0.0)
        refs.append((nets, opt_a, opt_c, h))
    torch.manual_seed(0)
    for it in (1, 2):    # two updates: member 1 (delay 2) updates its policy on the second only
        B = 8
        b = {"obs": torch.randn(K, B, 3), "action": torch.rand(K, B, 1) * 2 - 1, "reward": torch.randn(K, B),
             "next_obs": torch.randn(K, B, 3), "not_done": (torch.rand(K, B) > 0.2).float(),
             "weight": torch.ones(K, B)}
        noise = algo.rng.normal(B, 1)
        algo.td3_step(b, noise)
        for m, (nets, opt_a, opt_c, h) in enumerate(refs):
            actor, actor_t, q1, q2, q1_t, q2_t = nets
            bm = {k: v[m] for k, v in b.items()}
            _reference_td3_update(actor, actor_t, q1, q2, q1_t, q2_t, opt_a, opt_c, bm, noise[m], h, it)
    for m, (nets, *_rest) in enumerate(refs):
        actor, actor_t, q1, q2, q1_t, q2_t = nets
        for stacked, idx, ref in ((algo.actor, m, actor), (algo.actor_t, m, actor_t), (algo.critic, m, q1),
                                  (algo.critic, C + m, q2), (algo.critic_t, m, q1_t), (algo.critic_t, C + m, q2_t)):
            for layer, lin in zip(stacked.layers, [l for l in ref if isinstance(l, nn.Linear)]):
                assert (layer.weight[idx] - lin.weight.t()).abs().max() < 1e-5
                assert (layer.bias[idx, 0] - lin.bias).abs().max() < 1e-5
    # member 1 (delay 2) moved its policy only once, members 0 and 2 twice
    assert algo.actor_opt.step_count.view(-1).tolist() == [2.0, 1.0, 2.0]


# ----------------------------------------------------------------------------------------------
# RNG streams
# ----------------------------------------------------------------------------------------------
def test_member_rng_streams_are_uncorrelated_and_independent_of_population_size():
    rng = MemberRNG.from_seed(7, 8, "cpu")
    x = rng.normal(4000, 2).reshape(8, -1)
    corr = torch.corrcoef(x)
    assert (corr - torch.eye(8)).abs().max() < 0.06
    assert x.mean().abs() < 0.03 and (x.std() - 1).abs() < 0.03
    nxt = rng.normal(4000, 2).reshape(8, -1)      # successive draws are fresh too
    assert torch.corrcoef(torch.cat([x, nxt]))[:8, 8:].abs().max() < 0.06
    small = MemberRNG.from_seed(7, 3, "cpu")
    assert torch.equal(small.normal(100), MemberRNG.from_seed(7, 8, "cpu").normal(100)[:3])
    u = rng.uniform(10000)
    assert 0 < float(u.min()) and float(u.max()) < 1
    r = rng.randint(torch.tensor([3, 5, 7, 9, 11, 13, 15, 17]), 1000)
    assert bool((r >= 0).all()) and bool((r < torch.tensor([3, 5, 7, 9, 11, 13, 15, 17]).unsqueeze(1)).all())


def test_population_exploration_noise_and_minibatches_differ_per_member():
    algo = tiny(population_size=4, learning_starts=0).build_algo()
    algo.train()
    obs = torch.zeros(4, 256, 3)      # identical observations: any difference is member noise
    a = algo.policy_actions(obs, True) - algo.policy_actions(obs, False)
    corr = torch.corrcoef(a.reshape(4, -1))
    assert (corr - torch.eye(4)).abs().max() < 0.25
    b = algo.replay.sample(64, algo.rng)
    assert not torch.equal(b["obs"][0], b["obs"][1])
    # per-member replay: member m only sees transitions from its own envs
    algo2 = tiny(population_size=2, num_envs_per_member=2, learning_starts=0).build_algo()
    algo2.train()
    rb = algo2.replay
    col = rb.col0 + algo2.rng.randint(rb.n, 1000)
    assert bool((col[0] < 2).all()) and bool((col[1] >= 2).all())


# ----------------------------------------------------------------------------------------------
# exploit / PBT
# ----------------------------------------------------------------------------------------------
def _snap(algo):
    nets = {"actor": algo.actor, "actor_t": algo.actor_t, "critic": algo.critic, "critic_t": algo.critic_t}
    return {k: [p.detach().clone() for p in v.parameters()] for k, v in nets.items()}


@pytest.mark.parametrize("optimizer_mode", ["reset", "copy"])
def test_exploit_copies_exactly_the_selected_slices(optimizer_mode):
    algo = tiny(population_size=5, learning_starts=0, pbt_exploit_optimizer=optimizer_mode).build_algo()
    algo.train(); algo.train()
    before = _snap(algo)
    opt_before = algo.actor_opt.exp_avg.clone()
    src, dst = torch.tensor([4, 0]), torch.tensor([1, 2])
    algo.exploit_members(src, dst)
    after = _snap(algo)
    K = algo.K
    for name in before:
        for b, a in zip(before[name], after[name]):
            if name.startswith("critic"):          # twin net: Q1 at m, Q2 at K + m
                s_idx, d_idx = torch.cat([src, src + K]), torch.cat([dst, dst + K])
            else:
                s_idx, d_idx = src, dst
            assert torch.equal(a[d_idx], b[s_idx])
            keep = torch.ones(a.shape[0], dtype=torch.bool)
            keep[d_idx] = False
            assert torch.equal(a[keep], b[keep])
    if optimizer_mode == "reset":
        assert float(algo.actor_opt.exp_avg[dst].abs().sum()) == 0.0
    else:
        assert torch.equal(algo.actor_opt.exp_avg[dst], opt_before[src])
    assert torch.equal(algo.actor_opt.exp_avg[[0, 3, 4]], opt_before[[0, 3, 4]])


def test_pbt_replaces_floor_fraction_members_with_hyperparameters_inside_the_prior():
    algo = tiny(population_size=8, pbt_interval=10, pbt_init="sample", learning_starts=0).build_algo()
    algo.train()
    prior = {k: M.bounds(v) for k, v in algo.pbt.mutations.items()}
    fitness = torch.tensor([-5.0, -1.0, -8.0, -2.0, -7.0, -3.0, -4.0, -6.0], dtype=torch.float64)
    algo.returns.ring[:, 0] = fitness
    algo.returns.filled.fill_(1)
    hp_before = {k: v.clone() for k, v in algo.hp.t.items()}
    actor_before = flat_members(algo.actor).clone()
    info = algo.pbt.round(algo.num_updates)
    q = math.floor(0.3 * 8)
    assert sorted(info["replaced"]) == [2, 4]                 # the two worst
    assert set(info["donors"]) <= {1, 3}                      # drawn from the two best
    actor_after = flat_members(algo.actor)
    for d, s in zip(info["replaced"], info["donors"]):
        assert torch.equal(actor_after[d], actor_before[s])
        for k, (lo, hi) in prior.items():
            v = float(algo.hp[k][d])
            assert lo - 1e-6 <= v <= hi + 1e-6, (k, v, lo, hi)
    untouched = [m for m in range(8) if m not in info["replaced"]]
    assert torch.equal(actor_after[untouched], actor_before[untouched])
    for k in algo.hp.names:
        assert torch.equal(algo.hp[k][untouched], hp_before[k][untouched])
    assert len(info["replaced"]) == q
    # the optimizers read the new learning rates (tensors shared in place)
    assert torch.equal(algo.actor_opt.lr, algo.hp["actor_lr"])


def test_pbt_waits_until_every_member_has_a_fitness():
    """A member without a finished episode (since the start or its last exploit)
    has no fitness: ranking it last would replace it before it could show anything."""
    algo = tiny(population_size=4, pbt_interval=10, learning_starts=0).build_algo()
    algo.train()
    algo.returns.ring[:, 0] = torch.tensor([-5.0, -1.0, -8.0, -2.0], dtype=torch.float64)
    algo.returns.filled.copy_(torch.tensor([1, 1, 0, 1]))    # member 2: no finished episode
    rounds = algo.pbt.rounds
    assert algo.pbt.round(algo.num_updates) == {} and algo.pbt.rounds == rounds
    algo.returns.filled.fill_(1)
    assert algo.pbt.round(algo.num_updates)["replaced"] and algo.pbt.rounds == rounds + 1
    algo.stop()


def test_small_populations_replace_one_member_and_auto_pbt_needs_two():
    """floor(0.3 * K) is 0 below K = 4: a round still replaces one member (the
    worst, from the best) once K >= 2. ``pbt_interval='auto'`` (PopDQN's default)
    is the algorithm's own interval with someone to replace, off for a single member."""
    algo = tiny(population_size=2, pbt_interval=10, learning_starts=0).build_algo()
    algo.train()
    algo.returns.ring[:, 0] = torch.tensor([-5.0, -1.0], dtype=torch.float64)
    algo.returns.filled.fill_(1)
    info = algo.pbt.round(algo.num_updates)
    assert list(info["replaced"]) == [0]
    algo.stop()
    assert PopDQNConfig().pbt_interval == "auto" and PopTD3Config().pbt_interval is None
    assert PopDQNConfig().training(population_size=4).resolved_pbt_interval() == PopDQNConfig.AUTO_PBT_INTERVAL
    assert PopDQNConfig().training(population_size=1).resolved_pbt_interval() is None
    assert PopDQNConfig().training(pbt_fraction=0.0).resolved_pbt_interval() is None
    # PopTD3 has no interval of its own
    assert PopTD3Config().training(pbt_interval="auto").resolved_pbt_interval() is None
    single = tiny(PopDQNConfig, population_size=1).build_algo()            # 'auto' with one member: off
    assert single.pbt.interval is None
    single.stop()


def test_pbt_perturbations_stay_inside_what_each_key_allows():
    """A ``* 1.2`` perturbation of gamma near 1 must not leave [0, 1] (the
    Bellman target would diverge); perturbations beyond the prior are allowed."""
    algo = tiny(population_size=4, pbt_interval=10, pbt_init="sample", learning_starts=0,
                pbt_resample_probability=0.0, pbt_perturbation_factors=[1.2]).build_algo()
    algo.train()
    assert "gamma" in algo.pbt.mutations
    algo.hp["gamma"].fill_(0.99)
    algo.returns.ring[:, 0] = torch.tensor([-5.0, -1.0, -8.0, -2.0], dtype=torch.float64)
    algo.returns.filled.fill_(1)
    info = algo.pbt.round(algo.num_updates)
    for m in info["replaced"]:
        assert float(algo.hp["gamma"][m]) == 1.0              # 0.99 * 1.2, held at the bound
    algo.stop()


def test_pbt_runs_inside_training_and_reports_members():
    """Rounds run once every member has a fitness (a finished episode): with a
    20-step time limit, from the third iteration of 10 steps on."""
    cfg = tiny(population_size=4, pbt_interval=10, pbt_fraction=0.25, learning_starts=0)
    algo = cfg.environment("Pendulum", env_config={"max_episode_steps": 20}).build_algo()
    r = algo.train()
    assert r["population"]["pbt_rounds"] == 0              # no member has finished an episode yet
    for _ in range(5):
        r = algo.train()
    assert r["population"]["pbt_rounds"] >= 2
    assert set(f"member_{m}" for m in range(4)) <= set(r["population"])
    assert "actor_lr" in r["population"]["member_0"]


def test_changing_hyperparameters_triggers_no_recompilation():
    torch._dynamo.reset()
    algo = tiny(population_size=4, compile=True, compile_backend="eager", learning_starts=0, pbt_interval=10,
                pbt_fraction=0.25).build_algo()
    algo.train()
    n0 = dynamo_compile_count()
    assert n0 >= 1
    with torch._dynamo.config.patch(error_on_recompile=True):   # a recompile raises (not a silent eager fallback)
        algo.pbt.round(algo.num_updates)   # exploit + resample every member hyperparameter
        algo.hp["gamma"].fill_(0.5)
        algo.hp["policy_delay"].fill_(3.0)
        algo.train(); algo.train()
    assert dynamo_compile_count() == n0


# ----------------------------------------------------------------------------------------------
# checkpoints, config errors, other algorithms
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("cls", [PopTD3Config, PopSACConfig, PopDQNConfig, DvDConfig])
def test_checkpoint_resumes_bitwise(tmp_path, cls):
    kw = {"population_size": 4, "pbt_interval": 10, "pbt_fraction": 0.25} if cls is not DvDConfig else {}
    algo = tiny(cls, learning_starts=10, **kw).build_algo()
    algo.train(); algo.train()
    path = algo.save_to_path(str(tmp_path / "c"))
    r1 = algo.train()
    restored = Algorithm.from_checkpoint(path)
    r2 = restored.train()
    for a, b in zip(algo.get_module().parameters(), restored.get_module().parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert r1["population"]["num_updates_lifetime"] == r2["population"]["num_updates_lifetime"]
    for k in algo.hp.names:
        assert torch.equal(algo.hp[k], restored.hp[k])
    restored.stop()


@pytest.mark.parametrize("kw,needle", [
    ({"hyperparam_mutations": {"learning_rate": [1e-3]}}, "'learning_rate' is not a member hyperparameter"),
    ({"pbt_interval": 5, "population_size": 1}, "replaces no member"),
    ({"pbt_interval": 5, "pbt_fraction": 0.0}, "replaces no member"),
    ({"pbt_interval": "often"}, "None, 'auto' or a positive int"),
    ({"pbt_exploit_optimizer": "keep"}, "'reset', 'copy'"),
    ({"hyperparam_mutations": {"actor_lr": {"gauss": [1, 2]}}}, "`hyperparam_mutations`"),
])
def test_config_errors_name_the_key(kw, needle):
    with pytest.raises(ValueError, match=None) as err:
        tiny(**kw).build_algo()
    assert needle in str(err.value)


def test_tune_style_mutation_spec_and_shorthand():
    from ray import tune

    spec = M.normalize({"a": tune.loguniform(1e-4, 1e-2), "b": [1, 2, 3], "c": {"uniform": [0.0, 1.0]},
                        "d": lambda: 0.5})
    g = np.random.default_rng(0)
    assert 1e-4 <= M.sample(spec["a"], g) <= 1e-2 and M.sample(spec["d"], g) == 0.5
    v, op = M.explore(2, spec["b"], g, 0.0, (1.2, 0.8))
    assert op == "shift" and v in (1, 3)
    v, op = M.explore(0.5, spec["c"], g, 0.0, (1.2, 0.8))
    assert op.startswith("*") and v in (0.6, 0.4)


def test_sac_dqn_cemrl_dvd_train():
    for cls, kw in ((PopSACConfig, {}), (PopDQNConfig, {}),
                    (CEMRLConfig, {"population_size": 4, "cem_max_episode_steps": 20}), (DvDConfig, {})):
        algo = tiny(cls, **kw).build_algo()
        for _ in range(3):
            r = algo.train()
        assert r["population"]["num_updates_lifetime"] > 0, cls
        for p in algo.get_module().parameters():
            assert torch.isfinite(p).all()
        ev = algo.evaluate()
        assert math.isfinite(ev["env_runners"]["episode_return_mean"])


def test_cem_update_moves_mean_to_weighted_elites():
    algo = tiny(CEMRLConfig, population_size=4, cem_max_episode_steps=20).build_algo()
    P = algo.mu.numel()
    params = torch.stack([torch.full((P,), float(i)) for i in range(4)])
    algo.mu.zero_()
    noise = float(algo.cem_noise)
    algo.cem_update(params, np.array([0.0, 3.0, 1.0, 2.0]))   # elites: members 1 (best), 3
    w = np.log(3.0) - np.log([1.0, 2.0])
    w = w / w.sum()
    expect = w[0] * 1 + w[1] * 3
    assert float(algo.mu[0]) == pytest.approx(expect, rel=1e-5)
    assert float(algo.var[0]) == pytest.approx(w[0] * 1 + w[1] * 9 + noise, rel=1e-5)
    # antithetic sampling: mirrored pairs around the mean
    pop = algo.sample_population()
    assert torch.allclose(pop[0] + pop[2], 2 * algo.mu, atol=1e-5)
    # only the TD3-trained half moves its policy
    assert algo.train_mask.tolist() == [True, True, False, False]


def test_dvd_logdet_is_stable_and_couples_members():
    same = torch.zeros(5, 6, requires_grad=True)
    val = rbf_logdet(same, 1.0, 1e-4)
    assert torch.isfinite(val)                        # identical policies: no NaN
    emb = torch.randn(5, 6, requires_grad=True)
    (g,) = torch.autograd.grad(rbf_logdet(emb, 1.0, 1e-4), emb)
    assert bool((g.abs().sum(1) > 0).all())           # every member receives a diversity gradient
    spread = rbf_logdet(torch.randn(5, 6) * 10, 1.0, 1e-4)
    assert float(spread) > float(val.detach())                 # more diverse -> larger log-det


# ----------------------------------------------------------------------------------------------
# learning
# ----------------------------------------------------------------------------------------------
def test_poptd3_k4_learns_pendulum_best_member():
    cfg = PopTD3Config().environment("Pendulum").training(
        population_size=4, hidden_sizes=[64, 64], batch_size=128, actor_lr=1e-3, critic_lr=1e-3, gamma=0.98,
        tau=0.01, pbt_init="config", learning_starts=500, rollout_length=100, fitness_window=3,
        checkpoint_replay=False).debugging(seed=0)
    algo = cfg.build_algo()
    best = -math.inf
    for _ in range(80):      # <= 8000 env steps per member; seed 0 gets there at ~3200
        best = algo.train()["env_runners"]["episode_return_mean"]
        if best >= -250:
            break
    assert best >= -250, best


# ----------------------------------------------------------------------------------------------
# PopDQN on images: channels-last, as QNetwork reads them
# ----------------------------------------------------------------------------------------------
def test_popdqn_member_on_minatar_images_equals_a_qnetwork_with_its_weights():
    """MinAtar frames are ``[10, 10, C]``; each member must convolve over the 10x10
    plane with C input channels, exactly like ``QNetwork(trunk="minatar_cnn")``."""
    from rllib_fast.algorithms.population.dqn import StackedQNet
    from rllib_fast.core.qnets import QNetwork

    torch.manual_seed(0)
    K, shape, A = 3, (10, 10, 4), 5
    pop = StackedQNet(K, shape, A, (32,), "relu", "cpu")
    obs = (torch.rand(K, 6, *shape) < 0.3).to(torch.uint8)
    q_pop = pop(obs)
    for m in range(K):
        ref = QNetwork(shape, A, trunk="minatar_cnn", hidden_sizes=(32,))
        conv = ref.trunk[1].net[0]
        with torch.no_grad():
            conv.weight.copy_(pop.conv.weight[m])
            conv.bias.copy_(pop.conv.bias[m])
        ref.advantage.hidden = pop.head.layers[0].member(m)
        ref.advantage.out = pop.head.layers[1].member(m)
        torch.testing.assert_close(q_pop[m], ref(obs[m]), rtol=1e-5, atol=1e-5)


def test_popdqn_trains_on_minatar():
    algo = (PopDQNConfig().environment("minatar:breakout", num_envs=2)
            .training(population_size=2, hidden_sizes=[16], batch_size=8, learning_starts=8, rollout_length=4,
                      buffer_size=200, pbt_init="config", fused_update_steps=2)
            .debugging(seed=0)).build_algo()
    assert algo.q.conv.in_channels == algo.env.obs_shape[-1]
    algo.train(); algo.train()
    assert algo.num_updates > 0
    algo.stop()


def test_cemrl_update_budget_is_the_generations_total_env_steps():
    """CEM-RL: the critic gets as many steps as the last generation took env steps
    (all members' episodes together) and so does each trained actor; the
    untrained half does not move."""
    K, T = 4, 20
    algo = tiny(CEMRLConfig, population_size=K, cem_max_episode_steps=T, learning_starts=0,
                fused_update_steps=16).build_algo()
    algo.train()                                   # generation 0: evaluation only, no updates yet
    assert algo.num_updates == 0
    total = K * algo.n * T                         # Pendulum never terminates: every episode is cut at T
    assert algo.prev_generation_steps == total
    critic_steps = algo.critic_opt.step_count.clone()
    r = algo.train()
    assert algo.num_updates == total
    assert (algo.critic_opt.step_count - critic_steps == total).all()
    trained = algo.train_mask
    assert (algo.actor_opt.step_count[trained] == total).all()     # reset each generation, then `total` steps
    assert (algo.actor_opt.step_count[~trained] == 0).all()
    assert r["population"]["num_updates_lifetime"] == total


def test_in_trial_pbt_shifts_list_valued_mutations_to_a_neighbour():
    """Tune's PBT shifts a list-valued hyperparameter to its left/right neighbour
    (resample_probability 0). Member values are float32 tensors (0.995 reads back
    as 0.9950000047683716); they must still be found in the list."""
    g = np.random.default_rng(0)
    gammas = [0.98, 0.99, 0.995, 0.999]
    v, op = M.explore(float(torch.tensor(0.995)), gammas, g, 0.0, (1.2, 0.8))
    assert op == "shift" and v in (0.99, 0.999)
    assert M.list_index(float(torch.tensor(0.99)), gammas) == 1 and M.list_index(0.5, gammas) is None

    algo = tiny(population_size=8, pbt_fraction=0.5, pbt_interval=10, pbt_resample_probability=0.0,
                hyperparam_mutations={"gamma": gammas}).build_algo()
    for _ in range(5):
        algo.hp["gamma"].fill_(0.995)
        algo.returns.ring[:, 0] = torch.arange(8, dtype=torch.float64)   # every member has a fitness
        algo.returns.filled.fill_(1)
        info = algo.pbt.round(algo.num_updates)
        assert len(info["replaced"]) == 4
        for m in info["replaced"]:
            assert float(algo.hp["gamma"][m]) in (pytest.approx(0.99), pytest.approx(0.999)), m


def test_population_modules_import_no_private_names_and_sac_builds_only_its_own_policy():
    """Each population file uses public helpers only (no ``from .td3 import _b``),
    and PopSAC, a sibling of PopTD3, builds no deterministic actor or target policy."""
    import ast
    import pathlib

    import rllib_fast.algorithms.population as pop

    for path in pathlib.Path(pop.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.level > 0 or (node.module or "").startswith("rllib_fast")):
                private = [a.name for a in node.names if a.name.startswith("_")]
                assert not private, f"{path.name} imports {private} from {node.module}"
    from rllib_fast.algorithms.population.actor_critic import PopActorCritic
    from rllib_fast.algorithms.population.sac import PopSAC
    from rllib_fast.algorithms.population.td3 import PopTD3

    assert PopActorCritic in PopSAC.__bases__ and not issubclass(PopSAC, PopTD3)
    algo = tiny(PopSACConfig).build_algo()
    assert not hasattr(algo, "actor_t") and algo.actor.layers[-1].out_features == 2 * algo.act_dim


# -- found by a review ------------------------------------------------------------------------
def test_an_exploited_members_running_episodes_do_not_count_towards_its_fitness():
    from rllib_fast.algorithms.population.tracking import MemberReturns

    t = MemberReturns(2, 2, "cpu", window=4)
    ones, no = torch.ones(4), torch.zeros(4, dtype=torch.bool)
    for _ in range(3):
        t.update(ones * -10.0, no)                      # the losing policy's first 3 steps
    t.reset_members(torch.tensor([0]), discard_in_flight=True)   # exploit: member 0 replaced
    t.update(ones, torch.tensor([True, False, True, True]))      # member 0's env 0 ends (old episode)
    assert t.filled.tolist() == [0, 2] and t.episodes.tolist() == [1, 2]   # counted, not recorded
    t.update(ones, torch.tensor([False, True, False, False]))    # member 0's env 1 ends (old episode)
    assert t.filled.tolist() == [0, 2]
    t.update(ones * 2.0, torch.tensor([True, False, False, False]))  # env 0: an episode of the new policy
    assert t.filled.tolist() == [1, 2] and float(t.fitness()[0]) == 3.0  # 1 + 2, none of the old -10s
    state = t.in_flight()
    assert "discard" in state and not state["discard"].any()


def test_pbt_perturbs_an_integer_hyperparameter_as_an_int():
    # policy_delay's prior is randint: x1.2 twice from 2 is int(round(2.4)) = 2 each time (Tune's
    # rule), not the float 2.4 -> 2.88 that the update then rounded to a delay of 3
    algo = tiny(population_size=2, pbt_interval=10, pbt_init="config", policy_delay=2, learning_starts=0,
                pbt_resample_probability=0.0, pbt_perturbation_factors=[1.2],
                hyperparam_mutations={"policy_delay": {"randint": [1, 6]}}).build_algo()
    try:
        algo.train()
        for _ in range(2):
            algo.returns.ring[:, 0] = torch.tensor([-5.0, -1.0], dtype=torch.float64)
            algo.returns.filled.fill_(1)
            info = algo.pbt.round(algo.num_updates)                     # member 0 (worst) <- member 1, then x1.2
            m = info["replaced"][0]
            assert float(algo.hp["policy_delay"][m]) == 2.0
            algo.hp["policy_delay"][1] = algo.hp["policy_delay"][m]
    finally:
        algo.stop()
    assert M.integer_prior([1, 2, 3]) and not M.integer_prior([0.5, 1.0]) and not M.integer_prior([True])
