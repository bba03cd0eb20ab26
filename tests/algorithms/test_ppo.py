"""FastPPO behaviour: checkpoints, RLModule inference, evaluation, batch rules,
masking of straddling transitions, and seeded learning thresholds."""
import numpy as np
import pytest
import torch
from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.core.columns import Columns

from rllib_fast.algorithms.ppo import FastPPO, FastPPOConfig, FastPPOModule
from rllib_fast.envs import TensorVecEnv
from tests.algorithms._learning import best_return


def small(env="CartPole", n=8, **kw):
    kw.setdefault("rollout_length", 8)
    return FastPPOConfig().environment(env, num_envs=n).training(**kw).debugging(seed=3)


def params(algo):
    return torch.cat([p.detach().flatten() for p in algo.module.parameters()])


@pytest.mark.parametrize("env", ["CartPole", "Pendulum"])
def test_checkpoint_restore_gives_identical_next_iteration(tmp_path, env):
    algo = small(env).build_algo()
    algo.train(); algo.train()
    path = algo.save_to_path(str(tmp_path / "ckpt"))
    r1 = algo.train()
    p1 = params(algo)
    restored = Algorithm.from_checkpoint(path)
    assert isinstance(restored, FastPPO) and restored.training_iteration == 2
    r2 = restored.train()
    torch.testing.assert_close(params(restored), p1, rtol=0, atol=0)
    torch.testing.assert_close(restored.obs, algo.obs, rtol=0, atol=0)
    assert r2["num_env_steps_sampled_lifetime"] == r1["num_env_steps_sampled_lifetime"]
    assert r2["learners"]["default_policy"]["policy_loss"] == r1["learners"]["default_policy"]["policy_loss"]
    algo.stop(); restored.stop()


def test_get_module_is_rl_module_usable_for_inference_from_checkpoint(tmp_path):
    algo = small().build_algo()
    algo.train()
    path = algo.save_to_path(str(tmp_path / "c"))
    module = Algorithm.from_checkpoint(path).get_module()
    assert isinstance(module, FastPPOModule)
    obs = torch.zeros(5, 4)
    out = module.forward_inference({Columns.OBS: obs})
    assert out[Columns.ACTIONS].shape == (5,) and out[Columns.ACTION_DIST_INPUTS].shape == (5, 2)
    assert module.compute_values({Columns.OBS: obs}).shape == (5,)
    # the normaliser travels with the module
    torch.testing.assert_close(module.obs_norm.mean, algo.module.obs_norm.mean)


def test_continuous_module_outputs_env_scaled_actions():
    algo = small("Pendulum", std_mode="state_dependent").build_algo()
    a = algo.compute_actions(torch.randn(16, 3), explore=True)
    assert a.shape == (16, 1) and float(a.abs().max()) <= 2.0 + 1e-6
    algo.train()
    assert np.isfinite(algo.train()["learners"]["default_policy"]["policy_loss"])


def test_evaluate_runs_fresh_episodes_and_reports_standard_keys():
    cfg = small().evaluation(evaluation_interval=1, evaluation_duration=4)
    algo = cfg.build_algo()
    r = algo.train()
    ev = r["evaluation"]["env_runners"]
    assert ev["num_episodes"] == 4 and ev["episode_return_mean"] >= 8


def test_stooke_scaling_rule_fixes_total_batch():
    for n in (8, 32, 128):
        algo = FastPPOConfig().environment("CartPole", num_envs=n).training(total_batch_size=512).build_algo()
        assert algo.horizon == 512 // n and algo.storage["obs"].shape[:2] == (512 // n, n)
        r = algo.train()
        assert r["learners"]["default_policy"]["training_intensity"] == algo.config.num_epochs
        algo.stop()


def test_decorrelation_desynchronises_episode_clocks():
    algo = small("Pendulum", n=64).build_algo()
    # clocks randomised: time-outs do not coincide
    assert len(set(algo.env.elapsed_steps.tolist())) > 20
    algo.stop()


def test_default_decorrelation_is_the_time_limit_within_a_budget_of_env_steps():
    """By default every env first takes up to a time limit of random steps (clocks
    randomised too), but the phase costs at most DECORRELATION_BUDGET env steps: with
    many envs and long episodes (a slow simulator) it would otherwise be most of a
    run. The first, shortened episodes are not counted; an explicit K is taken as is."""
    from rllib_fast.algorithms.onpolicy.config import DECORRELATION_BUDGET

    small_n = FastPPOConfig().environment("Pendulum", num_envs=16).training(rollout_length=8).build_algo()
    assert small_n.train()["num_env_steps_sampled_lifetime"] == 200 * 16 + 8 * 16  # the whole time limit
    small_n.stop()
    n = 1024
    algo = FastPPOConfig().environment("Pendulum", num_envs=n).training(rollout_length=200).build_algo()
    k = DECORRELATION_BUDGET // n                    # 32 < the 200-step limit
    assert len(set(algo.env.elapsed_steps.tolist())) > 100   # clocks randomised, not only shifted by <= k
    r = algo.train()
    assert r["num_env_steps_sampled_lifetime"] == k * n + 200 * n
    assert r["env_runners"]["num_episodes_lifetime"] == 0   # first episodes were partial: not counted
    second = algo.train()["env_runners"]  # then each env's first whole episode ends within 200 steps
    assert second["num_episodes"] == n and second["episode_len_mean"] == 200
    algo.stop()
    explicit = FastPPOConfig().environment("Pendulum", num_envs=16).training(
        rollout_length=8, decorrelate_steps=5).build_algo()
    assert explicit.train()["num_env_steps_sampled_lifetime"] == 5 * 16 + 8 * 16
    explicit.stop()


def test_default_decorrelation_takes_random_steps_on_a_source_without_clocks():
    """gymnasium vector envs have no clock to randomise: Stooke & Abbeel's random
    phase of up to the time limit (CartPole-v1: 500 steps) runs instead."""
    algo = FastPPOConfig().environment("gym:CartPole-v1", num_envs=4).training(rollout_length=16).build_algo()
    assert algo.train()["num_env_steps_sampled_lifetime"] == 500 * 4 + 16 * 4
    algo.stop()


def test_next_step_source_marks_invalid_and_learns_without_crossing_resets():
    # gymnasium's CartPole-v1 vector env resets one step late (NEXT_STEP): valid=False rows appear
    algo = FastPPOConfig().environment("gym:CartPole-v1", num_envs=8).training(rollout_length=32).build_algo()
    algo.train()
    assert algo.any_invalid and not bool(algo.storage["valid"].all())
    r = algo.train()
    assert r["env_runners"]["episode_return_mean"] >= 8  # valid-only accounting: no 1-step junk episodes
    algo.stop()


@pytest.mark.slow
def test_learns_cartpole_to_475():
    cfg = FastPPOConfig().environment("CartPole").debugging(seed=0)  # the defaults
    assert best_return(cfg, 475, 150) >= 475


@pytest.mark.slow
def test_learns_pendulum_to_minus_250():
    cfg = FastPPOConfig().environment("Pendulum").debugging(seed=0)  # the defaults
    assert best_return(cfg, -250, 300) >= -250


def test_gpu_resource_request_follows_device_settings():
    def bundle(cfg):
        return FastPPO.default_resource_request(cfg).bundles[0]

    assert bundle(FastPPOConfig().environment("CartPole")).get("GPU", 0) == 0
    assert bundle(FastPPOConfig().environment("CartPole", env_device="cuda:0"))["GPU"] == 1
    assert bundle(FastPPOConfig().environment("CartPole").learners(num_gpus_per_learner=1))["GPU"] == 1


def test_adaptive_kl_lr_moves_lr_within_bounds():
    cfg = small(lr=1e-3, adaptive_lr_kl_target=1e-6, adaptive_lr_bounds=[1e-4, 1e-2])
    algo = cfg.build_algo()
    for _ in range(3):
        algo.train()
    lr = algo.optimizer.param_groups[0]["lr"]
    assert lr < 1e-3 and lr >= 1e-4  # KL far above a tiny target: lr shrinks, clamped at the bound
    algo.stop()


class _AliasingCartPole(TensorVecEnv):
    """Wraps a built-in task and returns the SAME obs/reward tensors every
    step, overwritten in place (as Isaac Gym does with rew_buf/obs_buf)."""

    def __init__(self, ctx):
        from rllib_fast.envs import make

        self.inner = make("CartPole", num_envs=ctx["num_envs"], seed=ctx["seed"])
        for k in ("num_envs", "device", "single_observation_space", "single_action_space", "max_episode_steps"):
            setattr(self, k, getattr(self.inner, k))
        self.obs_buf = torch.zeros(self.num_envs, 4)
        self.rew_buf = torch.zeros(self.num_envs)

    def sample_actions(self):
        return self.inner.sample_actions()

    def reset(self, seed=None):
        self.obs_buf.copy_(self.inner.reset(seed))
        return self.obs_buf

    def step(self, a):
        s = self.inner.step(a)
        self.obs_buf.copy_(s.obs)
        self.rew_buf.copy_(s.reward)
        return s._replace(obs=self.obs_buf, reward=self.rew_buf)

    def close(self):
        pass


def test_aliased_env_buffers_are_copied_into_storage():
    algo = FastPPOConfig().environment(_AliasingCartPole, num_envs=4).training(
        rollout_length=16, normalize_obs=False, decorrelate_steps=0).build_algo()
    algo.train()
    obs = algo.storage["obs"]
    assert not torch.equal(obs[0], obs[-1])  # per-step copies, not 16 views of one buffer
    assert len({tuple(o.flatten().tolist()) for o in obs}) == 16


def test_evaluation_protocol_caps_path_length_and_steps():
    algo = small().evaluation(evaluation_duration=6).training(evaluation_max_path_length=5).build_algo()
    ev = algo.evaluate()["env_runners"]
    assert ev["num_episodes"] == 6 and ev["episode_len_mean"] <= 5
    capped = small().evaluation(evaluation_duration=6).training(evaluation_max_env_steps=3).build_algo()
    assert capped.evaluate()["env_runners"]["num_episodes"] <= 6


def _cartpole_without_normalisation(ctx):
    """A built-in task whose authors advise against observation normalisation
    (as mjlab's Cartpole rsl_rl config does)."""
    from rllib_fast.envs import make

    env = make("CartPole", num_envs=ctx["num_envs"], seed=ctx["seed"])
    env.normalize_obs_hint = False
    return env


def test_normalize_obs_auto_follows_the_source_and_explicit_values_win():
    def build(env, **kw):
        return FastPPOConfig().environment(env, num_envs=4).training(rollout_length=8, num_minibatches=2,
                                                                     **kw).build_algo()

    plain, advised = build("CartPole"), build(_cartpole_without_normalisation)
    forced = build(_cartpole_without_normalisation, normalize_obs=True)
    try:
        assert plain.config.normalize_obs == "auto"
        assert plain.normalize_obs and plain.module.normalize_obs and "raw_obs" in plain.storage.data
        assert not advised.normalize_obs and not advised.module.normalize_obs
        assert "raw_obs" not in advised.storage.data
        advised.train()
        assert float(advised.module.obs_norm.count) <= 1.0  # statistics never updated
        assert forced.normalize_obs and forced.module.normalize_obs
    finally:
        for a in (plain, advised, forced):
            a.stop()
    with pytest.raises(ValueError, match="normalize_obs.*'auto', True or False"):
        FastPPOConfig().environment("CartPole").training(normalize_obs="yes").validate()


def test_normalize_obs_advice_reaches_hts_through_its_executor_group():
    from rllib_fast.algorithms.hts import HTSPPOConfig

    algo = HTSPPOConfig().environment(_cartpole_without_normalisation, num_envs=4).training(
        num_executors=2, rollout_length=8, num_minibatches=2).build_algo()
    try:
        assert algo.env.normalize_obs_hint is False and not algo.normalize_obs
        algo.train()
    finally:
        algo.stop()


def test_evaluation_uses_the_evaluation_env_config():
    """``evaluation_config={"env_config": ...}`` builds the evaluation env (here a
    50-step time limit on Pendulum, whose training episodes last 200 steps)."""
    cfg = (FastPPOConfig().environment("Pendulum", num_envs=8)
           .evaluation(evaluation_config={"env_config": {"max_episode_steps": 50}}, evaluation_duration=3))
    algo = cfg.build_algo()
    assert algo.env.max_episode_steps == 200
    assert algo.evaluate()["env_runners"]["episode_len_mean"] == 50.0
    algo.stop()
