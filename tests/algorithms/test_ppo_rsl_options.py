"""FastPPO's rsl_rl options (docs/sources.md, "FastPPO vs rsl_rl, difference by
difference"): each gives rsl_rl 5.4.2's behaviour for one difference, the default
keeps FastPPO's own."""
import math

import pytest
import torch
from torch import nn

from rllib_fast.algorithms.ppo import FastPPOConfig
from rllib_fast.core.nets import mlp


def small(env="Pendulum", n=8, **kw):
    kw.setdefault("rollout_length", 8)
    return FastPPOConfig().environment(env, num_envs=n).training(**kw).debugging(seed=3)


def linears(net):
    return [m for m in net if isinstance(m, nn.Linear)]


def test_torch_init_is_nn_linear_default_and_orthogonal_is_unchanged():
    torch.manual_seed(0)
    ref = [nn.Linear(32, 256), nn.Linear(256, 256), nn.Linear(256, 4)]
    torch.manual_seed(0)
    net = mlp(32, [256, 256], 4, "elu", out_gain=0.01, init="torch")
    for got, want in zip(linears(net), ref):   # the same draws as nn.Linear's own init
        torch.testing.assert_close(got.weight, want.weight, rtol=0, atol=0)
        torch.testing.assert_close(got.bias, want.bias, rtol=0, atol=0)
        bound = 1 / math.sqrt(got.in_features)   # Kaiming-uniform(a=sqrt 5) = U(+-1/sqrt(fan_in)); same bias
        assert float(got.weight.abs().max()) <= bound and float(got.bias.abs().max()) <= bound
        assert float(got.bias.abs().max()) > 0.5 * bound
    ortho = mlp(32, [256, 256], 4, "elu", out_gain=0.01)
    for lin in linears(ortho):
        assert float(lin.bias.abs().max()) == 0.0
    w = linears(ortho)[0].weight   # 256 x 32, gain sqrt 2: orthonormal columns scaled by sqrt 2
    torch.testing.assert_close(w.T @ w, 2.0 * torch.eye(32), atol=1e-4, rtol=0)
    assert float(linears(ortho)[-1].weight.norm(dim=1).max()) == pytest.approx(0.01, rel=1e-4)


def test_init_option_reaches_the_module_and_survives_a_checkpoint(tmp_path):
    from ray.rllib.algorithms.algorithm import Algorithm

    algo = small(init="torch", hidden_sizes=[16, 16]).build_algo()
    head = linears(algo.module.pi)[-1]
    assert float(head.bias.abs().max()) > 0   # not the orthogonal init's zero bias
    assert float(head.weight.norm(dim=1).max()) > 0.05   # not the 0.01-gain head
    path = algo.save_to_path(str(tmp_path / "c"))
    restored = Algorithm.from_checkpoint(path)
    assert restored.config.init == "torch"
    for a, b in zip(algo.module.parameters(), restored.module.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    algo.stop(); restored.stop()


def test_init_default_is_orthogonal():
    algo = small(hidden_sizes=[16, 16]).build_algo()
    assert algo.config.init == "orthogonal"
    assert all(float(lin.bias.abs().max()) == 0.0 for lin in linears(algo.module.pi))
    algo.stop()


def test_init_validation_names_key_and_allowed_values():
    with pytest.raises(ValueError, match=r"`init` = 'xavier'.*allowed: one of 'orthogonal', 'torch'"):
        small(init="xavier").validate()
