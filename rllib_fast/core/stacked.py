"""Population-stacked layers and optimizers: K networks as one, with a leading member axis.

Flajolet et al. (ICML 2022) §4.1 / App. C: a population of K agents runs fastest
when every layer's parameters are *stacked* along a new first axis and the K
forward passes become one batched matmul (``baddbmm``) or one grouped
convolution. One kernel launch then serves all members, which is what removes
the per-member Python/launch overhead of a sequential loop.

Why each piece looks the way it does:

* **Initialisation per member slice**. Calling ``nn.init``
  on a 3-D ``[K, in, out]`` tensor computes the fan from the wrong dimensions,
  so each member slice is initialised exactly as ``nn.Linear``/``nn.Conv2d``
  initialise themselves (Kaiming-uniform with a = sqrt(5), bias U(+-1/sqrt(fan_in)))
  and stored transposed (``[in, out]``) for ``x @ W``.
* **Per-member hyperparameters are tensors**. ``torch.optim.Adam``
  has one lr per param group, so :class:`VectorAdam` keeps lr, betas, eps and
  weight decay as ``[K]`` tensors. PBT writes new values into them in place:
  nothing is re-traced or recompiled, and no optimizer is rebuilt.
* **Functional updates** (``step(params, grads)``): gradients are obtained with
  ``torch.autograd.grad`` for exactly the tensors being optimised, so an actor
  loss never leaks gradients into a critic, and a member mask (TD3's policy
  delay per member) is a ``torch.where``, not a host branch.
* **Fused K-step updates** (:class:`FusedSteps`): the paper runs 50 (TD3/SAC)
  or 10 (DQN) updates per call without copying parameters to the host; here
  that is a loop of device ops with no ``.item()``. With ``compile=True`` the
  single-step function goes through ``torch.compile`` once and the first call's
  time is reported separately as compile time.
"""
from __future__ import annotations

import math
import time
from typing import Callable, Dict, Iterable, List, Optional, Sequence

import torch
from torch import nn
from torch.nn import functional as F

from .nets import ACTIVATIONS


# ----------------------------------------------------------------------------------------------
# layers
# ----------------------------------------------------------------------------------------------
class StackedLinear(nn.Module):
    """K independent ``nn.Linear(in_features, out_features)`` in one module.

    ``weight``: ``[K, in, out]`` (transposed w.r.t. ``nn.Linear``), ``bias``:
    ``[K, 1, out]``. Input ``[K, ..., in]`` -> output ``[K, ..., out]``.
    """

    def __init__(self, num_members: int, in_features: int, out_features: int, bias: bool = True,
                 device=None, dtype=None):
        super().__init__()
        self.num_members, self.in_features, self.out_features = num_members, in_features, out_features
        kw = {"device": device, "dtype": dtype}
        self.weight = nn.Parameter(torch.empty(num_members, in_features, out_features, **kw))
        self.bias = nn.Parameter(torch.empty(num_members, 1, out_features, **kw)) if bias else None
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self, members: Optional[Sequence[int]] = None) -> None:
        """Initialise member slices like ``nn.Linear.reset_parameters`` does,
        one member at a time, in the same RNG order as K sequential nn.Linear."""
        for m in (range(self.num_members) if members is None else members):
            w = torch.empty(self.out_features, self.in_features, device=self.weight.device, dtype=self.weight.dtype)
            nn.init.kaiming_uniform_(w, a=math.sqrt(5))
            self.weight[m].copy_(w.t())
            if self.bias is not None:
                bound = 1.0 / math.sqrt(self.in_features) if self.in_features > 0 else 0.0
                self.bias[m].uniform_(-bound, bound)

    def forward(self, x: torch.Tensor, members: Optional[slice] = None) -> torch.Tensor:
        """``members``: run only this slice of the members (e.g. Q1 of a twin
        critic stacked as ``[Q1 members; Q2 members]``); ``x`` then carries that
        many members (or one, shared)."""
        weight = self.weight if members is None else self.weight[members]
        bias = self.bias if self.bias is None or members is None else self.bias[members]
        K = weight.shape[0]
        shape = x.shape
        x3 = x.reshape(shape[0], -1, shape[-1])
        if x3.shape[0] != K:   # one shared input for every member (e.g. K=1 broadcast)
            x3 = x3.expand(K, -1, -1)
        if bias is None:
            out = torch.bmm(x3, weight)
        else:
            out = torch.baddbmm(bias, x3, weight)
        return out.reshape(K, *shape[1:-1], self.out_features)

    @torch.no_grad()
    def load_member(self, m: int, linear: nn.Linear) -> None:
        self.weight[m].copy_(linear.weight.t())
        if self.bias is not None:
            self.bias[m, 0].copy_(linear.bias)

    @torch.no_grad()
    def member(self, m: int) -> nn.Linear:
        lin = nn.Linear(self.in_features, self.out_features, bias=self.bias is not None,
                        device=self.weight.device, dtype=self.weight.dtype)
        lin.weight.copy_(self.weight[m].t())
        if self.bias is not None:
            lin.bias.copy_(self.bias[m, 0])
        return lin

    def extra_repr(self) -> str:
        return f"members={self.num_members}, in={self.in_features}, out={self.out_features}"


class StackedConv2d(nn.Module):
    """K independent ``nn.Conv2d`` as one grouped convolution (groups = K).

    Input ``[K, B, C, H, W]`` -> output ``[K, B, C_out, H', W']``. Internally
    the members' channels are concatenated (``[B, K*C, H, W]``) so one conv
    kernel with ``groups=K`` computes every member (Flajolet et al. App. C).
    """

    def __init__(self, num_members: int, in_channels: int, out_channels: int, kernel_size, stride=1,
                 padding=0, bias: bool = True, device=None, dtype=None):
        super().__init__()
        k = (kernel_size, kernel_size) if isinstance(kernel_size, int) else tuple(kernel_size)
        self.num_members, self.in_channels, self.out_channels = num_members, in_channels, out_channels
        self.kernel_size, self.stride, self.padding = k, stride, padding
        kw = {"device": device, "dtype": dtype}
        self.weight = nn.Parameter(torch.empty(num_members, out_channels, in_channels, *k, **kw))
        self.bias = nn.Parameter(torch.empty(num_members, out_channels, **kw)) if bias else None
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self, members: Optional[Sequence[int]] = None) -> None:
        fan_in = self.in_channels * self.kernel_size[0] * self.kernel_size[1]
        for m in (range(self.num_members) if members is None else members):
            nn.init.kaiming_uniform_(self.weight[m], a=math.sqrt(5))  # [out, in, kh, kw]: fans as nn.Conv2d
            if self.bias is not None:
                bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
                self.bias[m].uniform_(-bound, bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        K, B = x.shape[0], x.shape[1]
        xg = x.transpose(0, 1).reshape(B, K * self.in_channels, *x.shape[3:])
        w = self.weight.reshape(K * self.out_channels, self.in_channels, *self.kernel_size)
        b = None if self.bias is None else self.bias.reshape(-1)
        out = F.conv2d(xg, w, b, stride=self.stride, padding=self.padding, groups=K)
        return out.reshape(B, K, self.out_channels, *out.shape[2:]).transpose(0, 1)

    @torch.no_grad()
    def load_member(self, m: int, conv: nn.Conv2d) -> None:
        self.weight[m].copy_(conv.weight)
        if self.bias is not None:
            self.bias[m].copy_(conv.bias)


class StackedMLP(nn.Module):
    """K MLPs ``in -> hidden... -> out`` with a leading member axis.

    ``layer_norm`` adds a per-member LayerNorm after each hidden Linear (the
    ACME TD3 networks of the paper's code use LayerNorm-MLPs).
    """

    def __init__(self, num_members: int, in_dim: int, hidden: Sequence[int], out_dim: int,
                 activation: str = "relu", layer_norm: bool = False, device=None):
        super().__init__()
        self.num_members = num_members
        dims = [in_dim, *hidden, out_dim]
        self.layers = nn.ModuleList(StackedLinear(num_members, a, b, device=device)
                                    for a, b in zip(dims[:-1], dims[1:]))
        self.norms = nn.ModuleList(StackedLayerNorm(num_members, h, device=device) for h in hidden) \
            if layer_norm else None
        self.act = ACTIVATIONS[activation]()

    def forward(self, x: torch.Tensor, members: Optional[slice] = None) -> torch.Tensor:
        """``[K, ..., in] -> [K, ..., out]``; with ``members`` only that slice of
        the members runs (see :meth:`StackedLinear.forward`)."""
        n = len(self.layers)
        for i, layer in enumerate(self.layers):
            x = layer(x, members)
            if i < n - 1:
                if self.norms is not None:
                    x = self.norms[i](x, members)
                x = self.act(x)
        return x

    @torch.no_grad()
    def load_members(self, modules: Sequence[nn.Sequential]) -> None:
        """Copy K independent ``nn.Sequential`` MLPs (Linear/activation) into the slices."""
        for m, mod in enumerate(modules):
            linears = [l for l in mod if isinstance(l, nn.Linear)]
            for layer, lin in zip(self.layers, linears):
                layer.load_member(m, lin)


class StackedLayerNorm(nn.Module):
    """Per-member LayerNorm over the last dimension (affine parameters ``[K, 1, D]``)."""

    def __init__(self, num_members: int, dim: int, eps: float = 1e-5, device=None):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(num_members, 1, dim, device=device))
        self.bias = nn.Parameter(torch.zeros(num_members, 1, dim, device=device))

    def forward(self, x: torch.Tensor, members: Optional[slice] = None) -> torch.Tensor:
        weight = self.weight if members is None else self.weight[members]
        bias = self.bias if members is None else self.bias[members]
        shape = x.shape
        x3 = F.layer_norm(x, shape[-1:], eps=self.eps).reshape(shape[0], -1, shape[-1])
        return (x3 * weight + bias).reshape(shape)


# ----------------------------------------------------------------------------------------------
# member-slice utilities (per-member hyperparameters, PBT exploit, CEM sampling)
# ----------------------------------------------------------------------------------------------
def member_broadcast(v: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """View a ``[K]`` per-member value (a hyperparameter tensor) so it broadcasts
    over a ``[K, ...]`` tensor like ``like``."""
    return v.view(-1, *([1] * (like.dim() - 1)))


def member_tensors(module: nn.Module) -> List[torch.Tensor]:
    """Every parameter and buffer of a stacked module (all carry the member axis first)."""
    return list(module.parameters()) + list(module.buffers())


@torch.no_grad()
def copy_members(module: nn.Module, src: torch.Tensor, dst: torch.Tensor) -> None:
    """``module[dst] <- module[src]`` for every stacked tensor (exploit).

    ``src``/``dst`` are index tensors of equal length; all reads happen before
    any write, so a member may be both a source and a destination."""
    for t in member_tensors(module):
        t[dst] = t[src].clone()


def flat_members(module: nn.Module) -> torch.Tensor:
    """``[K, P]`` view-copy of all parameters, one row per member (CEM-RL's genome)."""
    return torch.cat([p.detach().reshape(p.shape[0], -1) for p in module.parameters()], 1)


@torch.no_grad()
def load_flat_members(module: nn.Module, flat: torch.Tensor) -> None:
    """Inverse of :func:`flat_members`."""
    i = 0
    for p in module.parameters():
        n = p[0].numel()
        p.copy_(flat[:, i:i + n].reshape(p.shape))
        i += n


def per_member_grad_norm(grads: Iterable[torch.Tensor]) -> torch.Tensor:
    """Global gradient norm of each member, ``[K]``: the norm of the per-tensor
    norms, as ``torch.nn.utils.clip_grad_norm_`` takes one agent's."""
    norms = torch.stack([torch.linalg.vector_norm(g.reshape(g.shape[0], -1), dim=1) for g in grads])
    return torch.linalg.vector_norm(norms, dim=0)


def clip_grads_per_member(grads: Sequence[torch.Tensor], max_norm, pairs: Optional[int] = None) -> List[torch.Tensor]:
    """Clip each member's global gradient norm to ``max_norm`` (a float, or a
    ``[K]`` or 0-d tensor) with ``clip_grad_norm_``'s rule per member:
    coefficient ``max_norm / (norm + 1e-6)`` capped at 1; no host sync.

    ``pairs=P``: the stack holds ``2P`` members where ``m`` and ``P + m`` are one
    learner's two nets (twin critics); their norm is taken together."""
    norm = per_member_grad_norm(grads)
    if pairs is not None:
        norm = (norm[:pairs].square() + norm[pairs:].square()).sqrt().repeat(2)
    coef = (max_norm / (norm + 1e-6)).clamp(max=1.0)
    return [g * coef.view(-1, *([1] * (g.dim() - 1))) for g in grads]


# ----------------------------------------------------------------------------------------------
# optimizer
# ----------------------------------------------------------------------------------------------


class VectorAdam:
    """Adam / AdamW over stacked tensors with per-member hyperparameter tensors.

    ``lr``, ``beta1``, ``beta2``, ``eps``, ``weight_decay`` are ``[K]`` float
    tensors on the parameters' device (set them in place to change a member's
    value; nothing is rebuilt or recompiled). ``decoupled=True`` gives AdamW
    (decay ``p *= 1 - lr*wd``), False gives Adam's L2 (``g += wd*p``). The step
    count is per member so an exploited member whose state was reset restarts
    its bias correction. The arithmetic follows ``torch.optim.Adam`` exactly,
    member by member.

    The moments live in one flat ``[K, P]`` tensor per moment: a step is one
    ``cat`` of the gradients, ~12 element-wise kernels over ``[K, P]`` and one
    ``_foreach_copy_`` back into the parameters, whatever the number of layers
    (on a CPU the per-kernel overhead, not the arithmetic, dominates small nets).
    """

    def __init__(self, params: Sequence[torch.Tensor], num_members: int, lr=1e-3, betas=(0.9, 0.999),
                 eps=1e-8, weight_decay=0.0, decoupled: bool = False):
        self.params = list(params)
        self.K = num_members
        dev = self.params[0].device
        full = lambda v: (v.detach().clone().float().to(dev) if isinstance(v, torch.Tensor)  # noqa: E731
                          else torch.full((num_members,), float(v), device=dev))
        self.lr, self.beta1, self.beta2 = full(lr), full(betas[0]), full(betas[1])
        self.eps, self.weight_decay = full(eps), full(weight_decay)
        self.decoupled = decoupled
        self.sizes = [p[0].numel() for p in self.params]
        P = sum(self.sizes)
        self.step_count = torch.zeros(num_members, 1, device=dev)
        self.exp_avg = torch.zeros(num_members, P, device=dev)
        self.exp_avg_sq = torch.zeros(num_members, P, device=dev)

    def _flat(self, tensors: Sequence[torch.Tensor]) -> torch.Tensor:
        return torch.cat([t.reshape(self.K, -1) for t in tensors], 1)

    @torch.no_grad()
    def step(self, grads: Sequence[torch.Tensor], mask: Optional[torch.Tensor] = None,
             lr_scale: Optional[torch.Tensor] = None) -> None:
        """One update of every member (``mask[K]`` bool: only these members move;
        masked members keep parameters, moments and step count)."""
        g = self._flat(grads)
        p = self._flat(self.params)
        b1, b2 = self.beta1.unsqueeze(1), self.beta2.unsqueeze(1)
        step = self.step_count + 1
        if mask is not None:
            mk = mask.unsqueeze(1)
            step = torch.where(mk, step, self.step_count)
        bc1 = 1 - b1.pow(step)
        bc2_sqrt = (1 - b2.pow(step)).sqrt()
        lr = self.lr.unsqueeze(1)
        if lr_scale is not None:
            lr = lr * lr_scale.unsqueeze(1)
        wd = self.weight_decay.unsqueeze(1)
        if self.decoupled:
            new_p = p * (1 - lr * wd)
        else:
            new_p = p
            g = g + wd * p
        new_m = torch.lerp(self.exp_avg, g, 1 - b1)
        new_v = self.exp_avg_sq * b2 + g * g * (1 - b2)
        denom = new_v.sqrt() / bc2_sqrt + self.eps.unsqueeze(1)
        new_p = new_p - (lr / bc1) * new_m / denom
        if mask is not None:
            new_p = torch.where(mk, new_p, p)
            new_m = torch.where(mk, new_m, self.exp_avg)
            new_v = torch.where(mk, new_v, self.exp_avg_sq)
        self.step_count.copy_(step)
        self.exp_avg.copy_(new_m)
        self.exp_avg_sq.copy_(new_v)
        views = [t.reshape(q.shape) for t, q in zip(new_p.split(self.sizes, 1), self.params)]
        torch._foreach_copy_(self.params, views)

    # -- PBT support --------------------------------------------------------------------
    @torch.no_grad()
    def reset_members(self, idx: torch.Tensor) -> None:
        """Zero the moments and step count of members ``idx`` (a fresh optimizer)."""
        self.step_count[idx] = 0
        self.exp_avg[idx] = 0
        self.exp_avg_sq[idx] = 0

    @torch.no_grad()
    def copy_members(self, src: torch.Tensor, dst: torch.Tensor, hyperparameters: bool = False) -> None:
        """Copy optimizer state (and optionally its hyperparameters) ``src -> dst``."""
        for t in (self.step_count, self.exp_avg, self.exp_avg_sq) + (
                (self.lr, self.beta1, self.beta2, self.eps, self.weight_decay) if hyperparameters else ()):
            t[dst] = t[src].clone()

    # -- checkpointing ---------------------------------------------------------------------
    _STATE = ("lr", "beta1", "beta2", "eps", "weight_decay", "step_count", "exp_avg", "exp_avg_sq")

    def state_dict(self) -> Dict[str, object]:
        return {k: getattr(self, k).detach().cpu().clone() for k in self._STATE}

    #: the settings a restore keeps (the config's, as ``core.state.load_optimizer_state``
    #: keeps a torch optimizer's); lr follows the members' hyperparameters
    #: (``optimizer_hparams``), moments and step counts come from the checkpoint
    _SETTINGS = ("beta1", "beta2", "eps", "weight_decay")

    def load_state_dict(self, state: Dict[str, object]) -> None:
        for k in self._STATE:
            if k not in self._SETTINGS:
                getattr(self, k).copy_(state[k])


# ----------------------------------------------------------------------------------------------
# fused multi-step updates
# ----------------------------------------------------------------------------------------------
class FusedSteps:
    """Run ``step_fn(i)`` ``n`` times back to back on the device (no host sync).

    ``compile=True`` wraps ``step_fn`` with ``torch.compile`` (``dynamic=False``,
    so per-member hyperparameters must be tensors; Python scalars that change
    would be guards and trigger recompiles). ``compile_time_s`` is the wall time
    of the first call beyond a steady-state call, measured once; ``num_compiles``
    counts graphs dynamo compiled for this function (tests check it stays
    constant while PBT changes hyperparameters).
    """

    def __init__(self, step_fn: Callable[[], object], compile: bool = False, backend: str = "inductor",
                 mode: Optional[str] = None):
        self.compiled = compile
        self.compile_time_s = 0.0
        self._first = True
        self.fn = torch.compile(step_fn, backend=backend, mode=mode, dynamic=False) if compile else step_fn

    def __call__(self, n: int):
        out = None
        if not self._first or n <= 0:
            for _ in range(n):
                out = self.fn()
            return out
        self._first = False
        t0 = time.perf_counter()
        out = self.fn()
        first = time.perf_counter() - t0
        t1 = time.perf_counter()
        for _ in range(1, n):
            out = self.fn()
        rest = (time.perf_counter() - t1) / (n - 1) if n > 1 else 0.0
        if self.compiled:  # first call = trace + compile + one step
            self.compile_time_s = max(0.0, first - rest)
        return out


def dynamo_compile_count() -> int:
    """Number of frames dynamo has compiled so far in this process (a recompile counter)."""
    from torch._dynamo.utils import counters

    return int(counters["stats"].get("unique_graphs", 0))
