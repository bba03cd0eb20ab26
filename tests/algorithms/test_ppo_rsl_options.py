"""FastPPO's rsl_rl options (docs/sources.md, "FastPPO vs rsl_rl, difference by
difference"): each gives rsl_rl 5.4.2's behaviour for one difference, the default
keeps FastPPO's own."""
import math

import pytest
import torch
from torch import nn

from rllib_fast.algorithms.ppo import FastPPOConfig
from rllib_fast.core.nets import mlp


def small(env="Pendulum", n=8, **kw):
    kw.setdefault("rollout_length", 8)
    return FastPPOConfig().environment(env, num_envs=n).training(**kw).debugging(seed=3)


def linears(net):
    return [m for m in net if isinstance(m, nn.Linear)]


def test_torch_init_is_nn_linear_default_and_orthogonal_is_unchanged():
    torch.manual_seed(0)
    ref = [nn.Linear(32, 256), nn.Linear(256, 256), nn.Linear(256, 4)]
    torch.manual_seed(0)
    net = mlp(32, [256, 256], 4, "elu", out_gain=0.01, init="torch").requires_grad_(False)
    for got, want in zip(linears(net), ref):   # the same draws as nn.Linear's own init
        torch.testing.assert_close(got.weight, want.weight, rtol=0, atol=0)
        torch.testing.assert_close(got.bias, want.bias, rtol=0, atol=0)
        bound = 1 / math.sqrt(got.in_features)   # Kaiming-uniform(a=sqrt 5) = U(+-1/sqrt(fan_in)); same bias
        assert float(got.weight.abs().max()) <= bound and float(got.bias.abs().max()) <= bound
        assert float(got.bias.abs().max()) > 0.5 * bound
    ortho = mlp(32, [256, 256], 4, "elu", out_gain=0.01).requires_grad_(False)
    for lin in linears(ortho):
        assert float(lin.bias.abs().max()) == 0.0
    w = linears(ortho)[0].weight   # 256 x 32, gain sqrt 2: orthonormal columns scaled by sqrt 2
    torch.testing.assert_close(w.T @ w, 2.0 * torch.eye(32), atol=1e-4, rtol=0)
    assert float(linears(ortho)[-1].weight.norm(dim=1).max()) == pytest.approx(0.01, rel=1e-4)


def test_init_option_reaches_the_module_and_survives_a_checkpoint(tmp_path):
    from ray.rllib.algorithms.algorithm import Algorithm

    algo = small(init="torch", hidden_sizes=[16, 16]).build_algo()
    head = linears(algo.module.pi)[-1]
    assert float(head.bias.abs().max()) > 0   # not the orthogonal init's zero bias
    assert float(head.weight.norm(dim=1).max()) > 0.05   # not the 0.01-gain head
    path = algo.save_to_path(str(tmp_path / "c"))
    restored = Algorithm.from_checkpoint(path)
    assert restored.config.init == "torch"
    for a, b in zip(algo.module.parameters(), restored.module.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    algo.stop(); restored.stop()


def test_init_default_is_orthogonal():
    algo = small(hidden_sizes=[16, 16]).build_algo()
    assert algo.config.init == "orthogonal"
    assert all(float(lin.bias.abs().max()) == 0.0 for lin in linears(algo.module.pi))
    algo.stop()


def test_init_validation_names_key_and_allowed_values():
    with pytest.raises(ValueError, match=r"`init` = 'xavier'.*allowed: one of 'orthogonal', 'torch'"):
        small(init="xavier").validate()


# -- adaptive_lr_every, kl_estimator ------------------------------------------------
def record_step_lrs(algo):
    """The lr each gradient step of the update reads (recorded on the host, test only)."""
    seen, rule = [], algo.update_rule
    step = rule.gradient_step

    def recording(batch, idx, denom):
        seen.append(float(rule.optimizer.param_groups[0]["lr"]))
        return step(batch, idx, denom)

    rule.gradient_step = recording
    return seen


def test_minibatch_lr_adaptation_changes_lr_between_minibatches_without_host_floats():
    algo = small(adaptive_lr_every="minibatch", num_epochs=2, num_minibatches=4, lr=1e-4).build_algo()
    rule = algo.update_rule
    lr_types = []
    step = rule.gradient_step

    def typed(batch, idx, denom):   # the optimizer holds a device tensor during the update
        lr_types.append(torch.is_tensor(rule.optimizer.param_groups[0]["lr"]))
        return step(batch, idx, denom)

    rule.gradient_step = typed
    seen = record_step_lrs(algo)
    algo.train()
    assert len(seen) == 8 and all(lr_types)
    # tiny steps at lr 1e-4: KL far under half the target, so the lr grows x1.5 per minibatch
    # (not on the first one: its KL is ~0 at most, old = new) within one update
    ratios = [b / a for a, b in zip(seen, seen[1:])]
    assert all(r == pytest.approx(1.5, rel=1e-5) for r in ratios[1:]), seen
    assert len(set(round(x, 12) for x in seen)) >= 7
    lr_after = rule.optimizer.param_groups[0]["lr"]
    assert isinstance(lr_after, float)   # a float again between updates (logs, checkpoints)
    assert algo.train()["learners"]["default_policy"]["curr_lr"] >= lr_after
    algo.stop()


def test_epoch_lr_adaptation_keeps_lr_fixed_within_an_epoch():
    algo = small(num_epochs=2, num_minibatches=4, lr=1e-4).build_algo()
    seen = record_step_lrs(algo)
    algo.train()
    assert len(set(seen[:4])) == 1 and len(set(seen[4:])) == 1 and seen[4] == pytest.approx(1.5 * seen[0])
    algo.stop()


def test_kl_adapted_lr_grows_only_at_positive_kl_when_asked():
    from rllib_fast.algorithms.ppo.loss import kl_adapted_lr

    assert kl_adapted_lr(1e-3, 0.0, 0.01, 1e-5, 1e-2) == pytest.approx(1.5e-3)
    assert kl_adapted_lr(1e-3, 0.0, 0.01, 1e-5, 1e-2, grow_at_zero=False) == 1e-3
    assert kl_adapted_lr(1e-3, 1e-4, 0.01, 1e-5, 1e-2, grow_at_zero=False) == pytest.approx(1.5e-3)
    t = kl_adapted_lr(torch.tensor(1e-3), torch.tensor(0.0), 0.01, 1e-5, 1e-2, grow_at_zero=False)
    assert float(t) == pytest.approx(1e-3)
    t = kl_adapted_lr(torch.tensor(1e-3), torch.tensor(0.05), 0.01, 1e-5, 1e-2, grow_at_zero=False)
    assert float(t) == pytest.approx(1e-3 / 1.5)


def test_analytic_kl_matches_torch_distributions():
    from torch.distributions import Categorical, Normal, kl_divergence

    from rllib_fast.algorithms.ppo.loss import analytic_kl

    g = torch.Generator().manual_seed(0)
    m0, m1 = torch.randn(5, 3, generator=g), torch.randn(5, 3, generator=g)
    s0, s1 = 0.3 * torch.randn(5, 3, generator=g), 0.3 * torch.randn(3, generator=g)
    want = kl_divergence(Normal(m0, s0.exp()), Normal(m1, s1.exp())).sum(-1)
    torch.testing.assert_close(analytic_kl(m0, s0, m1, s1), want)
    l0, l1 = torch.randn(5, 4, generator=g), torch.randn(5, 4, generator=g)
    torch.testing.assert_close(analytic_kl(l0, None, l1, None),
                               kl_divergence(Categorical(logits=l0), Categorical(logits=l1)))


@pytest.mark.parametrize("env", ["Pendulum", "CartPole"])
@pytest.mark.parametrize("every", ["epoch", "minibatch"])
def test_analytic_kl_estimator_adapts_lr(env, every):
    algo = small(env, kl_estimator="analytic", adaptive_lr_every=every, lr=1e-4).build_algo()
    r = algo.train()["learners"]["default_policy"]
    assert r["curr_lr"] > 1e-4 and math.isfinite(r["policy_loss"])
    algo.stop()


def test_minibatch_lr_adaptation_under_compile_matches_eager(monkeypatch):
    from rllib_fast.core import compile as compile_mod

    monkeypatch.setattr(compile_mod, "BACKEND", "aot_eager")
    kw = dict(adaptive_lr_every="minibatch", lr=1e-4, hidden_sizes=[32])
    eager = small("CartPole", **kw).build_algo()
    comp = small("CartPole", compile=True, **kw).build_algo()
    assert comp.update_rule.whole_step is not None
    for _ in range(2):
        a = eager.train()["learners"]["default_policy"]["curr_lr"]
        b = comp.train()["learners"]["default_policy"]["curr_lr"]
        assert b == pytest.approx(a, rel=1e-5)
    for p, q in zip(eager.module.parameters(), comp.module.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)
    eager.stop(); comp.stop()


@pytest.mark.parametrize("env", ["Pendulum", "CartPole"])
def test_previous_epoch_kl_measures_from_where_the_last_epoch_left_each_sample(env):
    """rl_games' KL: each minibatch's KL is read from the Gaussians its samples had when the
    previous epoch stepped on them, so a second read with no step between is 0 while the
    update-start reference still sees the whole movement."""
    kls = {}
    for ref in ("update_start", "previous_epoch"):
        gen = torch.Generator().manual_seed(0)
        algo = small(env, kl_estimator="analytic", kl_reference=ref).build_algo()
        rule = algo.update_rule
        algo._rollout()
        batch = algo._batch(algo._targets())
        start = rule._start_policy(batch)
        with torch.no_grad():   # an epoch's step moved the policy
            for p in algo.module.pi.parameters():
                p.add_(0.05 * torch.randn(p.shape, generator=gen))
        idx = torch.arange(batch.actions.shape[0])
        first = float(rule._minibatch_kl(batch, idx, None, start))
        second = float(rule._minibatch_kl(batch, idx, None, start))
        kls[ref] = (first, second)
        algo.stop()
    assert kls["update_start"][0] > 1e-4 and kls["update_start"][1] == pytest.approx(kls["update_start"][0])
    assert kls["previous_epoch"][0] > 1e-4
    assert kls["previous_epoch"][1] == pytest.approx(0.0, abs=1e-7)


def test_previous_epoch_kl_trains_and_needs_the_analytic_estimator():
    algo = small(kl_estimator="analytic", kl_reference="previous_epoch", lr=1e-4, num_epochs=3).build_algo()
    r = algo.train()["learners"]["default_policy"]
    assert r["curr_lr"] > 1e-4 and math.isfinite(r["policy_loss"])
    algo.stop()
    with pytest.raises(ValueError, match=r"`kl_reference` = 'previous_epoch'.*allowed: kl_estimator = 'analytic'"):
        small(kl_reference="previous_epoch").validate()


@pytest.mark.parametrize("key,value,allowed", [("adaptive_lr_every", "step", "'epoch', 'minibatch'"),
                                               ("kl_estimator", "exact", "'k3', 'analytic'")])
def test_kl_option_validation(key, value, allowed):
    with pytest.raises(ValueError, match=rf"`{key}` = '{value}'.*allowed: one of {allowed}"):
        small(**{key: value}).validate()


# -- normalize_advantages_over, grad_clip_scope, shuffle, adam_eps, std_param, clip_actions
def record_steps(algo):
    """(advantages, minibatch indices) each gradient step of the update sees."""
    seen, rule = [], algo.update_rule
    step = rule.gradient_step

    def recording(batch, idx, denom):
        seen.append((batch.advantages.clone(), idx.clone()))
        return step(batch, idx, denom)

    rule.gradient_step = recording
    return seen


def test_batch_advantage_normalisation_uses_whole_batch_unbiased_stats():
    algo = small(normalize_advantages_over="batch").build_algo()
    seen = record_steps(algo)
    algo.train()
    adv = seen[0][0]
    assert float(adv.mean()).__abs__() < 1e-5 and float(adv.std(unbiased=True)) == pytest.approx(1.0, abs=1e-4)
    for a, idx in seen:   # the same standardised batch for every minibatch (not re-standardised per minibatch)
        torch.testing.assert_close(a, adv, rtol=0, atol=0)
    algo.stop()
    default = small().build_algo()
    seen = record_steps(default)
    default.train()
    assert float(seen[0][0].std()) != pytest.approx(1.0, abs=1e-2)   # raw: standardised inside each minibatch's loss
    default.stop()


def test_standardize_unbiased_matches_torch_std():
    from rllib_fast.algorithms.onpolicy.reductions import standardize

    a = torch.randn(10, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(standardize(a, None, unbiased=True), (a - a.mean()) / (a.std() + 1e-8))
    torch.testing.assert_close(standardize(a, None), (a - a.mean()) / (a.std(unbiased=False) + 1e-8))


def test_shuffle_once_reuses_the_permutation_every_epoch():
    algo = small(shuffle="once", num_epochs=3, num_minibatches=2).build_algo()
    seen = record_steps(algo)
    algo.train()
    idx = [i for _, i in seen]
    assert len(idx) == 6 and all(torch.equal(idx[k], idx[k % 2]) for k in range(6))
    default = small(num_epochs=3, num_minibatches=2).build_algo()
    seen = record_steps(default)
    default.train()
    assert not torch.equal(seen[0][1], seen[2][1])
    algo.stop(); default.stop()


def test_per_network_grad_clip_bounds_actor_and_critic_separately():
    algo = small(grad_clip_scope="per_network", grad_clip=1e-3).build_algo()
    rule = algo.update_rule
    actor, critic = rule.clip_groups()
    names = {id(p): n for n, p in algo.module.named_parameters()}
    assert {names[id(p)] for p in critic} == {n for n in names.values() if n.startswith("vf.")}
    assert len(actor) + len(critic) == len(rule.params)
    norms = []
    step = rule.optimizer.step

    def recording(*a, **k):
        norms.append([float(torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in g]))) for g in (actor, critic)])
        return step(*a, **k)

    rule.optimizer.step = recording
    algo.train()
    assert norms and all(n <= 1e-3 * (1 + 1e-4) for pair in norms for n in pair)
    # each clipped to the bound: together above it (global clipping would keep the total at 1e-3)
    assert any(math.hypot(*pair) > 1.2e-3 for pair in norms)
    algo.stop()


def test_per_network_grad_clip_is_not_compiled_whole():
    from rllib_fast.algorithms.onpolicy.whole_step import WholeGradientStep

    algo = small(grad_clip_scope="per_network").build_algo()
    assert not WholeGradientStep.applies(algo.update_rule)
    assert WholeGradientStep.applies(small().build_algo().update_rule)


def test_adam_eps_reaches_the_optimizer():
    assert small(adam_eps=1e-8).build_algo().optimizer.param_groups[0]["eps"] == 1e-8
    assert small().build_algo().optimizer.param_groups[0]["eps"] == 1e-5


def test_scalar_std_parameter():
    algo = small(std_param="scalar", init_log_std=math.log(0.5)).build_algo()
    m = algo.module
    assert not hasattr(m, "log_std") and "std" in dict(m.named_parameters())
    torch.testing.assert_close(m.std.detach(), torch.full((1,), 0.5))
    _, log_std = m.dist_params(torch.zeros(4, 3))
    torch.testing.assert_close(log_std.detach(), torch.full((4, 1), math.log(0.5)))
    before = m.std.detach().clone()
    algo.train()
    assert not torch.equal(m.std.detach(), before)
    algo.stop()


def test_clip_actions_false_passes_actions_through():
    clipped, free = small().build_algo(), small(clip_actions=False).build_algo()
    a = torch.tensor([[3.0], [-0.5]])   # Pendulum: [-1, 1] -> [-2, 2]
    torch.testing.assert_close(clipped.module.to_env_action(a), torch.tensor([[2.0], [-1.0]]))
    torch.testing.assert_close(free.module.to_env_action(a), torch.tensor([[6.0], [-1.0]]))
    clipped.stop(); free.stop()


def test_mjlab_adapter_clip_actions_false_advertises_bounds_and_does_not_clamp():
    pytest.importorskip("mjlab")
    from rllib_fast.envs import make

    env = make("mjlab:Mjlab-Cartpole-Balance", num_envs=2, seed=0, clip_actions=False)
    assert float(env.single_action_space.high[0]) == 1.0 and env._clamp_actions is False
    seen = []
    inner = env.env.step

    def recording(actions):
        seen.append(actions.clone())
        return inner(actions)

    env.env.step = recording
    env.reset()
    env.step(torch.full((2, 1), 5.0))
    assert float(seen[-1].max()) == 5.0
    env.close()


@pytest.mark.parametrize("key,value,allowed", [
    ("normalize_advantages_over", "all", "'minibatch', 'batch'"), ("grad_clip_scope", "actor", "'global', 'per_network'"),
    ("shuffle", "never", "'epoch', 'once'"), ("std_param", "exp", "'log', 'scalar'"),
    ("kl_reference", "start", "'auto', 'behaviour', 'update_start', 'previous_epoch'")])
def test_rsl_option_validation(key, value, allowed):
    with pytest.raises(ValueError, match=rf"`{key}` = '{value}'.*allowed: one of {allowed}"):
        small(**{key: value}).validate()


def test_adam_eps_and_clip_actions_validation():
    with pytest.raises(ValueError, match=r"`adam_eps`"):
        small(adam_eps=0.0).validate()
    with pytest.raises(ValueError, match=r"`clip_actions`"):
        small(clip_actions="no").validate()


def test_every_rsl_option_resumes_exactly_from_a_checkpoint(tmp_path):
    from ray.rllib.algorithms.algorithm import Algorithm

    rsl = dict(init="torch", std_param="scalar", clip_actions=False, adaptive_lr_every="minibatch",
               kl_estimator="analytic", adaptive_lr_bounds=[1e-5, 1e-2], normalize_advantages_over="batch",
               grad_clip_scope="per_network", grad_clip=1.0, shuffle="once", adam_eps=1e-8)
    algo = small(**rsl).build_algo()
    algo.train()
    path = algo.save_to_path(str(tmp_path / "c"))
    r1 = algo.train()["learners"]["default_policy"]
    restored = Algorithm.from_checkpoint(path)
    r2 = restored.train()["learners"]["default_policy"]
    assert r1["curr_lr"] == r2["curr_lr"] and r1["policy_loss"] == r2["policy_loss"]
    for a, b in zip(algo.module.parameters(), restored.module.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    algo.stop(); restored.stop()
