"""One checkpoint-state wrapper for things that are not modules or optimizers.

``FastAlgorithm.stateful_components()`` saves every value's ``state_dict()``
and restores it with ``load_state_dict()``. Networks and optimizers have both;
a loose device tensor (CEM-RL's mean and variance, TD3's update counter), a
numpy generator (population PBT draws) or a role living behind a backend
(PQL's learners) do not. :class:`StateAdapter` gives any of them the two
methods from a getter and a setter, so there is one such wrapper, not one per
algorithm family.
"""
from __future__ import annotations

from typing import Any, Callable, Dict

import numpy as np
import torch


class StateAdapter:
    """``state_dict()`` / ``load_state_dict(state)`` from two callables."""

    def __init__(self, get: Callable[[], Any], set_: Callable[[Any], None]):
        self.state_dict, self.load_state_dict = get, set_

    @classmethod
    def tensor(cls, t: torch.Tensor) -> "StateAdapter":
        """A tensor restored *in place* (``copy_``): code holding a reference to it
        (a compiled update, an optimizer) keeps seeing the live values."""
        def get() -> Dict[str, torch.Tensor]:
            return {"t": t.detach().cpu().clone()}

        def set_(state: Dict[str, torch.Tensor]) -> None:
            with torch.no_grad():
                t.copy_(state["t"])

        return cls(get, set_)

    @classmethod
    def numpy_generator(cls, g: np.random.Generator) -> "StateAdapter":
        """A numpy ``Generator``'s bit-generator state (restored exactly)."""
        def set_(state: Dict[str, Any]) -> None:
            g.bit_generator.state = state["state"]

        return cls(lambda: {"state": g.bit_generator.state}, set_)


#: param-group entries a restored optimizer takes from the checkpoint: its learning
#: rate has a rule of its own (``FastAlgorithm._apply_configured_lr``); every other
#: setting (eps, betas, RMSProp's alpha, weight decay, ...) is the config's
_FROM_CHECKPOINT = ("params", "lr", "initial_lr")


def load_optimizer_state(optimizer: torch.optim.Optimizer, state: Dict[str, Any]) -> None:
    """Load ``state`` (moments, step counts) into ``optimizer`` but keep the
    settings its param groups were built with from the config.

    Why: torch's ``load_state_dict`` also restores each group's ``eps``,
    ``betas``, ``alpha`` and ``weight_decay``, so a trial that PBT exploited (or
    any restore under a changed config) silently ran with the checkpoint's
    values while its config, and the report, showed the mutated ones."""
    settings = [{k: v for k, v in g.items() if k not in _FROM_CHECKPOINT} for g in optimizer.param_groups]
    optimizer.load_state_dict(state)
    for group, own in zip(optimizer.param_groups, settings):
        group.update(own)
