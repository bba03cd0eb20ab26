"""FastPPO's rl_games options: ``shared_trunk`` (rl_games' ``separate: False``)
and ``surrogate_clip='smooth'`` (its ``use_smooth_clamp``). Each gives rl_games'
behaviour for one difference; the defaults keep FastPPO's own."""
import math

import pytest
import torch
from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.core.columns import Columns
from torch import nn

from rllib_fast.algorithms.ppo import FastPPOConfig
from rllib_fast.algorithms.ppo.loss import clipped_surrogate, ppo_loss, smooth_clamp
from tests.algorithms._learning import best_return


def small(env="Pendulum", n=8, **kw):
    kw.setdefault("rollout_length", 8)
    return FastPPOConfig().environment(env, num_envs=n).training(**kw).debugging(seed=3)


# -- surrogate_clip = 'smooth' ---------------------------------------------------------------------
def test_smooth_clamp_hand_values():
    """low + (high - low) * sigmoid(4 (x - low) / (high - low) - 2), bounds [0.8, 1.2]."""
    x = torch.tensor([1.0, 1.2, 0.8, 1.1, 5.0, -3.0], requires_grad=True)
    y = smooth_clamp(x, 0.8, 1.2)
    sig = lambda z: 1.0 / (1.0 + math.exp(-z))   # noqa: E731
    want = [1.0, 0.8 + 0.4 * sig(2.0), 0.8 + 0.4 * sig(-2.0), 0.8 + 0.4 * sig(1.0), 1.2, 0.8]
    torch.testing.assert_close(y.detach(), torch.tensor(want), atol=1e-6, rtol=0)
    assert 1.15 < float(y[1].detach()) < 1.16 and 0.84 < float(y[2].detach()) < 0.85   # 1.1523, 0.8477
    y.sum().backward()
    assert float(x.grad[0]) == pytest.approx(1.0)          # the identity's slope at ratio 1
    assert 0 < float(x.grad[1]) < 1.0                      # shrinking, not cut, at the bound


def test_smooth_surrogate_keeps_a_gradient_where_the_hard_clip_stops():
    """Positive advantage, ratio past 1 + e: the hard clip's min picks the
    constant clipped term (zero gradient), the smooth one a still-sloped term."""
    ratio = torch.tensor([1.5], requires_grad=True)
    adv = torch.tensor([1.0])
    clipped_surrogate(ratio, adv, 0.2).backward()
    assert float(ratio.grad) == 0.0
    ratio.grad = None
    loss = clipped_surrogate(ratio, adv, 0.2, smooth=True)
    loss.backward()
    assert float(ratio.grad) < 0.0   # descending the loss still raises this ratio a little
    assert float(loss.detach()) == pytest.approx(-float(smooth_clamp(torch.tensor(1.5), 0.8, 1.2)))
    # negative advantage, ratio inside the trust region: both terms the same to first order
    r = torch.tensor([1.0])
    assert float(clipped_surrogate(r, -adv, 0.2, smooth=True)) == pytest.approx(1.0)


def test_smooth_clip_reaches_the_loss_and_is_live():
    algo = small(surrogate_clip="smooth").build_algo()
    assert algo.update_rule.settings.surrogate_clip == "smooth"
    r = algo.train()["learners"]["default_policy"]
    assert math.isfinite(r["policy_loss"])
    algo.stop()
    logp, old = torch.tensor([0.4]), torch.tensor([0.0])   # ratio e^0.4 = 1.49, advantage 1
    z = torch.zeros(1)
    kw = dict(clip_param=0.2, vf_clip_param=None, vf_loss_coeff=0.0, entropy_coeff=0.0)
    hard = ppo_loss(logp, z, old, torch.ones(1), z, z, z, **kw).loss
    smooth = ppo_loss(logp, z, old, torch.ones(1), z, z, z, smooth_clip=True, **kw).loss
    assert float(hard) == pytest.approx(-1.2) and float(smooth) < -1.19 and float(smooth) != float(hard)


# -- shared_trunk ------------------------------------------------------------------------------------
def linear_shapes(net):
    return [tuple(m.weight.shape) for m in net.modules() if isinstance(m, nn.Linear)]


def test_shared_trunk_is_one_network_with_two_linear_heads():
    algo = small(shared_trunk=True, hidden_sizes=[32, 16], activation="elu").build_algo()
    m = algo.module
    assert linear_shapes(m.trunk) == [(32, 3), (16, 32)] and isinstance(m.trunk[-1], nn.ELU)
    assert linear_shapes(m.pi) == [(1, 16)] and linear_shapes(m.vf) == [(1, 16)]
    separate = small(hidden_sizes=[32, 16]).build_algo().module
    assert not hasattr(separate, "trunk") and linear_shapes(separate.vf) == [(32, 3), (16, 32), (1, 16)]
    # the value loss reaches the trunk the policy reads: both heads move its features
    obs = torch.randn(5, 3)
    m.value(obs).sum().backward()
    assert all(p.grad is not None and float(p.grad.abs().sum()) > 0 for p in m.trunk.parameters())
    assert all(p.grad is None for p in m.pi.parameters())
    algo.stop()


def test_shared_trunk_trains_resumes_and_serves_inference(tmp_path):
    algo = small(shared_trunk=True, hidden_sizes=[16, 16]).build_algo()
    before = [p.detach().clone() for p in algo.module.trunk.parameters()]
    algo.train()
    assert any(not torch.equal(a, b) for a, b in zip(before, algo.module.trunk.parameters()))
    path = algo.save_to_path(str(tmp_path / "c"))
    r1 = algo.train()
    restored = Algorithm.from_checkpoint(path)
    assert restored.config.shared_trunk is True
    r2 = restored.train()
    assert r1["learners"]["default_policy"]["policy_loss"] == r2["learners"]["default_policy"]["policy_loss"]
    for a, b in zip(algo.module.parameters(), restored.module.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    module = restored.get_module()
    out = module.forward_inference({Columns.OBS: torch.zeros(4, 3)})
    assert out[Columns.ACTIONS].shape == (4, 1)
    assert module.compute_values({Columns.OBS: torch.zeros(4, 3)}).shape == (4,)
    algo.stop(); restored.stop()


@pytest.mark.slow
def test_shared_trunk_with_the_smooth_clip_learns_pendulum():
    """rl_games' network and surrogate together, on FastPPO's Pendulum defaults
    otherwise (the threshold of test_ppo.py's defaults run)."""
    cfg = FastPPOConfig().environment("Pendulum").training(shared_trunk=True, surrogate_clip="smooth").debugging(seed=0)
    assert best_return(cfg, -250, 300) >= -250


@pytest.mark.parametrize("kw,match", [
    (dict(rnn_type="gru"), r"`shared_trunk` = True is for feed-forward.*allowed with shared_trunk: rnn_type = None"),
    (dict(grad_clip_scope="per_network"), r"`grad_clip_scope` = 'per_network'.*allowed with shared_trunk: "
                                          r"grad_clip_scope = 'global'"),
    (dict(asymmetric_critic=True), r"`asymmetric_critic` = True.*allowed with shared_trunk: asymmetric_critic = "
                                   r"'auto' or False"),
])
def test_shared_trunk_validation(kw, match):
    with pytest.raises(ValueError, match=match):
        small(shared_trunk=True, **kw).validate()


def test_surrogate_clip_validation_and_popppo_rejects_both():
    with pytest.raises(ValueError, match=r"`surrogate_clip` = 'soft'.*allowed: one of 'hard', 'smooth'"):
        small(surrogate_clip="soft").validate()
    from rllib_fast.algorithms.pop_ppo import PopPPOConfig

    for key, value in (("shared_trunk", True), ("surrogate_clip", "smooth")):
        with pytest.raises(ValueError, match=rf"`{key}` = {value!r} is not implemented by PopPPO"):
            PopPPOConfig().environment("Pendulum").training(**{key: value}).validate()


# -- bounds_loss_coeff ---------------------------------------------------------------------------------
def test_bounds_loss_hand_values():
    """Means (0.5, 1.5) and (-2.0, 1.1): (1.5-1.1)^2 = 0.16, (2.0-1.1)^2 = 0.81; mean of 0.16 and 0.81."""
    from rllib_fast.algorithms.ppo.loss import bounds_loss

    mean = torch.tensor([[0.5, 1.5], [-2.0, 1.1]])
    assert float(bounds_loss(mean)) == pytest.approx((0.16 + 0.81) / 2)
    assert float(bounds_loss(torch.tensor([[1.0, -1.1]]))) == 0.0
    assert float(bounds_loss(mean, w=torch.tensor([1.0, 0.0]), denom=torch.tensor(1.0))) == pytest.approx(0.16)


def test_bounds_loss_pulls_an_outlying_mean_back_and_only_then():
    """A policy head biased to mean 3: with the bound loss the update moves the
    mean toward the bound; the surrogate alone (all samples clipped to 1) barely does."""
    def mean_after(coeff):
        algo = small(bounds_loss_coeff=coeff, hidden_sizes=[16], init_log_std=-3.0, adaptive_lr_kl_target=None,
                     lr=1e-2).build_algo()
        with torch.no_grad():
            algo.module.pi[-1].bias.fill_(3.0)
        for _ in range(3):
            algo.train()
        with torch.no_grad():
            m = float(algo.module.dist_params(torch.zeros(1, 3))[0].mean())
        algo.stop()
        return m

    assert mean_after(1.0) < mean_after(0.0) - 0.1


def test_bounds_loss_validation():
    with pytest.raises(ValueError, match=r"`bounds_loss_coeff` = -1.0 is out of range; allowed: float in \[0.0, inf\)"):
        small(bounds_loss_coeff=-1.0).validate()
    with pytest.raises(ValueError, match=r"`bounds_loss_coeff` = 0.1 bounds Gaussian action means.*allowed: 0.0"):
        small("CartPole", bounds_loss_coeff=0.1).build_algo()


@pytest.mark.parametrize("fmt", ["onnx", "torchscript"])
def test_shared_trunk_policy_exports_and_acts_as_forward_inference(tmp_path, fmt):
    if fmt == "onnx":
        ort = pytest.importorskip("onnxruntime")
    algo = small(shared_trunk=True, hidden_sizes=[16, 16]).build_algo()
    algo.train()
    obs = torch.randn(32, 3, generator=torch.Generator().manual_seed(1)) * 3
    with torch.no_grad():
        expected = algo.get_module().forward_inference({Columns.OBS: obs})[Columns.ACTIONS]
    path = algo.export_policy(tmp_path / f"policy.{fmt}", format=fmt)
    if fmt == "onnx":
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        actual = torch.as_tensor(session.run(None, {"obs": obs.numpy()})[0])
    else:
        actual = torch.jit.load(str(path))(obs)
    torch.testing.assert_close(actual.float(), expected.float(), atol=1e-5, rtol=0)
    algo.stop()
