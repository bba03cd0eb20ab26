"""Networks of PQL and its baselines: tanh policies in [-1, 1] action units,
a twin Q critic on concat(s, a) (scalar or distributional), and SAC's squashed
Gaussian policy. Every network is an MLP, optionally with LayerNorm after each
hidden layer (``layer_norm``: FastTD3's and FastSAC's normalised networks).
Every head's raw output is made float32 (``.float()``, a no-op in float32):
under ``update_dtype`` bfloat16 the matrix products run in bfloat16 inside
autocast, and what follows (tanh, the squashed Gaussian's log-probability,
softmax over the C51 atoms) stays float32 arithmetic.
Inputs are *normalised* observations; normalisation lives outside the
networks (the Actor owns the statistics, learners apply the latest ones at
sample time), so networks can be shipped between components as plain
parameter lists."""
from __future__ import annotations

import math
from typing import List, Optional, Sequence, Tuple

import torch
from torch import nn
from torch.nn import functional as F

from ...core.nets import mlp, squashed_gaussian


def pql_mlp(in_dim: int, hidden: Sequence[int], out_dim: int, activation: str, out_gain: float = 1.0,
            layer_norm: bool = False) -> nn.Sequential:
    """:func:`~rllib_fast.core.nets.mlp`, with ``layer_norm`` a LayerNorm
    between each hidden Linear and its activation (Linear -> LayerNorm ->
    activation; the head stays a plain Linear). LayerNorm keeps each hidden
    layer's pre-activations at zero mean and unit scale per sample whatever the
    input scale or how far the weights have drifted; the FastTD3/FastSAC recipes
    use it to keep the critic well conditioned under large batches and several
    updates per env step. The Linear layers are built (and initialised, drawing
    the same random numbers) exactly as without it."""
    net = mlp(in_dim, hidden, out_dim, activation, out_gain=out_gain)
    if not layer_norm:
        return net
    layers = []
    for i, m in enumerate(net):
        layers.append(m)
        if isinstance(m, nn.Linear) and i < len(net) - 1:
            layers.append(nn.LayerNorm(m.out_features))
    return nn.Sequential(*layers)


class DeterministicPolicy(nn.Module):
    """a = tanh(MLP(s)) (DDPG/TD3/PQL's actor)."""

    stochastic = False

    def __init__(self, obs_dim: int, act_dim: int, hidden: Sequence[int], activation: str,
                 layer_norm: bool = False):
        super().__init__()
        self.net = pql_mlp(obs_dim, hidden, act_dim, activation, out_gain=0.01, layer_norm=layer_norm)

    def forward(self, obs_n: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.net(obs_n).float())

    def act(self, obs_n: torch.Tensor, deterministic: bool = True) -> torch.Tensor:
        return self(obs_n)


class SquashedGaussianPolicy(nn.Module):
    """SAC's tanh-squashed diagonal Gaussian with a learned temperature α.

    ``log_alpha`` is a parameter of this module so that publishing the policy
    also publishes α (the V-learner's target needs both)."""

    stochastic = True

    def __init__(self, obs_dim: int, act_dim: int, hidden: Sequence[int], activation: str,
                 log_std_bounds: Tuple[float, float] = (-5.0, 2.0), init_alpha: float = 1.0,
                 layer_norm: bool = False):
        super().__init__()
        self.act_dim = act_dim
        self.net = pql_mlp(obs_dim, hidden, 2 * act_dim, activation, out_gain=0.01, layer_norm=layer_norm)
        self.log_std_bounds = log_std_bounds
        self.log_alpha = nn.Parameter(torch.tensor(math.log(init_alpha)))

    def sample(self, obs_n: torch.Tensor, deterministic: bool = False) -> Tuple[torch.Tensor, torch.Tensor]:
        """(action in [-1, 1], log-probability with the tanh correction)."""
        mean, log_std = self.net(obs_n).float().chunk(2, dim=-1)
        lo, hi = self.log_std_bounds
        log_std = lo + 0.5 * (hi - lo) * (torch.tanh(log_std) + 1.0)
        eps = torch.zeros_like(mean) if deterministic else torch.randn_like(mean)
        return squashed_gaussian(mean, log_std, eps)

    def forward(self, obs_n: torch.Tensor) -> torch.Tensor:
        return self.sample(obs_n, deterministic=True)[0]

    def act(self, obs_n: torch.Tensor, deterministic: bool = True) -> torch.Tensor:
        return self.sample(obs_n, deterministic)[0]


class DoubleQ(nn.Module):
    """Two independent Q MLPs on concat(s, a). With ``num_atoms > 1`` each head
    outputs logits over a fixed support (C51: PQL-D, FastTD3's critic); ``q()``
    returns expectations, which is what the policy maximises."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: Sequence[int], activation: str,
                 num_atoms: int = 1, v_min: float = -10.0, v_max: float = 10.0, layer_norm: bool = False):
        super().__init__()
        self.num_atoms = num_atoms
        self.q1 = pql_mlp(obs_dim + act_dim, hidden, num_atoms, activation, layer_norm=layer_norm)
        self.q2 = pql_mlp(obs_dim + act_dim, hidden, num_atoms, activation, layer_norm=layer_norm)
        if num_atoms > 1:
            self.register_buffer("support", torch.linspace(v_min, v_max, num_atoms))

    def heads(self, obs_n: torch.Tensor, action: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """Raw outputs of both heads: ``[B]`` values, or ``[B, K]`` logits."""
        x = torch.cat([obs_n, action], -1)
        a, b = self.q1(x).float(), self.q2(x).float()
        if self.num_atoms == 1:
            return a.squeeze(-1), b.squeeze(-1)
        return a, b

    def q(self, obs_n: torch.Tensor, action: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        a, b = self.heads(obs_n, action)
        if self.num_atoms == 1:
            return a, b
        return (F.softmax(a, -1) * self.support).sum(-1), (F.softmax(b, -1) * self.support).sum(-1)


def build_policy(kind: str, obs_dim: int, act_dim: int, hidden, activation: str, log_std_bounds=(-5.0, 2.0),
                 init_alpha: float = 1.0, layer_norm: bool = False) -> nn.Module:
    if kind == "sac":
        return SquashedGaussianPolicy(obs_dim, act_dim, hidden, activation, tuple(log_std_bounds), init_alpha,
                                      layer_norm)
    return DeterministicPolicy(obs_dim, act_dim, hidden, activation, layer_norm)


def tensors(module: nn.Module) -> List[torch.Tensor]:
    """Parameters then buffers, in a fixed order (what is shipped between components)."""
    return [p for p in module.parameters()] + [b for b in module.buffers()]


@torch.no_grad()
def snapshot(module: nn.Module, device: Optional[torch.device] = None) -> List[torch.Tensor]:
    return [t.detach().to(device or t.device, copy=True) for t in tensors(module)]


@torch.no_grad()
def load_snapshot(module: nn.Module, snap: Sequence[torch.Tensor]) -> None:
    dst = tensors(module)
    if len(dst) != len(snap):
        raise ValueError(f"weight snapshot has {len(snap)} tensors, module has {len(dst)}")
    torch._foreach_copy_(dst, [s.to(d.device, non_blocking=True) for s, d in zip(snap, dst)])
