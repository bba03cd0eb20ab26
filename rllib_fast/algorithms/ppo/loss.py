"""PPO's loss terms as plain tensor functions (unit-tested on hand-computed
numbers in ``tests/algorithms/test_losses.py``).

Every mean is :func:`..onpolicy.reductions.masked_mean`: over the transitions the
weights ``w`` mark valid, divided by ``denom`` (with data-parallel learners
the global valid count / L, so the learners' averaged gradient is the masked
mean over all their data). ``w`` and ``denom`` None: a plain mean.

Every function also serves a population's batch (PopPPO): with ``dim=-1`` the
inputs carry a leading member axis (``[K, B]``), each mean is one per member
(``[K]``), and the coefficients may be per-member tensors (``clip`` ``[K, 1]``,
loss weights ``[K]``), so each member's loss sees only its own settings and a
population of one computes what FastPPO computes.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import torch

from ..onpolicy.reductions import masked_mean


class PPOLossTerms(NamedTuple):
    """One minibatch's PPO loss and its detached statistics."""

    loss: torch.Tensor
    stats: torch.Tensor   # [policy loss, value loss, entropy, KL, clip fraction] (each [K] with a member axis)


#: how the surrogate bounds the ratio (FastPPO's ``surrogate_clip``)
SURROGATE_CLIPS = ("hard", "smooth")


def smooth_clamp(x: torch.Tensor, low, high) -> torch.Tensor:
    """A sigmoid from ``low`` to ``high`` that passes through the midpoint with
    slope 1: ``low + (high - low) * sigmoid(4 (x - low) / (high - low) - 2)``
    (rl_games' ``use_smooth_clamp``). Around ratio 1 it is the identity to first
    order; unlike a hard clamp it never cuts a sample's gradient to zero, it
    only shrinks it as the ratio leaves the trust region."""
    width = high - low
    return low + width * torch.sigmoid(4.0 * (x - low) / width - 2.0)


def clipped_surrogate(ratio: torch.Tensor, adv: torch.Tensor, clip, w=None, denom=None, dim=None,
                      smooth: bool = False) -> torch.Tensor:
    """Schulman et al.'s clipped surrogate as a loss: ``-mean(min(r A, clip(r, 1-e, 1+e) A))``;
    ``smooth``: the clip is :func:`smooth_clamp` (rl_games' smoothed actor loss)."""
    bounded = smooth_clamp(ratio, 1 - clip, 1 + clip) if smooth else ratio.clamp(1 - clip, 1 + clip)
    surr = torch.min(ratio * adv, bounded * adv)
    return -masked_mean(surr, w, denom, dim)


def clipped_value_loss(v: torch.Tensor, targets: torch.Tensor, old_v: torch.Tensor, clip: Optional[float],
                       w=None, denom=None, dim=None) -> torch.Tensor:
    """``0.5 * mean(max((v - R)^2, (v_clip - R)^2))`` with ``v_clip`` the value
    moved at most ``clip`` from the value that acted (``clip`` None: the
    plain squared error)."""
    vf = (v - targets) ** 2
    if clip is not None:
        v_clip = old_v + (v - old_v).clamp(-clip, clip)
        vf = torch.max(vf, (v_clip - targets) ** 2)
    return 0.5 * masked_mean(vf, w, denom, dim)


#: where rl_games' bound loss starts to push a Gaussian's mean back (the action bounds are +-1)
SOFT_BOUND = 1.1


def bounds_loss(mean: torch.Tensor, w=None, denom=None, dim=None) -> torch.Tensor:
    """rl_games' bound loss (``bound_loss_type: regularisation``): the squared
    distance by which each action mean leaves ``[-1.1, 1.1]``, summed over action
    dimensions, averaged over the minibatch. Why: sampled actions are clipped to
    [-1, 1] before the env, so a mean far outside gets no gradient from the
    surrogate once every sample is clipped, and can drift; this keeps it near."""
    excess = (mean.abs() - SOFT_BOUND).clamp_min(0.0)
    return masked_mean(excess.square().sum(-1), w, denom, dim)


def approx_kl(ratio: torch.Tensor, log_ratio: torch.Tensor, w=None, denom=None, dim=None) -> torch.Tensor:
    """KL(old || new) estimated as ``mean((r - 1) - log r)`` (Schulman's k3:
    unbiased, never negative): what the adaptive-KL lr reads."""
    return masked_mean((ratio - 1) - log_ratio, w, denom, dim)


def clip_fraction(ratio: torch.Tensor, clip, w=None, denom=None, dim=None) -> torch.Tensor:
    """Share of transitions whose ratio left ``[1 - clip, 1 + clip]``."""
    return masked_mean(((ratio - 1).abs() > clip).float(), w, denom, dim)


def ppo_loss(logp: torch.Tensor, entropy: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor,
             v: torch.Tensor, targets: torch.Tensor, old_v: torch.Tensor, *, clip_param,
             vf_clip_param: Optional[float], vf_loss_coeff, entropy_coeff,
             w=None, denom=None, kl_old_logp: Optional[torch.Tensor] = None, dim: Optional[int] = None,
             smooth_clip: bool = False) -> PPOLossTerms:
    """The PPO objective on one minibatch from the policy's log-probabilities
    and entropies and the critic's values (advantages already standardised
    where asked): ``pg + vf_coeff * vf - ent_coeff * entropy``. The KL statistic
    is measured from ``old_logp`` (the behaviour) or, when given, from
    ``kl_old_logp`` (the policy at the update's start: ``kl_reference``).
    ``dim=-1``: a population's ``[K, B]`` minibatch, one loss per member
    (``loss`` ``[K]``, ``stats`` ``[5, K]``; ``clip_param`` ``[K, 1]``, the loss
    weights ``[K]``). ``smooth_clip``: the ratio is bounded by :func:`smooth_clamp`."""
    log_ratio = logp - old_logp
    ratio = log_ratio.exp()
    pg_loss = clipped_surrogate(ratio, adv, clip_param, w, denom, dim, smooth=smooth_clip)
    vf_loss = clipped_value_loss(v, targets, old_v, vf_clip_param, w, denom, dim)
    ent = masked_mean(entropy, w, denom, dim)
    loss = pg_loss + vf_loss_coeff * vf_loss - entropy_coeff * ent
    ratio_d, log_ratio_d = ratio.detach(), log_ratio.detach()
    if kl_old_logp is None:
        kl = approx_kl(ratio_d, log_ratio_d, w, denom, dim)
    else:
        kl_log_ratio = logp.detach() - kl_old_logp
        kl = approx_kl(kl_log_ratio.exp(), kl_log_ratio, w, denom, dim)
    clipfrac = clip_fraction(ratio_d, clip_param, w, denom, dim)
    return PPOLossTerms(loss, torch.stack([pg_loss.detach(), vf_loss.detach(), ent.detach(), kl, clipfrac]))


def analytic_kl(old_p: torch.Tensor, old_log_std: Optional[torch.Tensor], p: torch.Tensor,
                log_std: Optional[torch.Tensor]) -> torch.Tensor:
    """Exact KL(old || new) per sample: of diagonal Gaussians from means and log
    stds (summed over action dimensions; rsl_rl's adaptive-lr KL), or of
    categoricals from logits (``log_std`` None)."""
    if log_std is None:
        old_logp, logp = torch.log_softmax(old_p, -1), torch.log_softmax(p, -1)
        return (old_logp.exp() * (old_logp - logp)).sum(-1)
    log_std = log_std.expand_as(p)
    return (log_std - old_log_std + (torch.exp(2.0 * old_log_std) + (old_p - p) ** 2)
            / (2.0 * torch.exp(2.0 * log_std)) - 0.5).sum(-1)


def kl_adapted_lr(lr, kl, target, low: float, high: float, grow_at_zero: bool = True):
    """The adaptive-KL rule (rl_games/rsl_rl): lr / 1.5 (not below ``low``) when
    the KL overshoots twice the target, lr * 1.5 (not above ``high``) when it is
    under half (and, with ``grow_at_zero`` False, above 0: rsl_rl's per-minibatch
    rule, whose first minibatch has KL exactly 0). Floats on the host; tensors on
    the device (no host sync: the form a per-minibatch adaptation with a tensor
    lr uses), 0-d or with a leading member axis (PopPPO: ``lr``, ``kl`` and
    ``target`` ``[K]``, each member adapted to its own KL and target)."""
    if torch.is_tensor(kl):
        lr = torch.as_tensor(lr, dtype=kl.dtype, device=kl.device)
        grow = kl < 0.5 * target
        if not grow_at_zero:
            grow = grow & (kl > 0)
        return torch.where(kl > 2.0 * target, (lr / 1.5).clamp_min(low),
                           torch.where(grow, (lr * 1.5).clamp_max(high), lr))
    if kl > 2.0 * target:
        return max(low, lr / 1.5)
    if kl < 0.5 * target and (grow_at_zero or kl > 0):
        return min(high, lr * 1.5)
    return lr
