"""The interface between PQL's training loop and a concurrency back-end.

:class:`~rllib_fast.algorithms.pql.algorithm.PQL` runs the Actor in its own
thread and knows nothing of where the V-learner and the P-learner live: the
back-end builds them, carries data and weights between the roles, gates the
Actor, reports what each role waited and did, and exposes the learners'
state for checkpoints. Two implementations: :class:`ThreadBackend` (threads
of the trial process, shared tensors) and :class:`RayBackend` (Ray actors in
their own resource bundles). ``backend_class(name)`` maps the config's
``backend`` to one of them (imported on demand: the Ray one imports Ray's
actor machinery).
"""
from __future__ import annotations

from typing import Any, Dict, List

import torch

ROLES = ("critic", "policy")


class PQLBackend:
    """What PQL needs from a back-end. ``algo`` is the PQL algorithm: its
    ``config``, ``dims``, ``live``, ``actor``, ``controller``, ``capacity``
    and ``env`` are set before the back-end is built."""

    algo: Any = None
    #: bytes of the two learners' replays (logged as ``replay_bytes``)
    replay_bytes: int = 0

    @staticmethod
    def resource_bundles(cfg) -> List[Dict[str, float]]:
        """Resource bundles the learners need besides the driver's (Tune placement)."""
        return []

    def local_learners(self):
        """(V-learner, P-learner) when they live in this process, else (None, None)."""
        return None, None

    # -- one iteration (driver thread) -------------------------------------------------
    def resume(self) -> None:
        """Let the learners run (start of ``training_step``)."""
        raise NotImplementedError

    def pause(self) -> None:
        """Park the learners, deliver what is in flight and bring the Actor's policy
        up to date (end of ``training_step``): checkpoints see a quiescent state."""
        raise NotImplementedError

    def gate_actor(self) -> None:
        """Block the Actor while it is ahead of the speed ratio (bounded by max_wait_s)."""
        raise NotImplementedError

    def sync_actor(self) -> None:
        """Adopt the P-learner's newest policy into the Actor, if there is one."""
        raise NotImplementedError

    def push(self, batch: Dict[str, torch.Tensor], stats) -> None:
        """Hand one step's finished n-step transitions (and the observation statistics) to both learners."""
        raise NotImplementedError

    def wait_caught_up(self) -> None:
        """Bounded wait until the learners did the work the Actor's steps owe."""
        raise NotImplementedError

    # -- measurements ----------------------------------------------------------------
    def take_metrics(self, role: str) -> torch.Tensor:
        """(loss sum, second metric sum) of ``role`` since the last call."""
        raise NotImplementedError

    def waited_s(self) -> Dict[str, float]:
        """Cumulative seconds each role (that this back-end can see) spent waiting at its gate."""
        return self.algo.controller.stats()["waited_s"]

    def overrides(self) -> Dict[str, int]:
        """Cumulative waits each role cut short at max_wait_s."""
        return self.algo.controller.stats()["overrides"]

    # -- state -------------------------------------------------------------------------
    def state_components(self) -> Dict[str, Any]:
        """The learners' checkpointed parts for ``stateful_components()`` (keys 'v', 'p', ...)."""
        raise NotImplementedError

    def after_restore(self) -> None:
        """Make the roles' copies of each other's networks agree with the restored state."""
        raise NotImplementedError

    def clear_replays(self) -> None:
        raise NotImplementedError

    def set_live(self, live) -> None:
        """New live hyperparameters (lr, tau, grad clip); in-process learners share ``live`` already."""

    def close(self) -> None:
        raise NotImplementedError


def backend_class(name: str) -> type:
    if name == "thread":
        from .thread_backend import ThreadBackend

        return ThreadBackend
    if name == "ray":
        from .ray_backend import RayBackend

        return RayBackend
    raise ValueError(f"PQL: unknown `backend` = {name!r}; allowed: 'thread', 'ray'")
