"""``critic_hidden_sizes``: the critic's own hidden layers (FastPPO, FastA2C).

Why the key exists: the actor runs at every env step and in the update, the
critic only in the update, so a small actor beside a larger critic keeps the
acting forward and the policy's half of the update cheap while the value
estimate keeps its capacity (the Go1 recipe's question, docs/benchmarks.md).
"""
import pytest
import torch
from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.core.columns import Columns
from torch import nn

from rllib_fast.algorithms.a2c import FastA2CConfig
from rllib_fast.algorithms.pop_ppo import PopPPOConfig
from rllib_fast.algorithms.ppo import FastPPOConfig
from tests.algorithms._learning import best_return


def widths(seq: nn.Sequential):
    return [m.out_features for m in seq if isinstance(m, nn.Linear)]


def small(cls=FastPPOConfig, **kw):
    kw.setdefault("rollout_length", 8)
    return cls().environment("Pendulum", num_envs=8).training(**kw).debugging(seed=3)


@pytest.mark.parametrize("cls", [FastPPOConfig, FastA2CConfig])
def test_actor_and_critic_get_their_own_sizes(cls):
    algo = small(cls, hidden_sizes=[16], critic_hidden_sizes=[48, 24]).build_algo()
    m = algo.module
    assert widths(m.pi) == [16, 1] and widths(m.vf) == [48, 24, 1]
    algo.train()
    algo.stop()


def test_default_is_the_actors_sizes():
    algo = small(hidden_sizes=[16, 8]).build_algo()
    assert widths(algo.module.pi) == [16, 8, 1] and widths(algo.module.vf) == [16, 8, 1]
    algo.stop()


def test_checkpoint_restores_the_critics_own_sizes(tmp_path):
    algo = small(hidden_sizes=[16], critic_hidden_sizes=[40, 20]).build_algo()
    algo.train()
    path = algo.save_to_path(str(tmp_path / "ckpt"))
    restored = Algorithm.from_checkpoint(path)
    assert widths(restored.module.vf) == [40, 20, 1]
    for a, b in zip(algo.module.state_dict().values(), restored.module.state_dict().values()):
        torch.testing.assert_close(a, b)
    module = restored.get_module()
    assert module.compute_values({Columns.OBS: torch.zeros(4, 3)}).shape == (4,)
    restored.train()   # and it keeps training
    algo.stop(); restored.stop()


@pytest.mark.parametrize("cfg,match", [
    (lambda: small(critic_hidden_sizes=[0, 8]), r"critic_hidden_sizes"),
    (lambda: small(critic_hidden_sizes="big"), r"critic_hidden_sizes"),
    (lambda: small(shared_trunk=True, critic_hidden_sizes=[64]),
     r"`critic_hidden_sizes` = \[64\] cannot apply; allowed with shared_trunk: critic_hidden_sizes = None"),
    (lambda: PopPPOConfig().environment("Pendulum").training(critic_hidden_sizes=[64]),
     r"`critic_hidden_sizes` = \[64\] is not implemented by PopPPO.*allowed: None"),
])
def test_bad_settings_are_named_at_validation(cfg, match):
    with pytest.raises(ValueError, match=match):
        cfg().validate()


@pytest.mark.slow
def test_small_actor_with_a_larger_critic_learns_pendulum():
    """The threshold of test_ppo.py's defaults run, with the actor at half the
    defaults' width and the critic at twice it."""
    cfg = (FastPPOConfig().environment("Pendulum")
           .training(hidden_sizes=[32, 32], critic_hidden_sizes=[128, 128]).debugging(seed=0))
    assert best_return(cfg, -250, 300) >= -250
