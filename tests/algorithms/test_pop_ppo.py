"""PopPPO: members are independent, act only on their own env slice, exploit copies exactly the
selected slices, a population of one is FastPPO, checkpoints resume exactly, PBT runs inside the
trial, and the best member learns CartPole and Pendulum."""
import math

import pytest
import torch
from ray.rllib.algorithms.algorithm import Algorithm

from rllib_fast.algorithms import FastPPOConfig, PopA2CConfig, PopPPOConfig
from rllib_fast.algorithms.onpolicy.batch import OnPolicyBatch
from rllib_fast.algorithms.ppo.algorithm import PPOUpdate
from rllib_fast.core.stacked import member_tensors



def ret(result):
    """The best member's fitness, as Tune sees it (env_runners/episode_return_mean)."""
    return result["env_runners"]["episode_return_mean"]


def tiny(env="CartPole", **kw):
    base = dict(population_size=3, num_envs_per_member=4, rollout_length=8, num_epochs=2, num_minibatches=2,
                hidden_sizes=[16, 16], decorrelate_steps=4, pbt_interval=None)
    base.update(kw)
    return PopPPOConfig().environment(env).training(**base).debugging(seed=0)


def _batch(algo):
    with algo.rng_stream:
        algo._rollout()
        adv, targets, old_v, w = algo._targets()
    return (algo.by_member("obs"), algo.by_member("actions"), algo.by_member("logp"), adv, targets, old_v,
            algo.by_member(algo.critic_key), w)


@pytest.mark.parametrize("env", ["CartPole", "Pendulum"])
def test_a_members_loss_has_no_gradient_on_other_members(env):
    algo = tiny(env).build_algo()
    obs, actions, logp, adv, targets, old_v, critic_in, w = _batch(algo)
    idx = torch.arange(16)
    losses = algo.loss(idx, obs, actions, logp, adv, targets, old_v, critic_in, w).loss
    assert losses.shape == (3,)
    for i in range(3):
        grads = torch.autograd.grad(losses[i], algo.params, retain_graph=True, allow_unused=True)
        for p, g in zip(algo.params, grads):
            assert g is not None and g.shape == p.shape
            others = [j for j in range(3) if j != i]
            assert float(g[others].abs().sum()) == 0.0
            # the value head sees the policy loss, the policy the value loss only through coefficients
        assert sum(float(g[i].abs().sum()) for g in grads) > 0.0
    algo.stop()


def test_member_k_transitions_come_only_from_its_env_slice():
    algo = tiny(normalize_obs=True).build_algo()
    K, n = algo.K, algo.n
    with torch.no_grad():   # member k always pushes the cart the same way: left for 0, right for 1, left for 2
        head = algo.module.pi.layers[-1]
        head.weight.zero_()
        head.bias.zero_()
        head.bias[:, 0, 0] = torch.tensor([50.0, -50.0, 50.0])
    counts_before = algo.module.obs_norm.count.clone()
    with algo.rng_stream:
        algo._rollout()
    acts = algo.storage["actions"].view(algo.horizon, K, n)
    assert torch.equal(acts[:, 0], torch.zeros_like(acts[:, 0]))
    assert torch.equal(acts[:, 1], torch.ones_like(acts[:, 1]))
    assert torch.equal(acts[:, 2], torch.zeros_like(acts[:, 2]))
    # each member's observation statistics absorbed exactly its own slice's observations
    raw = algo.storage["raw_obs"].view(algo.horizon, K, n, -1)
    assert torch.equal(algo.module.obs_norm.count - counts_before, torch.full((K,), float(algo.horizon * n),
                                                                         dtype=torch.float64))
    for k in range(K):
        own = raw[:, k].reshape(-1, raw.shape[-1]).double()
        others = torch.cat([raw[:, j].reshape(-1, raw.shape[-1]) for j in range(K) if j != k]).double()
        mean_k = algo.module.obs_norm.mean[k]
        assert (mean_k - own.mean(0)).abs().max() < (mean_k - others.mean(0)).abs().max()
    # by_member gives member k exactly the columns k*n .. k*n+n-1 of the shared env
    flat = algo.storage["actions"]
    for k in range(K):
        assert torch.equal(algo.by_member("actions")[k].view(algo.horizon, n), flat[:, k * n:(k + 1) * n])
    algo.stop()


@pytest.mark.parametrize("mode", ["copy", "reset"])
def test_exploit_copies_exactly_the_selected_slices(mode):
    algo = tiny("Pendulum", population_size=4, pbt_exploit_optimizer=mode, pbt_init="sample",
                normalize_obs=True).build_algo()
    algo.train()
    algo.train()
    opt = algo.optimizer.adam
    before = [t.clone() for t in member_tensors(algo.module)]
    moments = [opt.exp_avg.clone(), opt.exp_avg_sq.clone(), opt.step_count.clone()]
    lr = algo.optimizer.lr.clone()
    algo.optimizer.lr.copy_(torch.tensor([1e-3, 2e-3, 3e-3, 4e-3]))   # distinct adapted lrs
    lr = algo.optimizer.lr.clone()
    src, dst = torch.tensor([3, 0]), torch.tensor([1, 2])
    with algo.rng_stream:
        algo.exploit_members(src, dst)
    keep = torch.tensor([True, False, False, True])
    for b, a in zip(before, member_tensors(algo.module)):   # weights, log-std, obs/value normalisers
        assert torch.equal(a[dst], b[src])
        assert torch.equal(a[keep], b[keep])
    names = [k for k, _ in algo.module.named_buffers()]
    assert {"obs_norm.mean", "obs_norm.var", "obs_norm.count", "value_norm.mean", "value_norm.count"} <= set(names)
    if mode == "copy":
        for b, a in zip(moments, (opt.exp_avg, opt.exp_avg_sq, opt.step_count)):
            assert torch.equal(a[dst], b[src])
        assert torch.equal(algo.optimizer.lr[dst], lr[src])
    else:
        assert float(opt.exp_avg[dst].abs().sum()) == 0.0 and float(opt.step_count[dst].sum()) == 0.0
        assert torch.equal(algo.optimizer.lr[dst], algo.hp["lr"][src])
    for b, a in zip(moments, (opt.exp_avg, opt.exp_avg_sq, opt.step_count)):
        assert torch.equal(a[keep], b[keep])
    assert torch.equal(algo.optimizer.lr[keep], lr[keep])
    algo.stop()


def _fast_and_pop(env, seed=3, **common):
    f = FastPPOConfig().environment(env, num_envs=8).training(**common).debugging(seed=seed).build_algo()
    p = PopPPOConfig().environment(env).training(population_size=1, num_envs_per_member=8, **common) \
        .debugging(seed=seed).build_algo()
    return f, p


def _max_param_diff(f, p):
    out = 0.0
    for a, b in zip(f.module.parameters(), p.module.parameters()):
        b0 = b[0].t() if b[0].dim() == 2 and a.dim() == 2 else b[0]
        out = max(out, float((a - b0.reshape(a.shape)).detach().abs().max()))
    return out


@pytest.mark.parametrize("env", ["CartPole", "Pendulum"])
def test_population_of_one_is_fastppo_from_the_same_seed(env):
    """Same initial weights, observation statistics and draws, hence the same start-state
    decorrelation, rollouts, targets, minibatches, gradients, clipping and Adam steps: bit
    for bit over 10 iterations, with the gradient clip engaging (it once parted the runs
    by one ulp: a norm summed in the stack's layout rather than nn.Linear's)."""
    f, p = _fast_and_pop(env, rollout_length=16, num_epochs=2, num_minibatches=2)
    assert _max_param_diff(f, p) == 0.0
    assert torch.equal(f.obs, p.obs)
    assert torch.equal(f.module.obs_norm.mean, p.module.obs_norm.mean[0])
    for i in range(10):
        f.train(), p.train()
        assert torch.equal(f.storage["obs"], p.storage["obs"]) and torch.equal(f.storage["logp"], p.storage["logp"])
        assert _max_param_diff(f, p) == 0.0, i
        assert f.optimizer.param_groups[0]["lr"] == p.optimizer.opt.param_groups[0]["lr"]
    f.stop(), p.stop()


#: two members' distinct settings (every member hyperparameter PopPPO holds as a [K] tensor)
_MEMBERS = [dict(lr=1e-3, clip_param=0.1, entropy_coeff=0.0, vf_loss_coeff=0.5, adaptive_lr_kl_target=1e-6),
            dict(lr=3e-4, clip_param=0.3, entropy_coeff=0.01, vf_loss_coeff=1.0, adaptive_lr_kl_target=0.05)]


@pytest.mark.parametrize("env", ["CartPole", "Pendulum"])
def test_a_population_of_two_updates_as_two_fastppo_updates_with_the_members_settings(env):
    """One K=2 PopPPO update (StackedAdam: VectorAdam, per-member clip and adaptive lr on
    the device) equals, member by member, FastPPO's update (fused Adam, clip_grad_norm_, host
    adaptive lr) of the same weights on that member's batch under that member's settings.
    Equal up to float rounding: the stacked matmuls and VectorAdam's float32 arithmetic
    round differently from nn.Linear and the fused kernel (a population of one uses
    FastPPO's own optimizer and is bit for bit, above)."""
    common = dict(rollout_length=16, num_epochs=2, num_minibatches=2, hidden_sizes=[16, 16], grad_clip=0.05,
                  decorrelate_steps=4)
    pop = PopPPOConfig().environment(env).training(population_size=2, num_envs_per_member=8, pbt_interval=None,
                                                   pbt_init="config", **common).debugging(seed=0).build_algo()
    for k, member in enumerate(_MEMBERS):
        for key, value in member.items():
            pop.hp[key][k] = value
    pop.optimizer_hparams()                       # the members' lrs into the optimizer
    assert torch.allclose(pop.optimizer.lr, torch.tensor([m["lr"] for m in _MEMBERS]))
    with pop.rng_stream:
        pop._rollout()
        batch = pop._targets()
        before = [p.detach().clone() for p in pop.params]
        shuffles = torch.get_rng_state()
        pop.learn(batch)
    adv, targets, old_v, w = batch
    data = [pop.by_member(k) for k in ("obs", "actions", "logp", pop.critic_key)]
    for k, member in enumerate(_MEMBERS):
        fast = FastPPOConfig().environment(env, num_envs=8).training(**common, **member).debugging(seed=0) \
            .build_algo()
        with torch.no_grad():                     # member k's weights, in nn.Linear's layout
            for a, b in zip(fast.module.parameters(), before):
                a.copy_(b[k].t() if b[k].dim() == 2 and a.dim() == 2 else b[k].reshape(a.shape))
        one = OnPolicyBatch(*(x[k] for x in data), adv[k], targets[k], old_v[k], None if w is None else w[k])
        torch.set_rng_state(shuffles)             # the same minibatch permutations
        stats = fast.update_rule.learn(one)
        for a, b in zip(fast.module.parameters(), pop.params):
            b = b[k].t() if b[k].dim() == 2 and a.dim() == 2 else b[k].reshape(a.shape)
            torch.testing.assert_close(b.detach(), a.detach(), rtol=1e-4, atol=1e-6)
            moved = max(float((b[k].detach() - p0[k]).abs().max()) for b, p0 in zip(pop.params, before))
        assert moved > 1e-4                       # the update did move the member
        for i, key in enumerate(PPOUpdate.STATS):
            torch.testing.assert_close(pop.last_loss_stats[i, k], torch.as_tensor(stats[key]).float(),
                                       rtol=1e-4, atol=1e-6)
        assert float(pop.optimizer.lr[k]) == pytest.approx(fast.optimizer.param_groups[0]["lr"], rel=1e-6)
        fast.stop()
    # the adaptive lr moved apart: member 0's tight KL target shrank its lr, member 1's loose one grew it
    assert float(pop.optimizer.lr[0]) < _MEMBERS[0]["lr"] and float(pop.optimizer.lr[1]) > _MEMBERS[1]["lr"]
    pop.stop()


def test_checkpoint_resumes_bitwise(tmp_path):
    algo = tiny("Pendulum", population_size=4, pbt_interval=1, pbt_init="sample").build_algo()
    for _ in range(3):
        algo.train()
    path = algo.save_to_path(str(tmp_path / "c"))
    r1 = algo.train()
    restored = Algorithm.from_checkpoint(path)
    r2 = restored.train()
    for a, b in zip(member_tensors(algo.module), member_tensors(restored.module)):
        assert torch.equal(a, b)
    assert torch.equal(algo.optimizer.lr, restored.optimizer.lr)
    for k in algo.hp.names:
        assert torch.equal(algo.hp[k], restored.hp[k])
    assert r1["population"]["pbt_rounds"] == r2["population"]["pbt_rounds"]
    # the resumed iteration's update is the original's: the same losses, KL and lr, bit for bit
    # (its return is NaN in both: no 200-step Pendulum episode ends within these 32 steps)
    l1, l2 = r1["learners"]["default_policy"], r2["learners"]["default_policy"]
    for key in ("policy_loss", "vf_loss", "entropy", "mean_kl_loss", "curr_lr"):
        assert l1[key] == l2[key], key
    assert math.isnan(ret(r1)) and math.isnan(ret(r2))
    restored.stop()
    algo.stop()


def test_pbt_runs_inside_training_reports_members_and_keeps_the_simulator_running():
    algo = tiny(population_size=4, pbt_interval=2, pbt_init="sample", rollout_length=32).build_algo()
    resets = []
    reset = algo.env.reset
    algo.env.reset = lambda *a, **k: resets.append(1) or reset(*a, **k)
    rounds = 0
    for _ in range(8):
        r = algo.train()
        rounds = r["population"]["pbt_rounds"]
    assert rounds >= 1 and algo.pbt.last_info["replaced"]
    assert resets == []     # PBT never resets the shared simulator
    for m in range(4):
        member = r["population"][f"member_{m}"]
        assert {"episode_return_mean", "lr", "clip_param", "entropy_coeff", "vf_loss_coeff", "lambda_", "gamma",
                "adaptive_lr_kl_target"} <= set(member)
    fit = [r["population"][f"member_{m}"]["episode_return_mean"] for m in range(4)]
    assert ret(r) == max(v for v in fit if not math.isnan(v))
    # the best member is what get_module() and compute_actions act with
    module = algo.get_module()
    assert module.member == algo.best_member()
    obs = algo.obs[:5]
    with torch.no_grad():
        a = module.forward_inference({"obs": obs})["actions"]
    assert torch.equal(a, algo.compute_actions(obs, explore=False))
    one = module.select()
    assert torch.equal(one.forward_inference({"obs": obs})["actions"], a)
    algo.stop()


@pytest.mark.parametrize("kw,needle", [
    ({"hyperparam_mutations": {"actor_lr": [1e-3]}}, "'actor_lr' is not a member hyperparameter"),
    ({"hyperparam_mutations": {"adaptive_lr_kl_target": [0.01]}, "adaptive_lr_kl_target": None},
     "the adaptive lr is off"),
    ({"pbt_interval": 5, "population_size": 1}, "replaces no member"),
    ({"num_minibatches": 64}, "each member's batch"),
    ({"hyperparam_mutations": {"gamma": {"uniform": [0.9, 1.5]}}}, "`hyperparam_mutations`"),
])
def test_config_errors_name_the_key(kw, needle):
    with pytest.raises(ValueError, match=needle):
        tiny(**kw).validate()


def test_initial_hyperparameters_from_a_list_a_range_or_a_prior():
    cfg = tiny(population_size=4, pbt_init="sample",
               hyperparam_mutations={"lr": [1e-4, 1e-3], "clip_param": {"uniform": [0.1, 0.3]},
                                     "gamma": {"uniform": [0.95, 0.99]}})
    algo = cfg.build_algo()
    assert all(min(abs(v - 1e-4), abs(v - 1e-3)) < 1e-9 for v in algo.hp["lr"].tolist())
    assert all(0.1 <= v <= 0.3 for v in algo.hp["clip_param"].tolist())
    assert all(0.95 <= v <= 0.99 for v in algo.hp["gamma"].tolist())
    assert torch.equal(algo.optimizer.lr, algo.hp["lr"])
    assert torch.equal(algo.hp["entropy_coeff"], torch.zeros(4))   # not in the spec: the config's value
    algo.stop()


def test_popa2c_trains():
    algo = PopA2CConfig().environment("CartPole").training(population_size=2, num_envs_per_member=4,
                                                           hidden_sizes=[16], decorrelate_steps=2) \
        .debugging(seed=0).build_algo()
    r = algo.train()
    assert r["population"]["num_updates_lifetime"] == 1
    algo.stop()


def _best_until(cfg, threshold, max_iters):
    algo = cfg.build_algo()
    best = -math.inf
    for _ in range(max_iters):
        r = ret(algo.train())
        best = max(best, r if r == r else -math.inf)
        if best >= threshold:
            break
    algo.stop()
    return best


@pytest.mark.slow
def test_popppo_learns_cartpole_best_member():
    """K=8 members of 16 envs (FastPPO's defaults each, PBT every 8 iterations): the best member's
    recent mean return reaches 475."""
    cfg = PopPPOConfig().environment("CartPole").training(
        population_size=8, num_envs_per_member=16, pbt_interval=8).debugging(seed=0)
    assert _best_until(cfg, 475, 60) >= 475


@pytest.mark.slow
def test_popppo_learns_pendulum_best_member():
    """PopPPO K=8 x 16 envs with PBT every 8 iterations: the best member reaches -200 on
    Pendulum (seed 0)."""
    cfg = PopPPOConfig().environment("Pendulum").training(
        population_size=8, num_envs_per_member=16, pbt_interval=8).debugging(seed=0)
    assert _best_until(cfg, -200, 60) >= -200


def test_mlflow_records_each_members_return_and_hyperparameters():
    from rllib_fast.tune.mlflow import DEFAULT_EXCLUDE, DEFAULT_KEYS, DEFAULT_PREFIXES, select_metrics

    # 32 CartPole steps per env: every member finishes episodes in the first iteration
    algo = tiny(population_size=2, pbt_init="sample", rollout_length=32).build_algo()
    r = algo.train()
    algo.stop()
    assert math.isfinite(ret(r))
    values = select_metrics(r, DEFAULT_KEYS, DEFAULT_PREFIXES, DEFAULT_EXCLUDE)
    for m in range(2):
        for key in ("lr", "clip_param", "gamma", "lambda_", "entropy_coeff", "vf_loss_coeff"):
            assert values[f"population/member_{m}/{key}"] == r["population"][f"member_{m}"][key]
    assert values["env_runners/episode_return_mean"] == ret(r)


def test_export_the_best_member_or_member_k(tmp_path):
    from rllib_fast.export import export_checkpoint, load_policy_module

    algo = tiny("Pendulum", population_size=3, pbt_init="sample").build_algo()
    algo.train()
    algo.train()
    obs = algo.obs[:4]
    path = algo.save_to_path(str(tmp_path / "c"))
    for member in (None, 2):
        live = algo.get_module(member=member).select()
        loaded = load_policy_module(path, member=member if member is not None else None)
        with torch.no_grad():
            a = live.forward_inference({"obs": obs})["actions"]
        if member is None:   # the checkpoint's module is the best member at save time
            assert torch.equal(loaded.forward_inference({"obs": obs})["actions"], a)
        assert a.shape == (4, 1)
    with pytest.raises(ValueError, match="allowed: None"):
        algo.get_module(member=3)
    out = algo.export_policy(str(tmp_path / "p.pt"), format="torchscript", member=1)
    scripted = torch.jit.load(out)
    with torch.no_grad():
        expect = algo.get_module(member=1).select().forward_inference({"obs": obs})["actions"]
    assert torch.allclose(scripted(obs), expect)
    assert export_checkpoint(path, format="torchscript").endswith("policy.pt")
    algo.stop()


def test_tune_runs_a_popppo_trial_and_sees_the_best_members_return(tmp_path):
    import ray
    from ray import tune

    import rllib_fast

    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    rllib_fast.register()  # Tune's registry is per Ray session (an earlier test may have shut one down)
    try:
        space = tiny(population_size=2).to_dict()
        res = tune.Tuner("PopPPO", param_space=space, run_config=tune.RunConfig(
            storage_path=str(tmp_path), stop={"training_iteration": 6}, verbose=0)).fit()
        r = res[0].metrics
        assert r["training_iteration"] == 6
        assert "member_1" in r["population"]
        fit = [r["population"][f"member_{m}"]["episode_return_mean"] for m in range(2)]
        assert ret(r) == max(v for v in fit if not math.isnan(v))
    finally:
        ray.shutdown()


@pytest.mark.usefixtures("isolated_run")
def test_rllib_train_file_runs_the_shipped_popppo_experiment_and_evaluates_its_best_member(capsys):
    """``rllib train file tune_configs/pop-ppo-cartpole.yaml`` (stop shortened, smaller members),
    then ``rllib evaluate`` of its checkpoint: the CLI path a user takes, end to end."""
    import json
    import os
    from pathlib import Path

    from rllib_fast.cli import main

    path = Path(__file__).resolve().parents[2] / "tune_configs" / "pop-ppo-cartpole.yaml"
    rc = main(["train", "file", str(path), "--stop", '{"training_iteration": 2}', "--no-mlflow",
               "--config", json.dumps({"num_envs_per_member": 4, "rollout_length": 16}), "--ray-num-cpus", "2"])
    out = capsys.readouterr().out
    assert rc == 0, out[-3000:]
    assert "2 iterations" in out, out[-3000:]
    (ckpt,) = [ln.split("checkpoint: ", 1)[1].strip() for ln in out.splitlines() if "checkpoint: " in ln][:1]
    assert os.path.isfile(os.path.join(ckpt, "rllib_checkpoint.json"))
    assert main(["evaluate", ckpt, "--episodes", "2"]) == 0
    assert "over 2 episodes" in capsys.readouterr().out
