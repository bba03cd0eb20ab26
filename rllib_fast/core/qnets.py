"""Q-networks for FastDQN and its Rainbow components.

Everything here is a plain torch module or a pure tensor function, so the
learner can keep its hot path on the device (no ``.item()``, no host sync):

- :class:`NoisyLinear`: factorised Gaussian NoisyNet layer (Fortunato et al. 2018).
- :class:`NatureCNN` / :class:`MinAtarCNN` / :func:`make_trunk`: observation
  encoders (Mnih et al. 2015 conv stack; Young & Tian 2019 MinAtar conv; MLP).
- :class:`QNetwork`: trunk -> (dueling) (noisy) head(s), scalar or C51 output.
- :func:`categorical_projection`: the C51 target projection (Bellemare et al. 2017, Alg. 1).
- :func:`dueling_aggregate`: the Dueling head's combination of value and advantages.
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from rllib_fast.core.nets import ACTIVATIONS

__all__ = [
    "NoisyLinear", "NatureCNN", "MinAtarCNN", "ChannelsLastToFirst", "make_trunk", "resolve_trunk_kind",
    "conv_out_hw", "QNetwork", "categorical_projection",
    "dueling_aggregate",
]


# --------------------------------------------------------------------------- noisy layer
class NoisyLinear(nn.Module):
    """Factorised Gaussian noisy linear layer, ``y = (mu_w + sigma_w * eps_w) x + mu_b + sigma_b * eps_b``.

    Factorised noise (Fortunato et al. §3.2): ``eps_w = f(eps_out) f(eps_in)^T``,
    ``eps_b = f(eps_out)``, ``f(x) = sign(x) sqrt|x|`` -- only ``in + out`` normal
    draws per resample instead of ``in * out``. Init as in the paper for the
    factorised case: ``mu ~ U(-1/sqrt(in), 1/sqrt(in))``, ``sigma = sigma0/sqrt(in)``.

    Noise is held in buffers and only changes on :meth:`reset_noise` (once per
    acting step / learner batch, as in the paper), which draws on the buffers'
    device (no host sync). The forward never materialises the ``[out, in]``
    noise matrix: ``(sigma_w * eps_out eps_in^T) x == eps_out * (sigma_w (eps_in * x))``.
    Noise is used in training mode unless ``noise=False``; eval mode uses mu only.

    Per-row noise (``reset_noise(rows=N)``): the same formula with ``eps_in``
    ``[N, in]`` and ``eps_out`` ``[N, out]`` gives every row of the batch its
    own factorised weight perturbation, at the cost of ``N (in + out)`` draws.
    Acting with N envs uses it: the paper's agent is one actor with one noise
    sample per step, and a single draw shared by thousands of envs would make
    them all explore in the same direction at once (each env is an actor, as in
    the paper's asynchronous variant, where every actor has its own noise).

    The noise is not part of the ``state_dict`` (its shape follows the last
    draw; every acting step and update draws afresh before use, so a restored
    run does not need the old draw).
    """

    def __init__(self, in_features: int, out_features: int, sigma0: float = 0.5):
        super().__init__()
        self.in_features, self.out_features, self.sigma0 = in_features, out_features, sigma0
        self.weight_mu = nn.Parameter(torch.empty(out_features, in_features))
        self.weight_sigma = nn.Parameter(torch.empty(out_features, in_features))
        self.bias_mu = nn.Parameter(torch.empty(out_features))
        self.bias_sigma = nn.Parameter(torch.empty(out_features))
        self.register_buffer("eps_in", torch.zeros(in_features), persistent=False)
        self.register_buffer("eps_out", torch.zeros(out_features), persistent=False)
        self.reset_parameters()
        self.reset_noise()

    def reset_parameters(self) -> None:
        bound = 1.0 / math.sqrt(self.in_features)
        nn.init.uniform_(self.weight_mu, -bound, bound)
        nn.init.uniform_(self.bias_mu, -bound, bound)
        nn.init.constant_(self.weight_sigma, self.sigma0 * bound)
        nn.init.constant_(self.bias_sigma, self.sigma0 * bound)

    @torch.no_grad()
    def reset_noise(self, rows: Optional[int] = None, generator: Optional[torch.Generator] = None) -> None:
        """Fresh ``f(N(0, 1))`` draws: one shared by the whole batch (``rows=None``),
        or one per row of a batch of ``rows`` (``generator``, if given, must be
        on the buffers' device).

        Draws in place while the shape stays (buffer addresses fixed for CUDA
        graphs / torch.compile) but bumps their autograd version: call it after
        ``backward()``, e.g. right after the optimizer step, never between a
        forward and its backward.
        """
        shape_in = (self.in_features,) if rows is None else (rows, self.in_features)
        shape_out = (self.out_features,) if rows is None else (rows, self.out_features)
        if tuple(self.eps_in.shape) != shape_in:
            self.eps_in = self.eps_in.new_empty(shape_in)
            self.eps_out = self.eps_out.new_empty(shape_out)
        for eps in (self.eps_in, self.eps_out):
            eps.normal_(generator=generator)
            eps.copy_(eps.sign() * eps.abs().sqrt())

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # checkpoints written before the noise left the state_dict carry it: drop it
        for name in ("eps_in", "eps_out"):
            state_dict.pop(prefix + name, None)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def forward(self, x: torch.Tensor, noise: Optional[bool] = None) -> torch.Tensor:
        y = F.linear(x, self.weight_mu, self.bias_mu)
        use_noise = self.training if noise is None else noise
        if use_noise:
            y = y + self.eps_out * (F.linear(x * self.eps_in, self.weight_sigma) + self.bias_sigma)
        return y

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, sigma0={self.sigma0}"


# --------------------------------------------------------------------------- trunks
def conv_out_hw(hw: Sequence[int], kernel: int, stride: int, padding: int) -> tuple[int, int]:
    """Spatial output size of a square conv: ``floor((n + 2p - k) / s) + 1`` per axis."""
    return tuple((n + 2 * padding - kernel) // stride + 1 for n in hw)  # type: ignore[return-value]


def _to_float_image(x: torch.Tensor, scale_uint8: bool) -> torch.Tensor:
    if x.dtype == torch.uint8 and scale_uint8:
        return x.float() * (1.0 / 255.0)
    return x.float()  # bool (MinAtar) -> {0,1}; float assumed already scaled


class NatureCNN(nn.Module):
    """DQN-Net conv stack (Mnih et al. 2015): 32@8x8 s4, 64@4x4 s2, 64@3x3 s1, ReLU, flatten.

    Input channels-first ``[B, C, H, W]``; uint8 pixels are scaled by 1/255 here
    (so replay can store uint8, 4x smaller), bool/float are only cast.

    Paddings default to ``(0, 1, 1)``: Stooke & Abbeel §5.1 use padding 1 in
    conv 2 and 3 with 104x80 frames and say "the convolution output is always
    25x19". Computing the shapes shows 25x19 is the output of **conv 1**
    (``(104-8)/4+1 = 25``, ``(80-8)/4+1 = 19``, exact, which is why they crop to
    104x80); with padding 1 the stride-2 conv 2 gives 12x9 and conv 3 keeps
    12x9 (64*12*9 = 6912 features). No padding of a 4x4 stride-2 conv can keep
    25x19 (it would need p=14 on H and p=11 on W), so "always 25x19" can only
    refer to conv 1. ``conv_hw`` lists the per-layer shapes; 84x84 gives
    20x20 -> 10x10 -> 10x10.
    """

    CHANNELS, KERNELS, STRIDES = (32, 64, 64), (8, 4, 3), (4, 2, 1)

    def __init__(self, in_channels: int, input_hw: Sequence[int], paddings: Sequence[int] = (0, 1, 1)):
        super().__init__()
        layers, c, hw, self.conv_hw = [], in_channels, tuple(input_hw), []
        for out_c, k, s, p in zip(self.CHANNELS, self.KERNELS, self.STRIDES, paddings):
            hw = conv_out_hw(hw, k, s, p)
            if min(hw) < 1:
                raise ValueError(f"NatureCNN: input {tuple(input_hw)} is too small (layer output {hw}); "
                                 f"use MinAtarCNN / trunk='minatar_cnn' for small images")
            conv = nn.Conv2d(c, out_c, k, s, p)
            nn.init.orthogonal_(conv.weight, math.sqrt(2))
            nn.init.zeros_(conv.bias)
            layers += [conv, nn.ReLU()]
            self.conv_hw.append(hw)
            c = out_c
        self.net = nn.Sequential(*layers, nn.Flatten())
        self.out_hw, self.out_dim = hw, c * hw[0] * hw[1]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(_to_float_image(x, scale_uint8=True))


class MinAtarCNN(nn.Module):
    """MinAtar conv (Young & Tian 2019): one 16@3x3 stride-1 conv (no padding) + ReLU, flatten.

    MinAtar frames are 10x10 binary channels, so no 1/255 scaling (a uint8 or
    bool 0/1 input is only cast). Output ``16 * (H-2) * (W-2)`` = 1024 for 10x10.
    """

    def __init__(self, in_channels: int, input_hw: Sequence[int] = (10, 10)):
        super().__init__()
        conv = nn.Conv2d(in_channels, 16, 3, 1)
        nn.init.orthogonal_(conv.weight, math.sqrt(2))
        nn.init.zeros_(conv.bias)
        self.net = nn.Sequential(conv, nn.ReLU(), nn.Flatten())
        self.out_hw = conv_out_hw(input_hw, 3, 1, 0)
        if min(self.out_hw) < 1:
            raise ValueError(f"MinAtarCNN: input {tuple(input_hw)} is smaller than the 3x3 kernel")
        self.out_dim = 16 * self.out_hw[0] * self.out_hw[1]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(_to_float_image(x, scale_uint8=False))


class ChannelsLastToFirst(nn.Module):
    """``[B, H, W, C]`` (the env convention) -> ``[B, C, H, W]`` (what Conv2d wants)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.permute(0, 3, 1, 2)


class _Float(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.float()


def _dense(in_dim: int, hidden: Sequence[int], activation: str) -> tuple[list[nn.Module], int]:
    """Orthogonal(sqrt 2) Linear + activation layers, the same init as ``nets.mlp``'s hidden layers."""
    layers, d = [], in_dim
    for h in hidden:
        lin = nn.Linear(d, h)
        nn.init.orthogonal_(lin.weight, math.sqrt(2))
        nn.init.zeros_(lin.bias)
        layers += [lin, ACTIVATIONS[activation]()]
        d = h
    return layers, d


TRUNK_KINDS = ("auto", "mlp", "nature_cnn", "minatar_cnn")
#: QNetwork's default hidden sizes per trunk (MLP: common DQN choice; Nature: Mnih 2015's
#: 512-unit FC; MinAtar: Young & Tian's 128-unit FC).
DEFAULT_HIDDEN = {"mlp": (256, 256), "nature_cnn": (512,), "minatar_cnn": (128,)}


def resolve_trunk_kind(obs_shape: Sequence[int], kind: str = "auto") -> str:
    """Validate ``kind`` and resolve ``"auto"`` (see :func:`make_trunk`)."""
    if kind not in TRUNK_KINDS:
        raise ValueError(f"trunk kind {kind!r} not in {TRUNK_KINDS}")
    if kind != "auto":
        return kind
    if len(obs_shape) == 1:
        return "mlp"
    if len(obs_shape) == 3:
        return "minatar_cnn" if max(obs_shape[:2]) <= 16 else "nature_cnn"
    raise ValueError(f"cannot pick a trunk for obs_shape {tuple(obs_shape)}: expected 1-D "
                     f"vectors or channels-last (H, W, C) images")


def make_trunk(obs_shape: Sequence[int], kind: str = "auto", hidden_sizes: Sequence[int] = (),
               activation: str = "relu") -> tuple[nn.Module, int]:
    """Observation encoder -> ``(module, out_dim)``; ``hidden_sizes`` dense layers follow the base.

    ``obs_shape`` follows the env convention: 1-D vectors, or channels-last
    images ``(H, W, C)`` (uint8 pixels, MinAtar bool/uint8); CNN trunks permute
    to channels-first themselves. ``"auto"``: mlp for 1-D, minatar_cnn when
    both H and W <= 16 (NatureCNN's 8x8 stride-4 conv would collapse them),
    nature_cnn otherwise.
    """
    obs_shape = tuple(int(s) for s in obs_shape)
    kind = resolve_trunk_kind(obs_shape, kind)
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation {activation!r} not in {tuple(ACTIVATIONS)}")
    if kind == "mlp":
        if len(obs_shape) != 1:
            raise ValueError(f"trunk 'mlp' needs 1-D observations, got obs_shape {obs_shape} "
                             f"(images (H, W, C) need 'nature_cnn' or 'minatar_cnn')")
        base, d = [_Float()], obs_shape[0]
    else:
        if len(obs_shape) != 3:
            raise ValueError(f"trunk {kind!r} needs channels-last (H, W, C) image observations, "
                             f"got obs_shape {obs_shape} (1-D vectors need 'mlp')")
        h, w, c = obs_shape
        cnn = NatureCNN(c, (h, w)) if kind == "nature_cnn" else MinAtarCNN(c, (h, w))
        base, d = [ChannelsLastToFirst(), cnn], cnn.out_dim
    dense, d = _dense(d, hidden_sizes, activation)
    return nn.Sequential(*base, *dense), d


# --------------------------------------------------------------------------- helpers
def dueling_aggregate(value: torch.Tensor, advantages: torch.Tensor) -> torch.Tensor:
    """Dueling aggregation ``Q = V + A - mean_a A`` (Wang et al. 2016, eq. 9).

    Subtracting the mean makes V and A identifiable and is more stable than the
    max form. The action axis is dim 1: ``advantages`` is ``[B, A]`` or, for C51,
    ``[B, A, atoms]`` (aggregated per atom on logits, as in Rainbow); ``value``
    is ``[B, 1(, atoms)]`` or ``[B(, atoms)]``.
    """
    if value.dim() == advantages.dim() - 1:
        value = value.unsqueeze(1)
    return value + advantages - advantages.mean(dim=1, keepdim=True)


def categorical_projection(next_probs: torch.Tensor, rewards: torch.Tensor, discounts: torch.Tensor,
                           support: torch.Tensor) -> torch.Tensor:
    """Project ``Tz = r + discount * z`` (clipped to ``[v_min, v_max]``) onto the fixed support (C51, Alg. 1).

    ``next_probs [B, K]`` is the target distribution at the next state's chosen
    action, ``rewards [B]`` the (n-step) return, ``discounts [B]`` =
    ``gamma^n * (1 - terminated)`` (0 at termination, which puts all mass at r).
    Each atom's mass goes to its two neighbours ``l = floor(b)`` and ``l + 1``
    in proportion to proximity, ``b = (Tz - v_min) / dz``. Taking
    ``l = min(floor(b), K-2)`` and weights ``(1 - (b-l), b-l)`` handles the
    ``b`` integer case (Alg. 1 literally gives ``l == u`` with both weights 0,
    losing the mass) and the upper edge (``b = K-1``: all to the last atom)
    without masks. Fully vectorised with ``scatter_add_``; ``support`` must be evenly spaced.
    """
    K = support.numel()
    if K < 2:
        raise ValueError("categorical_projection needs at least 2 atoms")
    v_min, v_max = support[0], support[-1]
    dz = (v_max - v_min) / (K - 1)
    tz = (rewards.to(next_probs.dtype).unsqueeze(-1)
          + discounts.to(next_probs.dtype).unsqueeze(-1) * support.to(next_probs.dtype))
    b = ((tz.clamp(v_min, v_max) - v_min) / dz).clamp(0, K - 1)
    low = b.floor().clamp(max=K - 2)
    frac = b - low
    low = low.long()
    target = torch.zeros_like(next_probs)
    target.scatter_add_(-1, low, next_probs * (1.0 - frac))
    target.scatter_add_(-1, low + 1, next_probs * frac)
    return target


# --------------------------------------------------------------------------- Q-network
class _Stream(nn.Module):
    """One head stream: [hidden layer + activation] -> output layer, each Linear or NoisyLinear."""

    def __init__(self, in_dim: int, hidden: Optional[int], out_dim: int, activation: str,
                 noisy: bool, sigma0: float):
        super().__init__()
        def lin(i, o, gain):
            if noisy:
                return NoisyLinear(i, o, sigma0)
            layer = nn.Linear(i, o)
            nn.init.orthogonal_(layer.weight, gain)
            nn.init.zeros_(layer.bias)
            return layer
        self.hidden = lin(in_dim, hidden, math.sqrt(2)) if hidden else None
        self.act = ACTIVATIONS[activation]() if hidden else None
        self.out = lin(hidden or in_dim, out_dim, 1.0)

    def forward(self, x: torch.Tensor, noise: Optional[bool]) -> torch.Tensor:
        kw = {} if not isinstance(self.out, NoisyLinear) else {"noise": noise}
        if self.hidden is not None:
            x = self.act(self.hidden(x, **kw))
        return self.out(x, **kw)


class QNetwork(nn.Module):
    """trunk -> head(s) -> Q-values, covering DQN, Dueling, NoisyNet and C51 (and their Rainbow mix).

    ``hidden_sizes[:-1]`` are plain dense layers appended to the trunk (shared
    by both dueling streams); ``hidden_sizes[-1]`` is the head's hidden layer,
    duplicated per dueling stream (Wang et al. give each stream its own FC
    layer) and noisy when ``noisy`` (Rainbow makes every head FC layer noisy).
    Defaults: (256, 256) for mlp, (512,) for nature_cnn (Mnih 2015), (128,)
    for minatar_cnn (the MinAtar paper's head).

    - ``forward(obs)``/``q_values(obs)`` -> ``[B, A]`` (C51: expectation over ``support``,
      which is what greedy acting uses).
    - ``logits(obs)`` -> ``[B, A, atoms]``, ``log_probs(obs)`` = log-softmax over atoms (C51 only).
    - ``noise``: None = use noise iff training; pass False for a mu-only forward.
    """

    def __init__(self, obs_shape: Sequence[int], num_actions: int, trunk: str = "auto",
                 hidden_sizes: Optional[Sequence[int]] = None, activation: str = "relu",
                 dueling: bool = False, num_atoms: int = 1, noisy: bool = False, sigma0: float = 0.5,
                 v_min: float = -10.0, v_max: float = 10.0):
        super().__init__()
        if num_atoms < 1:
            raise ValueError(f"num_atoms must be >= 1, got {num_atoms}")
        if num_atoms > 1 and not v_min < v_max:
            raise ValueError(f"C51 needs v_min < v_max, got {v_min}, {v_max}")
        obs_shape = tuple(int(s) for s in obs_shape)
        if hidden_sizes is None:
            hidden_sizes = DEFAULT_HIDDEN[resolve_trunk_kind(obs_shape, trunk)]
        hidden_sizes = tuple(hidden_sizes)
        self.num_actions, self.num_atoms, self.dueling, self.noisy = num_actions, num_atoms, dueling, noisy
        self.trunk, d = make_trunk(obs_shape, trunk, hidden_sizes[:-1], activation)
        head_hidden = hidden_sizes[-1] if hidden_sizes else None
        self.advantage = _Stream(d, head_hidden, num_actions * num_atoms, activation, noisy, sigma0)
        self.value = _Stream(d, head_hidden, num_atoms, activation, noisy, sigma0) if dueling else None
        support = torch.linspace(v_min, v_max, num_atoms) if num_atoms > 1 else torch.zeros(1)
        self.register_buffer("support", support)
        # resampled every act step and update: walking self.modules() each time costs more than the draws
        self._noisy_layers = tuple(m for m in self.modules() if isinstance(m, NoisyLinear))

    def _head(self, obs: torch.Tensor, noise: Optional[bool]) -> torch.Tensor:
        """Raw head output ``[B, A, atoms]`` (dueling-aggregated; logits for C51)."""
        feat = self.trunk(obs)
        out = self.advantage(feat, noise).view(-1, self.num_actions, self.num_atoms)
        if self.value is not None:
            out = dueling_aggregate(self.value(feat, noise).view(-1, 1, self.num_atoms), out)
        return out

    def forward(self, obs: torch.Tensor, noise: Optional[bool] = None) -> torch.Tensor:
        out = self._head(obs, noise)
        if self.num_atoms == 1:
            return out.squeeze(-1)
        return (out.softmax(-1) * self.support).sum(-1)

    q_values = forward

    def logits(self, obs: torch.Tensor, noise: Optional[bool] = None) -> torch.Tensor:
        if self.num_atoms == 1:
            raise ValueError("logits() is for distributional (num_atoms > 1) networks; use forward()")
        return self._head(obs, noise)

    def log_probs(self, obs: torch.Tensor, noise: Optional[bool] = None) -> torch.Tensor:
        return self.logits(obs, noise).log_softmax(-1)

    def q_from_logits(self, logits: torch.Tensor) -> torch.Tensor:
        """Expected Q ``[.., A]`` from C51 logits ``[.., A, atoms]`` (reuse one forward for loss and Q)."""
        return (logits.softmax(-1) * self.support).sum(-1)

    def reset_noise(self, rows: Optional[int] = None) -> None:
        """Resample every NoisyLinear's noise: shared by the batch, or per row of
        a ``rows``-row batch (no-op without noisy layers)."""
        for m in self._noisy_layers:
            m.reset_noise(rows)
