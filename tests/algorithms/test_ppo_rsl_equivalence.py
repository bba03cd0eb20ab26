"""FastPPO with every rsl_rl option (the ``parity`` arm of docs/sources.md's comparison) *is*
rsl_rl 5.4.2's PPO, number for number: on the same batch, from the same weights and the same
minibatch permutation, one whole update (5 epochs x 4 minibatches, per-minibatch analytic-KL
lr, per-network grad clip, whole-batch advantage normalisation, clipped value loss in return
units) leaves the same parameters and the same lr; and GAE with mjlab's time-out bootstrap
gives rsl_rl's ``compute_returns`` targets. So a difference in env steps to a target between
the two libraries at equal settings is not in the learning rule (docs/sources.md, "FastPPO vs
rsl_rl, difference by difference")."""
import pytest
import torch

rsl_rl = pytest.importorskip("rsl_rl")
tensordict = pytest.importorskip("tensordict")

from rsl_rl.algorithms import PPO  # noqa: E402
from rsl_rl.models import MLPModel  # noqa: E402
from rsl_rl.storage import RolloutStorage as RslStorage  # noqa: E402

from rllib_fast.algorithms.ppo import FastPPOConfig  # noqa: E402
from rllib_fast.core.rollout import compute_gae  # noqa: E402
from tests._benchmarks import load_benchmark  # noqa: E402

#: every rsl_rl option on (docs/sources.md "FastPPO vs rsl_rl", bar the env-side ones): the set the
#: benchmarks run as "rsl_rl's options" (benchmarks/suites.py owns it), so this test checks what they run
PARITY = load_benchmark("suites.py", "rllib_fast_suites_for_parity").RSL_RL_OPTIONS
#: mjlab's Cartpole rsl_rl config on FastPPO's keys
MAPPED = dict(num_epochs=5, num_minibatches=4, lr=1e-3, adaptive_lr_kl_target=0.01, gamma=0.99, lambda_=0.95,
              clip_param=0.2, vf_clip_param=0.2, entropy_coeff=0.01, grad_clip=1.0, hidden_sizes=[64, 64],
              activation="elu", init_log_std=0.0, normalize_obs=False)
GAMMA, LAM = 0.99, 0.95


def linears(net):
    return [m for m in net if isinstance(m, torch.nn.Linear)]


def rsl_models(obs_dim: int, act_dim: int, n: int):
    obs = tensordict.TensorDict({"policy": torch.zeros(n, obs_dim)}, batch_size=[n])
    groups = {"actor": ["policy"], "critic": ["policy"]}
    actor = MLPModel(obs, groups, "actor", act_dim, hidden_dims=(64, 64), activation="elu", obs_normalization=False,
                     distribution_cfg={"class_name": "GaussianDistribution", "init_std": 1.0, "std_type": "scalar"})
    critic = MLPModel(obs, groups, "critic", 1, hidden_dims=(64, 64), activation="elu", obs_normalization=False)
    return obs, actor, critic


def copy_weights(module, actor, critic) -> None:
    with torch.no_grad():
        for dst, src in [(actor.mlp, module.pi), (critic.mlp, module.vf)]:
            for a, b in zip(linears(dst), linears(src), strict=True):
                a.weight.copy_(b.weight)
                a.bias.copy_(b.bias)
        actor.distribution.std_param.copy_(module.std)


def test_parity_update_is_rsl_rl_update():
    n, t = 32, 16
    algo = (FastPPOConfig().environment("Pendulum", num_envs=n)
            .training(rollout_length=t, **{**MAPPED, **PARITY}).debugging(seed=1).build_algo())
    module, rule = algo.module, algo.update_rule
    for _ in range(2):   # a policy and lr that have moved
        algo.train()
    algo._rollout()
    batch = algo._batch(algo._targets())
    obs_dim, act_dim = batch.obs.shape[-1], batch.actions.shape[-1]

    obs_td, actor, critic = rsl_models(obs_dim, act_dim, n)
    copy_weights(module, actor, critic)
    storage = RslStorage("rl", n, t, obs_td, [act_dim], "cpu")
    lr = float(rule.optimizer.param_groups[0]["lr"])
    ppo = PPO(actor, critic, storage, num_learning_epochs=5, num_mini_batches=4, clip_param=0.2, gamma=GAMMA,
              lam=LAM, value_loss_coef=1.0, entropy_coef=0.01, learning_rate=lr, max_grad_norm=1.0,
              use_clipped_value_loss=True, schedule="adaptive", desired_kl=0.01)
    rule.optimizer.state.clear()   # both from a fresh Adam state

    def tn(x):
        return x.reshape(t, n, *x.shape[1:])

    with torch.no_grad():   # what rsl_rl stores at act(): the acting policy's mean and std
        mean, log_std = module.dist_params(batch.obs)
    storage.observations = tensordict.TensorDict({"policy": tn(batch.obs)}, batch_size=[t, n])
    storage.actions.copy_(tn(batch.actions))
    storage.values.copy_(tn(batch.old_values).unsqueeze(-1))
    storage.returns.copy_(tn(batch.value_targets).unsqueeze(-1))
    adv = tn(batch.advantages).unsqueeze(-1)   # rsl_rl normalises in compute_returns, FastPPO in the update
    storage.advantages = (adv - adv.mean()) / (adv.std() + 1e-8)
    storage.actions_log_prob.copy_(tn(batch.logp).unsqueeze(-1))
    storage.distribution_params = (tn(mean), tn(log_std.exp()))
    storage.step = t

    before = [p.detach().clone() for p in module.parameters()]
    torch.manual_seed(123)   # both draw their one permutation per update from torch's default generator
    rsl_losses = ppo.update()
    torch.manual_seed(123)
    ours = rule.learn(batch)

    assert float(ours["curr_lr"]) == pytest.approx(ppo.learning_rate, rel=1e-5)
    assert float(ours["policy_loss"]) == pytest.approx(rsl_losses["surrogate"], rel=1e-4, abs=1e-7)
    # FastPPO reports 0.5 * mean squared error; rsl_rl the mean
    assert 2 * float(ours["vf_loss"]) == pytest.approx(rsl_losses["value"], rel=1e-4)
    assert float(ours["entropy"]) == pytest.approx(rsl_losses["entropy"], rel=1e-5)
    # 1e-5: fused and per-tensor Adam round differently, and with eps 1e-8 an ulp of a tiny second
    # moment moves a parameter by up to ~lr * 1e-4 at the lr bound; the suite's worker processes
    # (other tests' thread and BLAS state) have shown 2.3e-6 on one element of 4096
    for dst, src in [(actor.mlp, module.pi), (critic.mlp, module.vf)]:
        for a, b in zip(linears(dst), linears(src)):
            torch.testing.assert_close(b.weight, a.weight, rtol=0, atol=1e-5)
            torch.testing.assert_close(b.bias, a.bias, rtol=0, atol=1e-5)
    torch.testing.assert_close(module.std.detach(), actor.distribution.std_param.detach(), rtol=0, atol=1e-5)
    # and the update moved them (not a comparison of two untouched networks)
    assert max(float((p.detach() - b).abs().max()) for p, b in zip(module.parameters(), before)) > 1e-3
    algo.stop()


def test_time_out_bootstrap_gae_is_rsl_rl_compute_returns():
    """mjlab's auto-reset (``exact_final_obs=False``): the adapter's ``final_obs`` of an ended
    env is the observation its last action was taken from, so FastPPO bootstraps a time-out
    from ``V(s_t)``: rsl_rl's ``reward += gamma * V(s_t) * time_out`` with the recursion cut at
    every done. Terminations (not time-outs) bootstrap nothing in either."""
    gen = torch.Generator().manual_seed(0)
    t, n, obs_dim = 24, 6, 5
    obs_td, actor, critic = rsl_models(obs_dim, 1, n)
    obs = torch.randn(t + 1, n, obs_dim, generator=gen)   # s_0 .. s_T (s_{t+1}: the reset observation where done)
    rewards = torch.rand(t, n, generator=gen) * 0.05
    time_out = torch.rand(t, n, generator=gen) < 0.08
    terminated = (torch.rand(t, n, generator=gen) < 0.05) & ~time_out
    done = time_out | terminated
    with torch.no_grad():
        values = critic(tensordict.TensorDict({"policy": obs[:t].reshape(t * n, -1)}, batch_size=[t * n]))
        values = values.reshape(t, n)
        last = critic(tensordict.TensorDict({"policy": obs[t]}, batch_size=[n])).reshape(n)

    storage = RslStorage("rl", n, t, obs_td, [1], "cpu")
    ppo = PPO(actor, critic, storage, gamma=GAMMA, lam=LAM)
    storage.rewards.copy_((rewards + GAMMA * values * time_out).unsqueeze(-1))   # process_env_step's bootstrap
    storage.dones.copy_(done.unsqueeze(-1))
    storage.values.copy_(values.unsqueeze(-1))
    storage.step = t
    ppo.normalize_advantage_per_mini_batch = True   # compare the raw advantages
    ppo.compute_returns(tensordict.TensorDict({"policy": obs[t]}, batch_size=[n]))

    next_values = torch.cat([values[1:], last.unsqueeze(0)])
    next_values = torch.where(done, values, next_values)   # V(final_obs): s_t where the env ended
    adv, ret = compute_gae(rewards, values, next_values, terminated, done, GAMMA, LAM)
    torch.testing.assert_close(adv, storage.advantages.squeeze(-1), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(ret, storage.returns.squeeze(-1), rtol=1e-5, atol=1e-6)


def test_parity_tracks_rsl_rl_runner_step_for_step_on_mjlab():
    """End to end on the real simulator: mjlab's own rsl_rl runner and FastPPO with every rsl_rl
    option (``clip_actions: false`` and ``exact_final_obs: false`` in the env too), from the same
    weights, the same env state and the same random stream, take the same actions at every env
    step of two whole iterations (rollout with time-out resets and bootstraps, GAE, a 5 x 4 update
    with per-minibatch lr adaptation) and end with the same lr sequence and weights, to float
    precision. Later iterations drift apart only as float noise grows (Adam at the lr bound 1e-2
    with eps 1e-8 amplifies ulp differences; FastPPO against itself with a 2e-7 weight nudge
    drifts the same way): docs/sources.md."""
    import dataclasses
    import os

    os.environ.setdefault("MJLAB_WARP_QUIET", "1")
    pytest.importorskip("mjlab")
    import mjlab.tasks  # noqa: F401
    from mjlab.envs import ManagerBasedRlEnv
    from mjlab.rl import RslRlVecEnvWrapper
    from mjlab.rl.runner import MjlabOnPolicyRunner
    from mjlab.tasks.registry import load_env_cfg, load_rl_cfg

    task, n, t = "Mjlab-Cartpole-Swingup", 32, 32
    rl_cfg = load_rl_cfg(task)
    env_cfg = load_env_cfg(task)
    env_cfg.scene.num_envs, env_cfg.seed, env_cfg.episode_length_s = n, 0, 10.0
    renv = RslRlVecEnvWrapper(ManagerBasedRlEnv(env_cfg, device="cpu"), clip_actions=rl_cfg.clip_actions)
    runner = MjlabOnPolicyRunner(renv, dataclasses.asdict(rl_cfg), None, "cpu")
    algo = (FastPPOConfig()
            .environment(f"mjlab:{task}", num_envs=n, env_device="cpu",
                         env_config={"cfg": {"episode_length_s": 10.0}, "clip_actions": False,
                                     "exact_final_obs": False})
            .training(rollout_length=t, **{**MAPPED, **PARITY}).debugging(seed=0).build_algo())
    module, rule = algo.module, algo.update_rule
    actor, critic = runner.alg.actor, runner.alg.critic
    copy_weights(module, actor, critic)

    # the same env state, clocks and stream: reset(seed) reseeds torch's default generator (mjlab's
    # seed_rng); FastPPO's draws come from its own stream (core/rng.py), reseeded inside it
    renv.env.reset(seed=7)
    with algo.rng_stream:
        algo.obs = algo.env.reset(seed=7)
        algo.env.randomize_episode_progress()   # rsl_rl's init_at_random_ep_len, first draw of learn()
    actions = {"rsl": [], "fast": []}
    lrs = {"rsl": [], "fast": []}
    r_step, f_step = renv.step, algo.env.step
    renv.step = lambda a: (actions["rsl"].append(a.clone()), r_step(a))[1]
    algo.env.step = lambda a: (actions["fast"].append(a.clone()), f_step(a))[1]
    r_opt_step = runner.alg.optimizer.step
    runner.alg.optimizer.step = lambda *a, **k: (lrs["rsl"].append(float(runner.alg.optimizer.param_groups[0]["lr"])),
                                                r_opt_step(*a, **k))[1]
    # the lr each step applies (FastPPO adapts it inside the gradient step, after the forward)
    f_opt_step = rule.optimizer.step
    rule.optimizer.step = lambda *a, **k: (lrs["fast"].append(float(rule.optimizer.param_groups[0]["lr"])),
                                           f_opt_step(*a, **k))[1]
    mb = t * n // 4
    for it in range(2):
        runner.learn(1, init_at_random_ep_len=(it == 0))
        algo.train()
        with algo.rng_stream:   # rsl_rl's update forward samples (and discards) an action per minibatch row
            for _ in range(20):
                torch.normal(torch.zeros(mb, 1), torch.ones(mb, 1))
    assert len(actions["rsl"]) == len(actions["fast"]) == 2 * t
    torch.testing.assert_close(torch.stack(actions["fast"]), torch.stack(actions["rsl"]), rtol=0, atol=1e-4)
    assert lrs["fast"] == pytest.approx(lrs["rsl"], rel=1e-5) and len(lrs["rsl"]) == 40
    assert len(set(lrs["rsl"])) > 1   # the adaptation did act
    for dst, src in [(actor.mlp, module.pi), (critic.mlp, module.vf)]:
        for a, b in zip(linears(dst), linears(src)):
            torch.testing.assert_close(b.weight, a.weight, rtol=0, atol=1e-4)
    torch.testing.assert_close(module.std.detach(), actor.distribution.std_param.detach(), rtol=0, atol=1e-5)
    algo.stop()
    renv.close()
