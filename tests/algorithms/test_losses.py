"""Each loss against numbers worked out by hand on a tiny batch: PPO's clipped
surrogate, clipped value loss, entropy and KL (and the whole PPO objective),
the adaptive-KL lr rule, A2C's loss, and the DQN / C51 targets."""
import math

import gymnasium as gym
import pytest
import torch
from torch import nn

from rllib_fast.algorithms.a2c.loss import a2c_loss
from rllib_fast.algorithms.actor_critic import ActorCriticModule
from rllib_fast.algorithms.dqn import FastDQNConfig
from rllib_fast.algorithms.onpolicy.reductions import masked_mean, standardize
from rllib_fast.algorithms.ppo.loss import (approx_kl, clip_fraction, clipped_surrogate, clipped_value_loss,
                                            kl_adapted_lr, ppo_loss)

T = torch.tensor


# ---------------------------------------------------------------------------------------- PPO
def test_clipped_surrogate_takes_the_pessimistic_term():
    ratio, adv = T([1.5, 0.5, 1.5, 0.5]), T([1.0, 1.0, -1.0, -1.0])
    # min(rA, clip(r, 0.8, 1.2) A): 1.2 (clipped gain), 0.5, -1.5 (unclipped loss), -0.8
    assert clipped_surrogate(ratio, adv, 0.2).item() == pytest.approx(-(1.2 + 0.5 - 1.5 - 0.8) / 4)
    # masked: the third transition is invalid, denominator 3
    w = T([1.0, 1.0, 0.0, 1.0])
    assert clipped_surrogate(ratio, adv, 0.2, w, w.sum()).item() == pytest.approx(-(1.2 + 0.5 - 0.8) / 3)


def test_ppo_loss_over_a_member_axis_is_each_members_loss_with_its_own_settings():
    """``dim=-1`` on a ``[K, B]`` minibatch (PopPPO): member k's loss and statistics are
    ``ppo_loss`` on member k's row with member k's clip and weights, masks included."""
    g = torch.Generator().manual_seed(0)
    K, B = 3, 12
    logp, old_logp = torch.randn(K, B, generator=g) * 0.3, torch.randn(K, B, generator=g) * 0.3
    entropy, adv = torch.rand(K, B, generator=g), torch.randn(K, B, generator=g)
    v, targets, old_v = (torch.randn(K, B, generator=g) for _ in range(3))
    w = (torch.rand(K, B, generator=g) > 0.25).float()
    clip, vf_coeff, ent_coeff = T([0.1, 0.2, 0.3]), T([0.5, 1.0, 2.0]), T([0.0, 0.01, 0.1])
    terms = ppo_loss(logp, entropy, old_logp, adv, v, targets, old_v, clip_param=clip.unsqueeze(1),
                     vf_clip_param=0.2, vf_loss_coeff=vf_coeff, entropy_coeff=ent_coeff, w=w,
                     denom=w.sum(-1).clamp_min(1.0), dim=-1)
    assert terms.loss.shape == (K,) and terms.stats.shape == (5, K)
    for k in range(K):
        one = ppo_loss(logp[k], entropy[k], old_logp[k], adv[k], v[k], targets[k], old_v[k],
                       clip_param=float(clip[k]), vf_clip_param=0.2, vf_loss_coeff=float(vf_coeff[k]),
                       entropy_coeff=float(ent_coeff[k]), w=w[k], denom=w[k].sum())
        torch.testing.assert_close(terms.loss[k], one.loss)
        torch.testing.assert_close(terms.stats[:, k], one.stats)
    # masked_mean and standardize along the member axis: each row on its own
    assert torch.equal(masked_mean(adv, None, None, dim=-1), adv.mean(-1))
    z = standardize(adv, w, dim=-1)
    for k in range(K):
        torch.testing.assert_close(z[k], standardize(adv[k], w[k]))


def test_kl_adapted_lr_adapts_each_member_to_its_own_target():
    lr, kl, target = T([1e-3, 1e-3, 1e-3]), T([0.05, 0.01, 0.001]), T([0.01, 0.01, 0.01])
    out = kl_adapted_lr(lr, kl, target, 1e-5, 1e-2)
    expected = [kl_adapted_lr(1e-3, float(k), 0.01, 1e-5, 1e-2) for k in kl]
    torch.testing.assert_close(out, torch.tensor(expected, dtype=torch.float32))
    assert float(out[0]) < float(out[1]) < float(out[2]) and out[1] == lr[1]   # shrink, keep, grow


def test_clipped_value_loss_takes_the_larger_error():
    v, old_v, targets = T([1.0, 0.0]), T([0.5, 0.5]), T([2.0, 0.0])
    # clipped values 0.7 and 0.3: max((1-2)^2, (0.7-2)^2) = 1.69, max(0, 0.3^2) = 0.09
    assert clipped_value_loss(v, targets, old_v, 0.2).item() == pytest.approx(0.5 * (1.69 + 0.09) / 2)
    assert clipped_value_loss(v, targets, old_v, None).item() == pytest.approx(0.5 * (1.0 + 0.0) / 2)


def test_kl_estimate_and_clip_fraction():
    log_ratio = T([math.log(2.0), 0.0, math.log(0.5)])
    ratio = log_ratio.exp()
    # (r - 1) - log r: 1 - log 2, 0, -0.5 + log 2
    assert approx_kl(ratio, log_ratio).item() == pytest.approx((1 - math.log(2) + 0 - 0.5 + math.log(2)) / 3)
    assert clip_fraction(ratio, 0.2).item() == pytest.approx(2 / 3)


def test_ppo_objective_combines_the_terms():
    old_logp = T([0.0, 0.0])
    logp = T([math.log(1.5), math.log(0.5)])          # ratios 1.5 and 0.5
    adv, entropy = T([1.0, -1.0]), T([0.7, 0.3])
    v, targets, old_v = T([1.0, 0.0]), T([2.0, 0.0]), T([0.5, 0.5])
    loss, stats = ppo_loss(logp, entropy, old_logp, adv, v, targets, old_v, clip_param=0.2, vf_clip_param=0.2,
                           vf_loss_coeff=0.5, entropy_coeff=0.01)
    pg = -(1.2 + -0.8) / 2                            # min(1.5, 1.2) = 1.2; min(-0.5, -0.8) = -0.8
    vf = 0.445
    ent = 0.5
    kl = ((0.5 - math.log(1.5)) + (-0.5 - math.log(0.5))) / 2
    assert loss.item() == pytest.approx(pg + 0.5 * vf - 0.01 * ent, abs=1e-6)
    torch.testing.assert_close(stats, T([pg, vf, ent, kl, 1.0]))
    assert not stats.requires_grad


def test_ppo_gradient_flows_only_through_the_unclipped_terms():
    """Above 1 + clip with a positive advantage the surrogate is flat: no policy gradient."""
    logp = T([math.log(1.5), math.log(1.1)]).requires_grad_()
    loss, _ = ppo_loss(logp, torch.zeros(2), torch.zeros(2), T([1.0, 1.0]), torch.zeros(2), torch.zeros(2),
                       torch.zeros(2), clip_param=0.2, vf_clip_param=None, vf_loss_coeff=0.0, entropy_coeff=0.0)
    (grad,) = torch.autograd.grad(loss, logp)
    # d/dlogp of -r*A/2 = -r/2 for the unclipped one (r = 1.1), 0 for the clipped one
    torch.testing.assert_close(grad, T([0.0, -1.1 / 2]))


def test_policy_entropies_and_log_probs_of_the_module():
    """Categorical: uniform logits give entropy log n; Gaussian: 0.5 + 0.5 log(2 pi) + log std per dim."""
    disc = ActorCriticModule(observation_space=gym.spaces.Box(-1, 1, (3,)), action_space=gym.spaces.Discrete(4),
                             inference_only=False, model_config={"hidden_sizes": [8]})
    with torch.no_grad():
        disc.pi[-1].weight.zero_()
        disc.pi[-1].bias.zero_()
    logp, ent = disc.evaluate_actions(torch.randn(2, 3), T([0, 3]))
    torch.testing.assert_close(ent, T([math.log(4)] * 2))
    torch.testing.assert_close(logp, T([math.log(0.25)] * 2))
    cont = ActorCriticModule(observation_space=gym.spaces.Box(-1, 1, (3,)),
                             action_space=gym.spaces.Box(-1, 1, (2,)), inference_only=False,
                             model_config={"hidden_sizes": [8], "init_log_std": math.log(0.5)})
    with torch.no_grad():
        cont.pi[-1].weight.zero_()
        cont.pi[-1].bias.zero_()
    logp, ent = cont.evaluate_actions(torch.randn(1, 3), T([[0.5, 0.0]]))
    per_dim = 0.5 + 0.5 * math.log(2 * math.pi) + math.log(0.5)
    assert ent.item() == pytest.approx(2 * per_dim, rel=1e-5)
    # N(0, 0.5^2): log p(0.5) + log p(0) = -0.5 * (1^2 + 0) - 2 log 0.5 - log(2 pi)
    assert logp.item() == pytest.approx(-0.5 - 2 * math.log(0.5) - math.log(2 * math.pi), rel=1e-5)


@pytest.mark.parametrize("kl,expected", [(0.05, 1e-3 / 1.5), (0.001, 1e-3 * 1.5), (0.01, 1e-3)])
def test_adaptive_kl_lr_on_host_and_device(kl, expected):
    assert kl_adapted_lr(1e-3, kl, 0.01, 1e-6, 1e-2) == pytest.approx(expected)
    on_device = kl_adapted_lr(torch.tensor(1e-3), torch.tensor(kl), 0.01, 1e-6, 1e-2)
    assert torch.is_tensor(on_device) and on_device.item() == pytest.approx(expected)


def test_adaptive_kl_lr_stays_within_its_bounds():
    assert kl_adapted_lr(1e-6, 1.0, 0.01, 1e-6, 1e-2) == 1e-6
    assert kl_adapted_lr(1e-2, 0.0, 0.01, 1e-6, 1e-2) == 1e-2


# ---------------------------------------------------------------------------------------- A2C
def test_a2c_loss():
    logp, entropy = T([math.log(0.5), math.log(0.25)]), T([0.6, 0.2])
    adv, v, targets = T([2.0, -1.0]), T([1.0, 3.0]), T([0.0, 1.0])
    loss, stats = a2c_loss(logp, entropy, adv, v, targets, vf_loss_coeff=0.5, entropy_coeff=0.01)
    pg = -(math.log(0.5) * 2.0 + math.log(0.25) * -1.0) / 2
    vf = (1.0 + 4.0) / 2                              # mean squared error, no extra 1/2 (the reference's)
    ent = 0.4
    assert loss.item() == pytest.approx(pg + 0.5 * vf - 0.01 * ent, abs=1e-6)
    torch.testing.assert_close(stats, T([pg, vf, ent]))
    w = T([1.0, 0.0])                                 # the second transition is invalid
    loss, stats = a2c_loss(logp, entropy, adv, v, targets, vf_loss_coeff=0.5, entropy_coeff=0.01, w=w, denom=w.sum())
    torch.testing.assert_close(stats, T([-math.log(0.5) * 2.0, 1.0, 0.6]))


# ---------------------------------------------------------------------------------------- DQN / C51
class _TableQ(nn.Module):
    """Q(s, .) read from a table by the first observation feature (the state's index)."""

    def __init__(self, table, support=None):
        super().__init__()
        self.table = torch.as_tensor(table, dtype=torch.float32)
        if support is not None:
            self.support = support

    def forward(self, obs):
        return self.table[obs[:, 0].long()]

    def logits(self, obs):
        return self.table[obs[:, 0].long()]

    def q_from_logits(self, logits):
        return (torch.softmax(logits, -1) * self.support).sum(-1)


def _dqn(**kw):
    return FastDQNConfig().environment("CartPole", num_envs=2).training(
        learning_starts=8, hidden_sizes=[8], **kw).debugging(seed=0).build_algo()


def _batch():
    # two transitions: s0 -a1-> s1 (return 1, discount 0.9), s1 -a0-> s2 (return 0.5, terminal)
    obs = torch.zeros(2, 4)
    obs[:, 0] = T([0, 1])
    nxt = torch.zeros(2, 4)
    nxt[:, 0] = T([1, 2])
    return {"obs": obs, "next_obs": nxt, "action": T([1, 0]).long(), "return": T([1.0, 0.5]),
            "discount": T([0.9, 0.0])}


@pytest.mark.parametrize("double_q", [False, True])
def test_dqn_bellman_targets(double_q):
    algo = _dqn(double_q=double_q, num_atoms=1, huber_delta=1.0)
    try:
        online = [[0.0, 1.0], [2.0, 0.0], [0.0, 0.0]]
        target = [[9.0, 9.0], [3.0, 5.0], [7.0, 7.0]]
        algo.module, algo.target = _TableQ(online), _TableQ(target)
        loss_i, q_sa, priority = algo._loss(_batch())
        # s1's next value: max target Q = 5 (plain), target Q at the online argmax a=0 = 3 (double)
        next_v = 3.0 if double_q else 5.0
        y = T([1.0 + 0.9 * next_v, 0.5])              # the terminal transition does not bootstrap
        torch.testing.assert_close(q_sa, T([1.0, 2.0]))
        torch.testing.assert_close(priority, (y - q_sa).abs())
        err = y - q_sa                                 # Huber with delta 1: |e| - 0.5 beyond 1, e^2 / 2 within
        huber = torch.where(err.abs() <= 1, 0.5 * err ** 2, err.abs() - 0.5)
        torch.testing.assert_close(loss_i, huber)
    finally:
        algo.stop()


def test_c51_target_is_the_projected_next_distribution():
    algo = _dqn(double_q=False, num_atoms=3, v_min=-1.0, v_max=1.0)
    try:
        support = T([-1.0, 0.0, 1.0])
        big = 20.0   # logits that put (almost) all mass on one atom
        online = torch.zeros(3, 2, 3)
        online[0, 1] = T([0.0, 1.0, 2.0])              # s0, a1
        online[1, 0] = T([2.0, 1.0, 0.0])              # s1, a0
        target = torch.zeros(3, 2, 3)
        target[1, 0] = T([big, 0, 0])                  # s1, a0: mass at -1 (Q ~ -1)
        target[1, 1] = T([0, 0, big])                  # s1, a1: mass at +1 (Q ~ +1): the greedy action
        algo.module, algo.target = _TableQ(online, support), _TableQ(target, support)
        b = _batch()
        b["return"], b["discount"] = T([0.5, -0.3]), T([0.5, 0.0])
        loss_i, _, _ = algo._loss(b)
        # transition 0: Tz at the greedy atom +1 is 0.5 + 0.5 * 1 = 1.0 -> all mass on atom +1;
        # transition 1 (terminal): Tz = -0.3 for every atom -> 0.3 on -1, 0.7 on 0
        want = [T([0.0, 0.0, 1.0]), T([0.3, 0.7, 0.0])]
        log_p = [torch.log_softmax(online[0, 1], -1), torch.log_softmax(online[1, 0], -1)]
        for i in range(2):   # cross-entropy of the predicted distribution at (s, a) against the target
            assert loss_i[i].item() == pytest.approx(-(want[i] * log_p[i]).sum().item(), rel=1e-4)
    finally:
        algo.stop()
