"""Running mean/std on the device, as a module so it checkpoints with the policy.

Statistics live in buffers (saved in ``state_dict``) so a policy loaded from a
checkpoint normalises exactly as it did in training. Updates merge a whole
batch at once (Chan et al.'s parallel variance), with no host sync.
"""
from __future__ import annotations

from typing import Optional, Sequence

import torch
from torch import nn


class RunningMeanStd(nn.Module):
    """Running mean and variance of a stream of ``shape``-valued samples.

    ``members=K``: K independent normalisers in one module (a population's
    members, each with its own statistics): ``mean``/``var`` ``[K, *shape]``,
    ``count`` ``[K]``, and every input carries the member axis first
    (``[K, batch..., *shape]``). The arithmetic is the same element for element,
    so member k's statistics are those a plain normaliser fed member k's
    samples would hold, bit for bit."""

    def __init__(self, shape: Sequence[int] = (), epsilon: float = 1e-4, clip: float = 10.0,
                 members: Optional[int] = None):
        super().__init__()
        self.clip = clip
        self.shape = tuple(shape)
        lead = () if members is None else (int(members),)
        self.register_buffer("mean", torch.zeros(lead + self.shape, dtype=torch.float64))
        self.register_buffer("var", torch.ones(lead + self.shape, dtype=torch.float64))
        # starts at epsilon so the first update is well-defined without a branch
        self.register_buffer("count", torch.full(lead, epsilon, dtype=torch.float64))

    @property
    def stacked(self) -> bool:
        """Whether the statistics carry a leading member axis."""
        return self.count.dim() == 1

    def _per_stat(self, v: torch.Tensor) -> torch.Tensor:
        """A count-shaped tensor (``[]`` or ``[K]``) broadcastable over ``mean``."""
        return v.view(tuple(v.shape) + (1,) * len(self.shape))

    def _per_sample(self, t: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """A statistic (``mean``/``std``) broadcastable over the inputs ``x``."""
        t = t.to(x.dtype)
        return t.unsqueeze(1) if self.stacked else t

    @torch.no_grad()
    def update(self, x: torch.Tensor, mask: torch.Tensor | None = None, reduce=None) -> None:
        """Merge batch ``x`` (leading dims are batch dims, after the member axis
        when stacked) into the statistics.

        ``mask`` (bool, batch-shaped) excludes rows, e.g. invalid transitions.
        ``reduce`` (in-place sum over data-parallel learners) makes every
        learner merge the same global batch moments, so their statistics stay
        identical."""
        lead = tuple(self.count.shape)
        x = x.reshape(*lead, -1, *self.shape).to(torch.float64)
        batch = x.shape[:len(lead) + 1]
        if mask is None:
            w = torch.ones(batch, dtype=torch.float64, device=x.device)
        else:
            w = mask.reshape(batch).to(torch.float64)
        wv = w.view(*batch, *([1] * len(self.shape)))
        # shifted moments (around the current mean) keep float64 sums well conditioned
        d = x - self._per_sample(self.mean, x)
        axis = len(lead)
        sums = torch.cat([w.sum(axis).reshape(-1), (d * wv).sum(axis).reshape(-1),
                          (d * d * wv).sum(axis).reshape(-1)])
        if reduce is not None:
            reduce(sums)
        c, k = self.count.numel(), self.mean.numel()
        n = sums[:c].view_as(self.count).clamp_min(1e-8)
        nb = self._per_stat(n)
        mean_d = sums[c:c + k].view_as(self.mean) / nb
        batch_var = sums[c + k:].view_as(self.mean) / nb - mean_d ** 2
        delta = mean_d  # batch mean minus current mean
        total = self.count + n
        tb, cb = self._per_stat(total), self._per_stat(self.count)
        self.mean.add_(delta * nb / tb)
        m2 = self.var * cb + batch_var * nb + delta ** 2 * cb * nb / tb
        self.var.copy_(m2 / tb)
        self.count.copy_(total)

    @torch.no_grad()
    def pool(self, reduce) -> None:
        """Replace these statistics by the pooled statistics of every data-parallel
        learner (``reduce``: in-place sum over learners): each learner's history so
        far counts, as if one learner had seen all of it. For data the learners
        merged before they joined (start-state decorrelation at build)."""
        c, k = self.count.numel(), self.mean.numel()
        cb = self._per_stat(self.count)
        sums = torch.cat([self.count.reshape(-1), (cb * self.mean).reshape(-1),
                          (cb * (self.var + self.mean ** 2)).reshape(-1)])
        reduce(sums)
        total = sums[:c].view_as(self.count)
        mean = sums[c:c + k].view_as(self.mean) / self._per_stat(total)
        self.var.copy_((sums[c + k:].view_as(self.var) / self._per_stat(total) - mean ** 2).clamp_min(0.0))
        self.mean.copy_(mean)
        self.count.copy_(total)

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        std = self._per_sample(torch.sqrt(self.var + 1e-8), x)
        return ((x - self._per_sample(self.mean, x)) / std).clamp(-self.clip, self.clip)

    def denormalize(self, x: torch.Tensor) -> torch.Tensor:
        std = self._per_sample(torch.sqrt(self.var + 1e-8), x)
        return x * std + self._per_sample(self.mean, x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.normalize(x)
