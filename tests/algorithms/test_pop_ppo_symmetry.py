"""PopPPO's symmetry (FastPPO's extension with a member axis): each member's
mirrors laid out after its own originals, each member's augmented PPO loss and
mirror loss on hand-built numbers with K=2 (no gradient across members), a
population of one is symmetric FastPPO from the same seed, and a K=2 run with
augmentation and mirror loss trains, reports and resumes exactly."""
from types import SimpleNamespace

import pytest
import torch
from gymnasium import spaces
from ray.rllib.algorithms.algorithm import Algorithm

from rllib_fast.algorithms import FastPPOConfig, PopPPOConfig
from rllib_fast.algorithms.extensions.symmetry import Symmetry, SymmetrySettings, cartpole_mirror, pendulum_mirror
from rllib_fast.algorithms.pop_ppo.module import StackedActorCritic
from rllib_fast.algorithms.pop_ppo.symmetric import (member_mirror_loss, mirror_member_batch, mirror_members,
                                                     symmetric_member_loss)
from rllib_fast.algorithms.ppo.loss import ppo_loss

CARTPOLE_MIRROR = "rllib_fast.algorithms.extensions:cartpole_mirror"


def symmetry(fn=cartpole_mirror, augment=True, mirror_loss=False, coeff=0.0, discrete=True, n=2):
    return Symmetry(SymmetrySettings(fn, augment, mirror_loss, coeff), discrete, n if discrete else None)


def two_copies(obs=None, actions=None, states=None):
    """A made-up symmetry group with two non-identity copies: negate, and negate+2."""
    twice = lambda x, f, g: None if x is None else torch.cat([f(x), g(x)])   # noqa: E731
    return (twice(obs, lambda o: -o, lambda o: -o + 2), twice(actions, lambda a: 1 - a, lambda a: a),
            twice(states, lambda s: -s, lambda s: s))


def test_each_members_mirrors_follow_its_own_transitions_copy_by_copy():
    """K=2 members of B=3 transitions, two mirror copies: member j's mirrored rows are
    [copy 0 of its 3, copy 1 of its 3], normalised with member j's frozen statistics."""
    from rllib_fast.core.normalize import RunningMeanStd

    sym = symmetry(fn=two_copies)
    raw = torch.arange(12.0).view(2, 3, 2)          # member 0: 0..5, member 1: 6..11
    acts = torch.tensor([[0, 1, 1], [1, 0, 0]])
    norm = RunningMeanStd((2,), members=2)
    norm.update(torch.tensor([[[0.0, 0.0], [2.0, 2.0]], [[10.0, 10.0], [30.0, 30.0]]]))
    sym.freeze_obs_norm(norm)
    norm.update(torch.full((2, 5, 2), 100.0))        # the live statistics move on after the rollout
    m = mirror_member_batch(sym, raw, acts, normalize_obs=False)
    assert m.obs.shape == (2, 6, 2) and m.actions.shape == (2, 6)
    assert m.obs[0].tolist() == [[0, -1], [-2, -3], [-4, -5], [2, 1], [0, -1], [-2, -3]]
    assert m.obs[1].tolist() == [[-6, -7], [-8, -9], [-10, -11], [-4, -5], [-6, -7], [-8, -9]]
    assert m.actions.tolist() == [[1, 0, 0, 0, 1, 1], [0, 1, 1, 1, 0, 0]]
    assert torch.equal(m.critic_in, m.obs)
    frozen = RunningMeanStd((2,), members=2)
    frozen.update(torch.tensor([[[0.0, 0.0], [2.0, 2.0]], [[10.0, 10.0], [30.0, 30.0]]]))
    n = mirror_member_batch(sym, raw, acts, normalize_obs=True)
    torch.testing.assert_close(n.obs, frozen.normalize(m.obs))
    # minibatch positions [2, 0] of every member: their copies sit at 2, 0 and 5, 3
    assert Symmetry.mirror_rows(torch.tensor([2, 0]), 3, 2).tolist() == [2, 0, 5, 3]
    states = mirror_members(sym, states=raw)["states"]
    assert states[1].tolist() == [[-6, -7], [-8, -9], [-10, -11], [6, 7], [8, 9], [10, 11]]


#: the two members' hyperparameters ([K] tensors, as PopPPO holds them)
HP = {"clip_param": torch.tensor([0.1, 0.3]), "vf_loss_coeff": torch.tensor([0.5, 1.0]),
      "entropy_coeff": torch.tensor([0.0, 0.01])}
CFG = SimpleNamespace(normalize_advantages=False, vf_clip_param=0.2)


def _two_member_cartpole():
    torch.manual_seed(0)
    return StackedActorCritic(2, 4, spaces.Discrete(2), [8], "tanh")


def test_two_members_augmented_loss_equals_each_members_hand_built_augmented_minibatch():
    """Minibatch positions [1, 3] of each member's 4 transitions: member j's loss is
    PPO's (with member j's clip, value and entropy weights) on rows
    [o_j1, o_j3, -o_j1, -o_j3] with actions [a_j1, a_j3, 1-a_j1, 1-a_j3]; new
    log-probs and values on every row, the originals' stored log-probs, advantages,
    targets and old values copied; entropy and KL the originals'. Member j's loss
    has no gradient on member 1-j."""
    sym = symmetry()
    module = _two_member_cartpole()
    obs = torch.tensor([[[0.1, 0.2, 0.3, 0.4], [0.5, -0.1, 0.2, 0.0], [-0.3, 0.3, 0.1, 0.2], [0.2, 0.1, -0.4, 0.3]],
                        [[0.0, 0.4, -0.2, 0.1], [-0.6, 0.2, 0.1, 0.3], [0.3, 0.0, 0.2, -0.1], [0.1, -0.3, 0.4, 0.2]]])
    actions = torch.tensor([[0, 1, 1, 0], [1, 1, 0, 0]])
    logp = torch.tensor([[-0.7, -0.6, -0.8, -0.65], [-0.5, -0.9, -0.7, -0.6]])
    adv = torch.tensor([[1.0, -0.5, 0.3, 2.0], [-1.0, 0.8, 0.2, -0.4]])
    targets = torch.tensor([[0.5, 1.5, -0.2, 0.7], [0.1, -0.3, 0.9, 1.2]])
    old_v = torch.tensor([[0.4, 1.0, 0.0, 0.9], [0.2, -0.1, 0.5, 1.0]])
    sym.freeze_obs_norm(torch.nn.Identity())
    mirrored = mirror_member_batch(sym, obs, actions, normalize_obs=False)
    idx = torch.tensor([1, 3])
    terms = symmetric_member_loss(sym, module, HP, CFG, idx, obs, actions, logp, adv, targets, old_v, obs, None,
                                  mirrored)
    assert terms.loss.shape == (2,) and terms.stats.shape == (5, 2)

    aug_obs = torch.stack([torch.stack([o[1], o[3], -o[1], -o[3]]) for o in obs])          # [2, 4, 4] by hand
    aug_act = torch.stack([torch.stack([a[1], a[3], 1 - a[1], 1 - a[3]]) for a in actions])
    new_logp, ent = module.evaluate_actions(aug_obs, aug_act)
    v = module.value(aug_obs)
    for j in range(2):
        rep = lambda x: torch.cat([x[j, idx], x[j, idx]])   # noqa: E731
        expected = ppo_loss(new_logp[j], torch.cat([ent[j, :2], ent[j, :2]]), rep(logp), rep(adv), v[j],
                            rep(targets), rep(old_v), clip_param=float(HP["clip_param"][j]), vf_clip_param=0.2,
                            vf_loss_coeff=float(HP["vf_loss_coeff"][j]),
                            entropy_coeff=float(HP["entropy_coeff"][j]))
        torch.testing.assert_close(terms.loss[j], expected.loss)
        torch.testing.assert_close(terms.stats[:3, j], expected.stats[:3])
        torch.testing.assert_close(terms.stats[2, j], ent[j, :2].mean())          # entropy: the originals'
        lr = new_logp[j, :2] - logp[j, idx]
        torch.testing.assert_close(terms.stats[3, j], ((lr.exp() - 1) - lr).mean())   # KL: the originals'
    params = list(module.parameters())
    for j in range(2):
        grads = torch.autograd.grad(terms.loss[j], params, retain_graph=True, allow_unused=True)
        for g in grads:
            if g is not None:
                assert float(g[1 - j].abs().sum()) == 0.0
        assert sum(float(g[j].abs().sum()) for g in grads if g is not None) > 0.0
    assert sym.take_loss_report() is not None   # the mirror loss is logged even when not used


def test_two_members_mirror_loss_continuous_hand_computed():
    """Linear policies mean_j(o) = w_j.o under the Pendulum mirror: the mirror of
    the mean minus the mean of the mirror is 2 w_j[0] o[0]. Member 0 (w = [1, 2, 3],
    o = [1, 0.5, 2]): (2*1*1)^2 = 4; member 1 (w = [0.5, 0, 0], o = [3, 1, 1]):
    (2*0.5*3)^2 = 9; each member's gradient only through its mirrored side."""
    sym = symmetry(fn=pendulum_mirror, augment=False, mirror_loss=True, coeff=0.5, discrete=False)
    module = StackedActorCritic(2, 3, spaces.Box(-2, 2, (1,)), [], "tanh")
    w = torch.tensor([[1.0, 2.0, 3.0], [0.5, 0.0, 0.0]])
    with torch.no_grad():
        module.pi.layers[0].weight.copy_(w.unsqueeze(-1))    # [K, in, out]
        module.pi.layers[0].bias.zero_()
    o = torch.tensor([[[1.0, 0.5, 2.0]], [[3.0, 1.0, 1.0]]])
    o_m = mirror_members(sym, obs=o)["obs"]
    loss = member_mirror_loss(sym, module, o, o_m)
    assert loss.tolist() == pytest.approx([4.0, 9.0])
    (grad,) = torch.autograd.grad(loss.sum(), [module.pi.layers[0].weight])
    # d/dw_j (w_j.o'_j - target_j)^2 = 2 * (2 w_j[0] o_j[0]) * o'_j
    expected = torch.stack([2 * 2.0 * o_m[0, 0], 2 * 3.0 * o_m[1, 0]]).unsqueeze(-1)
    torch.testing.assert_close(grad, expected)
    assert sym.take_loss_report().item() == pytest.approx(6.5)   # the members' mean


def test_two_members_mirror_loss_discrete_uses_the_action_permutation():
    """CartPole: pi_j(-o) is compared with pi_j(o) with its two actions swapped."""
    sym = symmetry(augment=False)
    module = StackedActorCritic(2, 4, spaces.Discrete(2), [], "tanh")
    with torch.no_grad():
        module.pi.layers[0].weight.zero_()
        module.pi.layers[0].weight[0, 0, 0] = 1.0    # member 0: logits [o0, 0.5]
        module.pi.layers[0].weight[1, 1, 1] = 2.0    # member 1: logits [0, 2 o1 - 0.5]
        module.pi.layers[0].bias.copy_(torch.tensor([[[0.0, 0.5]], [[0.0, -0.5]]]))
    o = torch.tensor([[[1.0, 0.0, 0.0, 0.0]], [[0.0, 1.0, 0.0, 0.0]]])
    loss = member_mirror_loss(sym, module, o, -o)
    for j, (logits, logits_m) in enumerate([([1.0, 0.5], [-1.0, 0.5]), ([0.0, 1.5], [0.0, -2.5])]):
        p, p_m = torch.softmax(torch.tensor(logits), -1), torch.softmax(torch.tensor(logits_m), -1)
        assert loss[j].item() == pytest.approx(((p_m - p.flip(0)) ** 2).mean().item())
    assert not loss.requires_grad   # logged only without use_mirror_loss


SYM = {"mirror_fn": CARTPOLE_MIRROR, "use_data_augmentation": True, "use_mirror_loss": True,
       "mirror_loss_coeff": 0.1}


def test_a_symmetric_population_of_one_is_symmetric_fastppo_from_the_same_seed():
    common = dict(rollout_length=8, num_epochs=2, num_minibatches=2, symmetry=SYM)
    f = FastPPOConfig().environment("CartPole", num_envs=8).training(**common).debugging(seed=3).build_algo()
    p = (PopPPOConfig().environment("CartPole").training(population_size=1, num_envs_per_member=8, **common)
         .debugging(seed=3).build_algo())
    for i in range(3):
        rf, rp = f.train(), p.train()
        for a, b in zip(f.module.parameters(), p.module.parameters()):
            b0 = b[0].t() if b[0].dim() == 2 and a.dim() == 2 else b[0]
            assert torch.equal(a, b0.reshape(a.shape)), i
        assert (rf["learners"]["default_policy"]["symmetry_loss"]
                == rp["learners"]["default_policy"]["symmetry_loss"])
    f.stop(), p.stop()


def test_a_symmetric_population_of_two_trains_and_resumes_exactly(tmp_path):
    cfg = (PopPPOConfig().environment("CartPole")
           .training(population_size=2, num_envs_per_member=4, rollout_length=8, num_epochs=1, num_minibatches=2,
                     hidden_sizes=[16], pbt_interval=None, symmetry=SYM)
           .debugging(seed=1))
    algo = cfg.build_algo()
    r = algo.train()
    assert r["learners"]["default_policy"]["symmetry_loss"] > 0.0
    path = algo.save_to_path(str(tmp_path / "c"))
    r1 = algo.train()
    restored = Algorithm.from_checkpoint(path)
    r2 = restored.train()
    for a, b in zip(algo.module.parameters(), restored.module.parameters()):
        assert torch.equal(a, b)
    assert r1["learners"]["default_policy"]["symmetry_loss"] == r2["learners"]["default_policy"]["symmetry_loss"]
    algo.stop(), restored.stop()


def test_popppo_takes_symmetry_and_refuses_rnd_with_one_line():
    PopPPOConfig().environment("CartPole").training(symmetry=SYM).validate()
    with pytest.raises(ValueError, match="`symmetry.use_mirror_loss`"):
        PopPPOConfig().environment("CartPole").training(symmetry={**SYM, "use_mirror_loss": 1}).validate()
    with pytest.raises(ValueError, match="`rnd` is FastPPO's extension; PopPPO does not implement it"):
        PopPPOConfig().environment("CartPole").training(rnd={"weight": 1.0}).validate()
