"""FastPPO's random network distillation curiosity: the intrinsic reward and its
normalisations on hand-checked numbers, the weight schedules, which
observations are read, validation, exact resume, and the shipped
MountainCarContinuous example (learned with RND, not without)."""
import math
from pathlib import Path

import pytest
import torch

from rllib_fast.algorithms.extensions.rnd import RandomNetworkDistillation, scheduled_weight
from rllib_fast.algorithms.ppo import FastPPOConfig
from rllib_fast.envs.base import Step

EXAMPLE = Path(__file__).resolve().parents[2] / "tune_configs" / "mountaincar-fastppo-rnd.yaml"


def rnd(T=3, N=2, D=2, **settings):
    torch.manual_seed(0)
    base = {"num_outputs": 1, "predictor_hidden_dims": [], "target_hidden_dims": [], "state_normalization": False,
            "reward_normalization": False, "weight": 1.0}
    return RandomNetworkDistillation({**base, **settings}, D, T, N, gamma=0.5, device="cpu")


def set_linear(net, w, b=0.0):
    with torch.no_grad():
        net[0].weight.copy_(torch.tensor([w]))
        net[0].bias.fill_(b)


def test_intrinsic_reward_is_the_weighted_embedding_distance():
    """Linear target t(x) = 2 x0 - x1 and predictor p(x) = x0: reward = weight * |x0 - x1|."""
    m = rnd(weight=3.0)
    set_linear(m.target, [2.0, -1.0])
    set_linear(m.predictor, [1.0, 0.0])
    m.inputs.copy_(torch.tensor([[[1.0, 0.0], [2.0, 5.0]], [[0.0, 1.0], [3.0, 3.0]], [[1.0, 1.0], [4.0, 0.0]]]))
    r = m.intrinsic_rewards()
    expected = 3.0 * (m.inputs[..., 0] - m.inputs[..., 1]).abs()
    torch.testing.assert_close(r, expected)
    rewards = torch.ones(3, 2)
    stats = m.add_intrinsic_rewards(rewards)
    torch.testing.assert_close(rewards, 1.0 + expected)
    assert float(stats["rnd_intrinsic_reward"]) == pytest.approx(float(expected.mean()))


def test_state_normalization_absorbs_the_rollout_before_embedding():
    m = rnd(state_normalization=True)
    set_linear(m.target, [1.0, 0.0])
    set_linear(m.predictor, [0.0, 0.0])
    x = torch.tensor([[[1.0, 0.0], [3.0, 0.0]], [[5.0, 0.0], [7.0, 0.0]], [[9.0, 0.0], [11.0, 0.0]]])
    m.inputs.copy_(x)
    r = m.intrinsic_rewards()
    col = x[..., 0]
    mean, var = col.mean(), col.var(unbiased=False)
    # RunningMeanStd starts at mean 0, var 1 with a 1e-4 prior count
    torch.testing.assert_close(r, ((col - mean) / torch.sqrt(var + 1e-8)).abs(), atol=1e-3, rtol=1e-3)


def test_reward_normalization_divides_by_the_std_of_discounted_sums():
    """Errors e_t per env; running sums R_t = 0.5 R_{t-1} + e_t (gamma 0.5), carried
    across rollouts; the rewards are e_t / std(all R so far)."""
    m = rnd(reward_normalization=True)
    set_linear(m.target, [1.0, 0.0])
    set_linear(m.predictor, [0.0, 0.0])
    e = torch.tensor([[1.0, 2.0], [3.0, 0.0], [0.0, 4.0]])
    m.inputs[..., 0] = e
    r = m.intrinsic_rewards()
    sums = torch.tensor([[1.0, 2.0], [3.5, 1.0], [1.75, 4.5]])
    torch.testing.assert_close(m.discounted, sums[-1])
    std = sums.flatten().var(unbiased=False).sqrt()
    torch.testing.assert_close(r, e / std, atol=1e-3, rtol=1e-3)


def test_weight_schedules():
    assert scheduled_weight(2.0, None, 10) == 2.0
    assert scheduled_weight(2.0, {"mode": "constant"}, 10) == 2.0
    step = {"mode": "step", "final_step": 5, "final_value": 0.5}
    assert [scheduled_weight(2.0, step, s) for s in (4, 5, 6)] == [2.0, 0.5, 0.5]
    lin = {"mode": "linear", "initial_step": 10, "final_step": 20, "final_value": 0.0}
    assert [scheduled_weight(2.0, lin, s) for s in (5, 10, 15, 20, 25)] == [2.0, 2.0, 1.0, 0.0, 0.0]
    # the clock counts batched env steps, one per rollout step (rsl_rl's counter)
    m = rnd(weight=2.0, weight_schedule={"mode": "step", "final_step": 5, "final_value": 0.0})
    set_linear(m.target, [1.0, 0.0])
    set_linear(m.predictor, [0.0, 0.0])
    m.inputs.fill_(1.0)
    assert m.intrinsic_rewards()[:, 0].tolist() == [2.0, 2.0, 2.0]   # steps 1, 2, 3
    assert m.intrinsic_rewards()[:, 0].tolist() == [2.0, 0.0, 0.0]   # steps 4, 5, 6
    assert m.env_steps == 6


def test_record_reads_the_chosen_terms_of_the_true_next_observation():
    m = rnd(T=1, N=2, D=1, obs_indices=[1])
    obs = torch.tensor([[0.0, 1.0, 2.0], [0.0, 0.0, 0.0]])         # env 1 was reset
    final = torch.tensor([[0.0, 1.0, 2.0], [7.0, 8.0, 9.0]])       # its true next observation
    step = Step(obs, torch.zeros(2), torch.tensor([False, True]), torch.zeros(2, dtype=torch.bool), final)
    m.record(0, step)
    assert m.inputs[0, :, 0].tolist() == [1.0, 8.0]


@pytest.mark.parametrize("bad, key", [
    ({"weight": -1.0}, "rnd.weight"),
    ({"obs_group": "critic"}, "rnd.obs_group"),
    ({"obs_indices": []}, "rnd.obs_indices"),
    ({"learning_rate": 0}, "rnd.learning_rate"),
    ({"weight_schedule": {"mode": "cosine"}}, "rnd.weight_schedule"),
    ({"weight_schedule": {"mode": "linear", "initial_step": 5, "final_step": 5, "final_value": 0.0}},
     "rnd.weight_schedule.final_step"),
    ({"curiosity": 1.0}, "rnd.curiosity"),
])
def test_bad_rnd_config_fails_at_validate_naming_the_key(bad, key):
    with pytest.raises(ValueError, match=f"`{key}"):
        FastPPOConfig().environment("MountainCarContinuous").training(rnd=bad).validate()


def test_rnd_is_rejected_with_learn_while_stepping_and_data_parallel_learners():
    base = FastPPOConfig().environment("MountainCarContinuous", num_envs=8)
    with pytest.raises(ValueError, match="`rnd` is not implemented with `learn_while_stepping`"):
        base.copy(copy_frozen=False).training(rnd={}, learn_while_stepping=True).validate()
    with pytest.raises(ValueError, match="`rnd` needs one learner"):
        base.copy(copy_frozen=False).training(rnd={}).learners(num_learners=2).validate()


def test_rnd_fastppo_resumes_exactly_from_a_checkpoint(tmp_path):
    from ray.rllib.algorithms.algorithm import Algorithm

    schedule = {"mode": "linear", "initial_step": 0, "final_step": 100, "final_value": 0.1}
    cfg = (FastPPOConfig().environment("MountainCarContinuous", num_envs=8)
           .training(rollout_length=8, decorrelate_steps=8, rnd={"weight": 1.0, "weight_schedule": schedule})
           .debugging(seed=1))
    algo = cfg.build_algo()
    algo.train()
    path = algo.save_to_path(str(tmp_path / "c"))
    r1 = algo.train()
    restored = Algorithm.from_checkpoint(path)
    assert restored.rnd.env_steps == algo.rnd.env_steps - 8
    r2 = restored.train()
    for a, b in zip(list(algo.module.parameters()) + list(algo.rnd.parameters()),
                    list(restored.module.parameters()) + list(restored.rnd.parameters())):
        assert torch.equal(a, b)
    torch.testing.assert_close(restored.rnd.discounted, algo.rnd.discounted, rtol=0, atol=0)
    L1, L2 = r1["learners"]["default_policy"], r2["learners"]["default_policy"]
    assert L1["rnd_intrinsic_reward"] == L2["rnd_intrinsic_reward"] and L1["rnd_loss"] == L2["rnd_loss"]
    algo.stop(); restored.stop()


def _example_config(**overrides):
    from rllib_fast.cli import build_parser, plan_from_file

    plan = plan_from_file(str(EXAMPLE), build_parser().parse_args(["train", "file", str(EXAMPLE)]))
    (spec,) = plan.experiments.values()
    return FastPPOConfig().update_from_dict({**spec["config"], **overrides}), spec["stop"]


def _best_return(cfg, env_steps: int) -> float:
    algo = cfg.build_algo()
    best = -math.inf
    try:
        while True:
            r = algo.train()
            best = max(best, r["env_runners"].get("episode_return_mean", -math.inf))
            if best > 90 or r["num_env_steps_sampled_lifetime"] >= env_steps:
                return best
    finally:
        algo.stop()


@pytest.mark.slow
def test_shipped_mountaincar_example_learns_with_rnd_and_not_without():
    """tune_configs/mountaincar-fastppo-rnd.yaml: FastPPO with RND reaches
    gymnasium's solved threshold (a mean return above 90) within 100k env steps;
    the same config without RND does not (its action penalty drives the policy
    to stand still before the sparse goal reward is found)."""
    cfg, stop = _example_config()
    assert cfg.rnd is not None and stop["env_runners/episode_return_mean"] == 90
    assert _best_return(cfg, 100_000) > 90
    plain, _ = _example_config(rnd=None)
    assert _best_return(plain, 100_000) <= 90
