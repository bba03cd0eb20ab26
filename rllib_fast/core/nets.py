"""Small network builders shared by the algorithms."""
from __future__ import annotations

import math
from typing import Sequence

from torch import nn

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
