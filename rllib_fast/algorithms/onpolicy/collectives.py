"""How one learner's update meets the other learners: the data-parallel
collectives an update rule calls (:class:`LearnerCollectives`) and the
parameter synchronisation between its steps (:class:`ParamSync`). With one
learner both do nothing, so an update rule is written once for one and for
L learners, synchronous or asynchronous."""
from __future__ import annotations

from typing import Callable, Optional

import torch


class LearnerCollectives:
    """What one learner's update shares with the other data-parallel learners
    (``dist``: a ``core.distributed.DistributedContext`` once the learner joined
    its group, else None). With one learner every method is the identity, so
    an update rule is written once for one and for L learners."""

    def __init__(self) -> None:
        self.dist = None

    @property
    def sum_(self) -> Optional[Callable[[torch.Tensor], torch.Tensor]]:
        """In-place sum over learners, or None for one learner (the ``reduce``
        argument of ``reductions.standardize`` and of the normalisers' updates)."""
        return None if self.dist is None else self.dist.sum_

    def mean_(self, t: torch.Tensor) -> torch.Tensor:
        """In place: the mean over learners (every learner adapts from the same number)."""
        return t if self.dist is None else self.dist.mean_(t)

    def average_gradients(self, params) -> None:
        if self.dist is not None:
            self.dist.average_gradients(params)

    def mean_denominator(self, w: torch.Tensor | None, n: int, device) -> torch.Tensor | None:
        """Denominator for ``reductions.masked_mean`` over a batch of ``n`` transitions
        with weights ``w`` (None: all valid). With L data-parallel learners it
        is the global valid count / L, so the average of the learners' losses
        (and gradients) is the masked mean over all learners' data even when
        their valid counts differ; every learner calls it (one all-reduce),
        whether or not it saw invalid transitions."""
        if self.dist is None:
            return None if w is None else w.sum().clamp_min(1.0)
        count = w.sum() if w is not None else torch.full((), float(n), device=device)
        return self.dist.sum_(count.detach().clone()).clamp_min(1.0) / self.dist.world_size


class ParamSync:
    """How a learner's parameters meet other learners' between its own steps.
    One learner alone (and data-parallel learners, whose gradients are
    averaged inside the step): nothing to do. Asynchronous learners use the
    central store's sync (``appo.learner.CentralStoreSync``)."""

    def after_update(self) -> None:
        """After every optimizer step."""

    def after_sampling_step(self, t: int) -> None:
        """Between two batched env steps of a rollout (``t``: the step just taken)."""

    def after_learn(self) -> None:
        """After the learning phase of an iteration."""


#: the sync of a learner whose parameters meet no other learner's between its steps
LOCAL_PARAMETERS = ParamSync()
