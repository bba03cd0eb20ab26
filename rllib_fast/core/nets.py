"""Small network builders shared by the algorithms."""
from __future__ import annotations

import math
from typing import Sequence, Tuple

import torch
from torch import nn
from torch.nn import functional as F

ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU, "silu": nn.SiLU, "gelu": nn.GELU}


def mlp(in_dim: int, hidden: Sequence[int], out_dim: int, activation: str = "tanh",
        out_gain: float = 1.0) -> nn.Sequential:
    """Orthogonally initialised MLP (the PPO-standard init: sqrt(2) hidden
    gain, a small gain on policy heads so initial actions are near-uniform)."""
    act = ACTIVATIONS[activation]
    layers, d = [], in_dim
    for h in hidden:
        lin = nn.Linear(d, h)
        nn.init.orthogonal_(lin.weight, math.sqrt(2))
        nn.init.zeros_(lin.bias)
        layers += [lin, act()]
        d = h
    head = nn.Linear(d, out_dim)
    nn.init.orthogonal_(head.weight, out_gain)
    nn.init.zeros_(head.bias)
    layers.append(head)
    return nn.Sequential(*layers)


def squashed_gaussian(mean: torch.Tensor, log_std: torch.Tensor, eps: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """SAC's tanh-squashed Gaussian: the action ``tanh(u)``, ``u = mean +
    std * eps`` (``eps`` standard normal; zeros for the deterministic action),
    and its log-probability summed over the last dimension, with the
    change-of-variables term ``log(1 - tanh(u)^2) = 2 (log 2 - u -
    softplus(-2u))`` written in the form that stays finite where tanh
    saturates (the naive form gives log 0 for |u| > ~9 in float32)."""
    u = mean + log_std.exp() * eps
    logp = (-0.5 * eps.square() - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
    logp = logp - (2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u))).sum(-1)
    return torch.tanh(u), logp
