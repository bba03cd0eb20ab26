"""Small network builders shared by the algorithms."""
from __future__ import annotations

import math
from typing import Sequence, Tuple

import torch
from torch import nn
from torch.nn import functional as F

ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU, "silu": nn.SiLU, "gelu": nn.GELU}

#: ``hidden_sizes='auto'`` below this observation size: the classic control tasks.
SMALL_OBS_DIM = 16
SMALL_HIDDEN = (128, 128)


def auto_hidden_sizes(setting, obs_dim: int, large: Sequence[int]) -> list:
    """``hidden_sizes`` in effect: the setting itself, or for ``'auto'`` the
    algorithm's paper width (``large``) on robot-sized observations and
    [128, 128] below 16 observation dims. Why: on a small task the paper width
    only costs time, and on a CPU the update's width sets the speed (PopTD3 on
    Pendulum learns as much per env step at [128, 128] as at [256, 256];
    docs/defaults.md)."""
    if setting != "auto":
        return list(setting)
    return list(large) if obs_dim >= SMALL_OBS_DIM else list(SMALL_HIDDEN)


#: layer initialisations ``mlp`` offers (the on-policy config key ``init``)
INITS = ("orthogonal", "torch")


def mlp(in_dim: int, hidden: Sequence[int], out_dim: int, activation: str = "tanh",
        out_gain: float = 1.0, init: str = "orthogonal") -> nn.Sequential:
    """An MLP, initialised by ``init``: 'orthogonal' (the PPO-standard init:
    sqrt(2) hidden gain, ``out_gain`` on the head, so a policy head with a
    small gain starts near-uniform; zero biases) or 'torch' (PyTorch's own
    ``nn.Linear`` init on every layer, ``out_gain`` unused: rsl_rl's, offered
    because its ELU networks learn with it; comparison in docs/sources.md)."""
    if init not in INITS:
        raise ValueError(f"mlp: init = {init!r}; allowed: {', '.join(INITS)}")
    orthogonal = init == "orthogonal"
    act = ACTIVATIONS[activation]
    layers, d = [], in_dim
    for h in hidden:
        lin = nn.Linear(d, h)
        if orthogonal:
            nn.init.orthogonal_(lin.weight, math.sqrt(2))
            nn.init.zeros_(lin.bias)
        layers += [lin, act()]
        d = h
    head = nn.Linear(d, out_dim)
    if orthogonal:
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
