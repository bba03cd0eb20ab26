"""FastPPO's symmetry extension: the augmented minibatch (sizes, which rows are
mirrored, targets copied, log-probabilities recomputed), the mirror loss on
hand-computed numbers, validation, checkpoints and the shipped example."""
import math

import pytest
import torch
from gymnasium import spaces

from rllib_fast.algorithms.actor_critic import ActorCriticModule
from rllib_fast.algorithms.extensions.symmetry import (MirroredBatch, Symmetry, SymmetrySettings, cartpole_mirror,
                                                       pendulum_mirror)
from rllib_fast.algorithms.onpolicy.batch import OnPolicyBatch
from rllib_fast.algorithms.onpolicy.collectives import LearnerCollectives
from rllib_fast.algorithms.ppo import FastPPOConfig
from rllib_fast.algorithms.ppo.algorithm import PPOSettings, PPOUpdate
from rllib_fast.algorithms.ppo.loss import ppo_loss

CARTPOLE_MIRROR = "rllib_fast.algorithms.extensions:cartpole_mirror"


def symmetry(fn=cartpole_mirror, augment=True, mirror_loss=False, coeff=0.0, discrete=True, n=2):
    return Symmetry(SymmetrySettings(fn, augment, mirror_loss, coeff), discrete, n if discrete else None)


def two_copies(obs=None, actions=None, states=None):
    """A made-up symmetry group with two non-identity copies: negate, and negate+2."""
    twice = lambda x, f, g: None if x is None else torch.cat([f(x), g(x)])   # noqa: E731
    return (twice(obs, lambda o: -o, lambda o: -o + 2), twice(actions, lambda a: 1 - a, lambda a: a),
            twice(states, lambda s: -s, lambda s: s))


def test_mirror_rows_and_augment_put_each_copy_after_the_originals():
    sym = symmetry(fn=two_copies)
    raw = torch.arange(10.0).view(5, 2)
    acts = torch.tensor([0, 1, 1, 0, 1])
    sym.freeze_obs_norm(torch.nn.Identity())
    mirrored = sym.mirror_batch(raw, acts, normalize_obs=False)
    assert mirrored.obs.shape == (10, 2) and Symmetry.copies(mirrored, 5) == 2
    idx = torch.tensor([3, 1])
    rows = Symmetry.mirror_rows(idx, 5, 2)
    assert rows.tolist() == [3, 1, 8, 6]
    obs, act, crit = sym.augment(raw[idx], acts[idx], raw[idx], mirrored, rows)
    assert obs.tolist() == [[6, 7], [2, 3], [-6, -7], [-2, -3], [-4, -5], [0, -1]]
    assert act.tolist() == [0, 1, 1, 0, 0, 1]
    assert torch.equal(crit, obs)


def test_mirrored_observations_use_the_rollouts_frozen_statistics():
    """Raw observations are mirrored, then normalised with the statistics their
    originals were normalised with, even after the normaliser moved on."""
    from rllib_fast.core.normalize import RunningMeanStd

    norm = RunningMeanStd((4,))
    norm.update(torch.tensor([[1.0, 2.0, 3.0, 4.0], [3.0, 2.0, 1.0, 0.0]]))
    sym = symmetry()
    sym.freeze_obs_norm(norm)
    frozen = norm.normalize(-torch.ones(1, 4))
    norm.update(torch.full((3, 4), 50.0))   # the rollout's end updates the live statistics
    m = sym.mirror_batch(torch.ones(1, 4), torch.tensor([1]), normalize_obs=True)
    torch.testing.assert_close(m.obs, frozen)
    assert m.actions.tolist() == [0]


def _cartpole_rule(sym, clip=0.2):
    torch.manual_seed(0)
    module = ActorCriticModule(observation_space=spaces.Box(-5, 5, (4,)), action_space=spaces.Discrete(2),
                               inference_only=False, model_config={"hidden_sizes": [8]})
    cfg = FastPPOConfig().training(clip_param=clip, vf_clip_param=0.2, entropy_coeff=0.01, normalize_advantages=False)
    rule = PPOUpdate(module, torch.optim.SGD(module.parameters(), lr=0.0), PPOSettings.from_config(cfg),
                     LearnerCollectives())
    rule.symmetry = sym
    return rule, module


def test_augmented_ppo_loss_equals_the_plain_loss_on_the_hand_built_augmented_minibatch():
    """Minibatch [1, 3] of a 4-transition batch: the loss is PPO's on rows
    [o1, o3, -o1, -o3] with actions [a1, a3, 1-a1, 1-a3]; new log-probs computed on
    every row, stored log-probs, advantages, targets and old values of the
    originals copied; entropy and KL of the originals only."""
    sym = symmetry()
    rule, module = _cartpole_rule(sym)
    obs = torch.tensor([[0.1, 0.2, 0.3, 0.4], [0.5, -0.1, 0.2, 0.0], [-0.3, 0.3, 0.1, 0.2], [0.2, 0.1, -0.4, 0.3]])
    actions = torch.tensor([0, 1, 1, 0])
    logp = torch.tensor([-0.7, -0.6, -0.8, -0.65])
    adv = torch.tensor([1.0, -0.5, 0.3, 2.0])
    targets = torch.tensor([0.5, 1.5, -0.2, 0.7])
    old_v = torch.tensor([0.4, 1.0, 0.0, 0.9])
    sym.freeze_obs_norm(torch.nn.Identity())
    mirrored = sym.mirror_batch(obs, actions, normalize_obs=False)
    batch = OnPolicyBatch(obs, actions, logp, obs, adv, targets, old_v, None, mirrored=mirrored)
    idx = torch.tensor([1, 3])
    loss, stats = rule.loss(batch, idx, None)

    aug_obs = torch.stack([obs[1], obs[3], -obs[1], -obs[3]])
    aug_act = torch.tensor([1, 0, 0, 1])
    new_logp, ent = module.evaluate_actions(aug_obs, aug_act)
    v = module.value(aug_obs)
    rep = lambda x: torch.cat([x[idx], x[idx]])   # noqa: E731
    expected = ppo_loss(new_logp, torch.cat([ent[:2], ent[:2]]), rep(logp), rep(adv), v, rep(targets), rep(old_v),
                        clip_param=0.2, vf_clip_param=0.2, vf_loss_coeff=0.5, entropy_coeff=0.01)
    torch.testing.assert_close(loss, expected.loss)
    torch.testing.assert_close(stats[:3], expected.stats[:3])
    torch.testing.assert_close(stats[2], ent[:2].mean())   # entropy: the originals'
    lr = new_logp[:2] - logp[idx]
    torch.testing.assert_close(stats[3], ((lr.exp() - 1) - lr).mean())   # KL: the originals'
    # the plain (unaugmented) loss differs: the mirrors count
    plain = ppo_loss(new_logp[:2], ent[:2], logp[idx], adv[idx], v[:2], targets[idx], old_v[idx], clip_param=0.2,
                     vf_clip_param=0.2, vf_loss_coeff=0.5, entropy_coeff=0.01)
    assert not torch.allclose(plain.loss, loss)


def test_mirror_loss_continuous_hand_computed():
    """Linear policy mean(o) = w.o with w = [1, 2, 3]; o = [1, 0.5, 2]: mean 8;
    the Pendulum mirror o' = [1, -0.5, -2] gives mean -6, the mirrored action
    is -8: MSE (-6 - -8)^2 = 4, with gradient only through the mirrored side."""
    sym = symmetry(fn=pendulum_mirror, augment=False, mirror_loss=True, coeff=0.5, discrete=False)
    module = ActorCriticModule(observation_space=spaces.Box(-5, 5, (3,)), action_space=spaces.Box(-2, 2, (1,)),
                               inference_only=False, model_config={"hidden_sizes": []})
    with torch.no_grad():
        module.pi[0].weight.copy_(torch.tensor([[1.0, 2.0, 3.0]]))
        module.pi[0].bias.zero_()
    o = torch.tensor([[1.0, 0.5, 2.0]])
    o_m, _, _ = pendulum_mirror(obs=o)
    loss = sym.mirror_loss(module, o, o_m)
    assert loss.item() == pytest.approx(4.0)
    loss.backward()
    # d/dw (w.o' + 8)^2 = 2 * 2 * o'
    torch.testing.assert_close(module.pi[0].weight.grad, 4.0 * o_m)
    assert sym.take_loss_report().item() == pytest.approx(4.0) and sym.take_loss_report() is None


def test_mirror_loss_discrete_compares_probabilities_under_the_action_permutation():
    """CartPole: logits l(o) = W o; the mirror swaps the two actions, so the target
    for pi(-o) is pi(o) reversed."""
    sym = symmetry(augment=False, mirror_loss=False)
    module = ActorCriticModule(observation_space=spaces.Box(-5, 5, (4,)), action_space=spaces.Discrete(2),
                               inference_only=False, model_config={"hidden_sizes": []})
    with torch.no_grad():
        module.pi[0].weight.copy_(torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]))
        module.pi[0].bias.copy_(torch.tensor([0.0, 0.5]))
    o = torch.tensor([[1.0, 0.0, 0.0, 0.0]])
    loss = sym.mirror_loss(module, o, -o)
    p = torch.softmax(torch.tensor([1.0, 0.5]), -1)         # pi(o)
    p_m = torch.softmax(torch.tensor([-1.0, 0.5]), -1)      # pi(-o)
    expected = ((p_m - p.flip(0)) ** 2).mean()
    assert loss.item() == pytest.approx(expected.item())
    assert not loss.requires_grad   # logged only without use_mirror_loss


@pytest.mark.parametrize("bad, key", [
    ({"mirror_fn": "no.such.module:f"}, "symmetry.mirror_fn"),
    ({"mirror_fn": CARTPOLE_MIRROR, "use_mirror_loss": "yes"}, "symmetry.use_mirror_loss"),
    ({"mirror_fn": CARTPOLE_MIRROR, "mirror_loss_coeff": -1.0}, "symmetry.mirror_loss_coeff"),
    ({"mirror_fn": CARTPOLE_MIRROR, "augment": True}, "symmetry.augment"),
    ("cartpole", "symmetry"),
])
def test_bad_symmetry_config_fails_at_validate_naming_the_key(bad, key):
    with pytest.raises(ValueError, match=f"`{key}`"):
        FastPPOConfig().environment("CartPole").training(symmetry=bad).validate()


@pytest.mark.parametrize("config", ["HTSPPOConfig", "FastAPPOConfig"])
def test_symmetry_is_rejected_by_algorithms_that_do_not_implement_it(config):
    import rllib_fast.algorithms as algorithms

    cfg = getattr(algorithms, config)().environment("CartPole")
    with pytest.raises(ValueError, match="`symmetry` is FastPPO's extension"):
        cfg.training(symmetry={"mirror_fn": CARTPOLE_MIRROR}).validate()


def test_symmetric_fastppo_resumes_exactly_from_a_checkpoint(tmp_path):
    from ray.rllib.algorithms.algorithm import Algorithm

    cfg = (FastPPOConfig().environment("CartPole", num_envs=8)
           .training(rollout_length=8, symmetry={"mirror_fn": CARTPOLE_MIRROR, "use_data_augmentation": True,
                                                 "use_mirror_loss": True, "mirror_loss_coeff": 0.1})
           .debugging(seed=1))
    algo = cfg.build_algo()
    algo.train()
    path = algo.save_to_path(str(tmp_path / "c"))
    r1 = algo.train()
    restored = Algorithm.from_checkpoint(path)
    r2 = restored.train()
    for a, b in zip(algo.module.parameters(), restored.module.parameters()):
        assert torch.equal(a, b)
    assert r1["learners"]["default_policy"]["symmetry_loss"] == r2["learners"]["default_policy"]["symmetry_loss"]
    algo.stop(); restored.stop()


def test_shipped_symmetric_cartpole_example_learns():
    """tune_configs/cartpole-fastppo-symmetry.yaml through build_algo(): the
    augmented FastPPO reaches a mean return of 400 on CartPole."""
    from rllib_fast.cli import build_parser, plan_from_file

    from pathlib import Path
    path = Path(__file__).resolve().parents[2] / "tune_configs" / "cartpole-fastppo-symmetry.yaml"
    plan = plan_from_file(str(path), build_parser().parse_args(["train", "file", str(path)]))
    (spec,) = plan.experiments.values()
    cfg = FastPPOConfig().update_from_dict(spec["config"])
    assert cfg.symmetry["use_data_augmentation"]
    algo = cfg.build_algo()
    best = -math.inf
    for _ in range(40):
        r = algo.train()
        best = max(best, r["env_runners"].get("episode_return_mean", -math.inf))
        if best >= 400:
            break
    algo.stop()
    assert best >= 400, best
