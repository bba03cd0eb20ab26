"""FastA2C: the paper's lr rule, RMSProp, one update per batch, learning."""
import importlib.util
import math

import numpy as np
import pytest
import torch
from ray.rllib.algorithms.algorithm import Algorithm

from rllib_fast.algorithms.a2c import FastA2C, FastA2CConfig
from rllib_fast.algorithms.a2c.rmsprop import ReferenceRMSprop


def test_defaults_follow_the_paper():
    """The reference's 7e-4 at 16 envs x 5 steps, scaled by the paper's sqrt
    rule to the default 64 envs (batch 320: 1.4e-3)."""
    cfg = FastA2CConfig()
    assert cfg.rollout_length == 5 and cfg.lr == 7e-4 and cfg.optimizer == "rmsprop"
    assert (cfg.num_envs, cfg.lr_rule, cfg.lr_rule_base_batch) == (64, "sqrt", 80)
    assert FastA2CConfig().environment("CartPole").build_algo().configured_lr() == pytest.approx(1.4e-3)
    algo = FastA2CConfig().environment("CartPole", num_envs=4).build_algo()
    assert isinstance(algo.optimizer, ReferenceRMSprop)  # the A2C reference's RMSProp
    assert algo.train()["learners"]["default_policy"]["training_intensity"] == 1.0


@pytest.mark.parametrize("n,expected", [(16, 7e-4), (64, 7e-4 * 2), (512, 3e-3)])
def test_sqrt_lr_rule_scales_with_batch_and_caps(n, expected):
    cfg = FastA2CConfig().environment("CartPole", num_envs=n).training(lr_rule="sqrt")
    algo = cfg.build_algo()
    assert algo.configured_lr() == pytest.approx(expected)  # batch = 5 * n; base batch 80
    assert algo.optimizer.param_groups[0]["lr"] == pytest.approx(expected)


def test_continuous_actions_and_checkpoint_round_trip(tmp_path):
    algo = FastA2CConfig().environment("Pendulum", num_envs=8).debugging(seed=2).build_algo()
    algo.train()
    path = algo.save_to_path(str(tmp_path / "c"))
    r1 = algo.train()
    restored = Algorithm.from_checkpoint(path)
    assert isinstance(restored, FastA2C)
    r2 = restored.train()
    assert r1["learners"]["default_policy"]["policy_loss"] == r2["learners"]["default_policy"]["policy_loss"]


@pytest.mark.slow
def test_learns_cartpole_to_475():
    # the 'sqrt' lr rule's settings learn CartPole; the budget leaves room over seed 0's run
    algo = FastA2CConfig().environment("CartPole", num_envs=32).training(lr_rule="sqrt").debugging(seed=0).build_algo()
    best, steps = -math.inf, 0
    while steps < 600_000 and best < 475:
        r = algo.train()
        ret, steps = r["env_runners"]["episode_return_mean"], r["num_env_steps_sampled_lifetime"]
        best = max(best, ret if np.isfinite(ret) else -math.inf)
    assert best >= 475


@pytest.mark.skipif(importlib.util.find_spec("minatar") is None, reason="minatar not installed (the `atari` extra)")
@pytest.mark.parametrize("cfg_cls", ["FastA2CConfig", "FastPPOConfig"])
def test_onpolicy_algorithms_train_on_image_observations(cfg_cls):
    """MinAtar's [10, 10, C] observations: the MLP policy and the rollout
    storage both see them flattened (a regression: storage used the image shape)."""
    from rllib_fast import algorithms

    cfg = getattr(algorithms, cfg_cls)().environment("minatar:breakout", num_envs=4).training(
        rollout_length=8, decorrelate_steps=4).debugging(seed=0)
    algo = cfg.build_algo()
    for _ in range(2):
        result = algo.train()
    assert result["num_env_steps_sampled_lifetime"] == 4 * 4 + 2 * 8 * 4
    algo.stop()


@pytest.mark.parametrize("normalize_obs", [False, True])
def test_inference_forward_equals_the_acting_path_on_acrobot(normalize_obs):
    """``get_module().forward_inference`` must act as training does. Without
    observation normalisation the acting path feeds raw observations, so
    inference may not clip them to the normaliser's +-10 (Acrobot's joint
    velocities reach 4*pi and 9*pi = 28.3)."""
    from ray.rllib.core.columns import Columns

    algo = FastA2CConfig().environment("Acrobot", num_envs=8).training(
        normalize_obs=normalize_obs, decorrelate_steps=0).debugging(seed=3).build_algo()
    algo.train()
    obs = algo.obs.clone()
    obs[:, 4] = torch.linspace(-12.0, 12.0, 8)
    obs[:, 5] = torch.linspace(-28.0, 28.0, 8)
    module = algo.get_module()
    with torch.no_grad():
        out = module.forward_inference({Columns.OBS: obs})
        acting = algo._normalize_obs(obs, update=False)
        if not normalize_obs:
            assert torch.equal(acting, obs)  # the acting path sees raw observations
        assert torch.equal(out[Columns.ACTION_DIST_INPUTS], module.dist_params(acting)[0])
        assert torch.equal(out[Columns.ACTIONS], algo.compute_actions(obs, explore=False))
        values = module.compute_values({Columns.OBS: obs})
        expected = module.value(acting)
        assert torch.equal(values, module.value_norm.denormalize(expected))
    algo.stop()


def test_reference_rmsprop_step_by_hand():
    """TF1/baselines RMSProp: mean square from 1, eps inside the square root."""
    p = torch.nn.Parameter(torch.tensor([1.0, -2.0, 0.5]))
    opt = ReferenceRMSprop([p], lr=0.1, alpha=0.9, eps=0.01)
    for g in ([0.3, -4.0, 0.0], [1.0, 2.0, -0.001]):
        p.grad = torch.tensor(g)
        opt.step()
    # by hand: v1 = 0.9*1 + 0.1*g1^2, p1 = p0 - 0.1*g1/sqrt(v1 + 0.01), then the same with g2
    v1 = [0.9 + 0.1 * 0.09, 0.9 + 0.1 * 16.0, 0.9]
    p1 = [1.0 - 0.1 * 0.3 / math.sqrt(v1[0] + 0.01), -2.0 + 0.1 * 4.0 / math.sqrt(v1[1] + 0.01), 0.5]
    v2 = [0.9 * v1[0] + 0.1 * 1.0, 0.9 * v1[1] + 0.1 * 4.0, 0.9 * v1[2] + 0.1 * 1e-6]
    p2 = [p1[0] - 0.1 * 1.0 / math.sqrt(v2[0] + 0.01), p1[1] - 0.1 * 2.0 / math.sqrt(v2[1] + 0.01),
          p1[2] + 0.1 * 0.001 / math.sqrt(v2[2] + 0.01)]
    torch.testing.assert_close(p.detach(), torch.tensor(p2), rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(opt.state[p]["square_avg"], torch.tensor(v2), rtol=1e-6, atol=1e-9)
    # torch's RMSprop (eps outside the root, mean square from 0) remains selectable
    algo = FastA2CConfig().environment("CartPole", num_envs=4).training(optimizer="rmsprop_torch").build_algo()
    assert type(algo.optimizer) is torch.optim.RMSprop
    algo.stop()


def test_value_loss_weight_follows_the_reference():
    """baselines' A2C: loss = pg - ent_coef * entropy + vf_coef * MSE (no extra 1/2).
    The critic's parameters get gradient only from the value term."""
    algo = FastA2CConfig().environment("CartPole", num_envs=4).training(
        normalize_values=False, grad_clip=None, decorrelate_steps=0, vf_loss_coeff=0.5).debugging(
        seed=7).build_algo()
    algo._rollout()
    state = {k: v.clone() for k, v in algo.module.state_dict().items()}
    batch = algo._targets()
    targets = batch.value_targets
    obs = algo.storage.flat("obs")
    vf_params = list(algo.module.vf.parameters())
    expected = torch.autograd.grad(0.5 * ((algo.module.value(obs) - targets) ** 2).mean(), vf_params)
    algo.module.load_state_dict(state)
    algo.optimizer.step = lambda *a, **k: None      # keep the gradients of this update readable
    algo._learn(batch)
    for p, want in zip(vf_params, expected):
        torch.testing.assert_close(p.grad, want, rtol=1e-5, atol=1e-8)
    algo.stop()
