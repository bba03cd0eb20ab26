"""What an on-policy update learns from: a rollout's targets and the batch
built from the rollout storage (``core.rollout.RolloutStorage``) and them."""
from __future__ import annotations

from typing import Any, NamedTuple, Optional

import torch


class Targets(NamedTuple):
    """A rollout's learning targets, flat over ``T * N`` transitions, value
    quantities in the critic's (normalised) units."""

    advantages: torch.Tensor
    value_targets: torch.Tensor
    old_values: torch.Tensor
    weights: Optional[torch.Tensor]  # 1 for valid transitions, 0 else; None when all are valid


class OnPolicyBatch(NamedTuple):
    """Everything an update rule learns from: a rollout's transitions and
    targets, flat over ``T * N`` (what ``UpdateRule.learn`` receives)."""

    obs: torch.Tensor            # normalised observations, as the policy saw them
    actions: torch.Tensor
    logp: torch.Tensor           # log-probabilities under the parameters that acted
    critic_in: torch.Tensor      # the critic's input: the observations, or the source's states (asymmetric)
    advantages: torch.Tensor
    value_targets: torch.Tensor
    old_values: torch.Tensor
    weights: Optional[torch.Tensor]  # 1 for valid transitions, 0 else; None when all are valid
    #: log-probabilities of the actions under the policy at the update's start, when the adaptive
    #: lr's KL is measured from it (FastPPO's ``kl_reference``); None: from ``logp``
    kl_logp: Optional[torch.Tensor] = None
    #: FastPPO's symmetry extension: the rollout's mirrored transitions
    #: (``extensions.symmetry.MirroredBatch``); None without it
    mirrored: Optional[Any] = None
    #: a recurrent actor-critic's sequence layout (``recurrent_module.Sequences``): where each env's
    #: episodes start and the memory states the rollout began from; None for feed-forward modules
    sequences: Optional[Any] = None
