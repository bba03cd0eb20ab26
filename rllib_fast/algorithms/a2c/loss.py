"""A2C's loss as a plain tensor function (unit-tested on hand-computed numbers
in ``tests/algorithms/test_losses.py``)."""
from __future__ import annotations

import torch

from ..onpolicy.reductions import masked_mean


def a2c_loss(logp: torch.Tensor, entropy: torch.Tensor, adv: torch.Tensor, v: torch.Tensor,
             targets: torch.Tensor, *, vf_loss_coeff: float, entropy_coeff: float, w=None, denom=None):
    """``-mean(logp * A) + vf_coeff * mean((v - R)^2) - ent_coeff * mean(entropy)``
    and its detached (policy loss, value loss, entropy). The value term is the
    reference's (baselines: mean squared error, no extra 1/2), so
    ``vf_loss_coeff = 0.5`` weighs it as there."""
    pg_loss = -masked_mean(logp * adv, w, denom)
    vf_loss = masked_mean((v - targets) ** 2, w, denom)
    ent = masked_mean(entropy, w, denom)
    loss = pg_loss + vf_loss_coeff * vf_loss - entropy_coeff * ent
    return loss, torch.stack([pg_loss.detach(), vf_loss.detach(), ent.detach()])
