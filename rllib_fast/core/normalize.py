"""Running mean/std on the device, as a module so it checkpoints with the policy.

Statistics live in buffers (saved in ``state_dict``) so a policy loaded from a
checkpoint normalises exactly as it did in training. Updates merge a whole
batch at once (Chan et al.'s parallel variance), with no host sync.
"""
from __future__ import annotations

from typing import Sequence

import torch
from torch import nn


class RunningMeanStd(nn.Module):
    def __init__(self, shape: Sequence[int] = (), epsilon: float = 1e-4, clip: float = 10.0):
        super().__init__()
        self.clip = clip
        self.register_buffer("mean", torch.zeros(tuple(shape), dtype=torch.float64))
        self.register_buffer("var", torch.ones(tuple(shape), dtype=torch.float64))
        # starts at epsilon so the first update is well-defined without a branch
        self.register_buffer("count", torch.tensor(epsilon, dtype=torch.float64))

    @torch.no_grad()
    def update(self, x: torch.Tensor, mask: torch.Tensor | None = None, reduce=None) -> None:
        """Merge batch ``x`` (leading dims are batch dims) into the statistics.

        ``mask`` (bool, batch-shaped) excludes rows, e.g. invalid transitions.
        ``reduce`` (in-place sum over data-parallel learners) makes every
        learner merge the same global batch moments, so their statistics stay
        identical."""
        x = x.reshape(-1, *self.mean.shape).to(torch.float64)
        if mask is None:
            w = torch.ones(x.shape[0], dtype=torch.float64, device=x.device)
        else:
            w = mask.reshape(-1).to(torch.float64)
        wv = w.view(-1, *([1] * self.mean.dim()))
        # shifted moments (around the current mean) keep float64 sums well conditioned
        d = x - self.mean
        sums = torch.cat([w.sum().reshape(1), (d * wv).sum(0).reshape(-1), (d * d * wv).sum(0).reshape(-1)])
        if reduce is not None:
            reduce(sums)
        k = self.mean.numel()
        n = sums[0].clamp_min(1e-8)
        mean_d = (sums[1:1 + k] / n).view_as(self.mean)
        batch_var = (sums[1 + k:] / n).view_as(self.mean) - mean_d ** 2
        delta = mean_d  # batch mean minus current mean
        total = self.count + n
        self.mean.add_(delta * n / total)
        m2 = self.var * self.count + batch_var * n + delta ** 2 * self.count * n / total
        self.var.copy_(m2 / total)
        self.count.copy_(total)

    @torch.no_grad()
    def pool(self, reduce) -> None:
        """Replace these statistics by the pooled statistics of every data-parallel
        learner (``reduce``: in-place sum over learners): each learner's history so
        far counts, as if one learner had seen all of it. For data the learners
        merged before they joined (start-state decorrelation at build)."""
        k = self.mean.numel()
        c = self.count
        sums = torch.cat([c.reshape(1), (c * self.mean).reshape(-1), (c * (self.var + self.mean ** 2)).reshape(-1)])
        reduce(sums)
        total = sums[0]
        mean = sums[1:1 + k] / total
        self.var.copy_((sums[1 + k:] / total - mean ** 2).clamp_min(0.0).view_as(self.var))
        self.mean.copy_(mean.view_as(self.mean))
        self.count.copy_(total)

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        std = torch.sqrt(self.var + 1e-8).to(x.dtype)
        return ((x - self.mean.to(x.dtype)) / std).clamp(-self.clip, self.clip)

    def denormalize(self, x: torch.Tensor) -> torch.Tensor:
        std = torch.sqrt(self.var + 1e-8).to(x.dtype)
        return x * std + self.mean.to(x.dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.normalize(x)
