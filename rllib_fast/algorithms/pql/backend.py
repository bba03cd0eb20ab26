"""The interface between PQL's training loop and a concurrency back-end.

:class:`~rllib_fast.algorithms.pql.algorithm.PQL` runs the Actor in its own
thread and knows nothing of where the V-learner and the P-learner live: the
back-end builds them, carries data and weights between the roles, gates the
Actor, reports what each role waited and did, and exposes the learners'
state for checkpoints. Three implementations: :class:`ThreadBackend` (threads
of the trial process, shared tensors), :class:`ProcessBackend` (a process per
learner, shared CPU memory) and :class:`RayBackend` (Ray actors in their own
resource bundles). ``backend_class(name)`` maps the config's
``backend`` to one of them (imported on demand: the Ray one imports Ray's
actor machinery).
"""
from __future__ import annotations

import abc
from typing import Any, Dict, List

import torch

ROLES = ("critic", "policy")


class PQLBackend(abc.ABC):
    """What PQL needs from a back-end, built from explicit parts (it holds no
    reference to the algorithm):

    * ``config``: the PQL config (learner devices, replay layout, weight sync
      period, checkpoint_replay, ...);
    * ``dims``: the :class:`~rllib_fast.algorithms.pql.components.Dims` of
      observations, actions and states;
    * ``actor``: the Actor role (its policy receives the P-learner's weights;
      its ``moments()`` give the observation moments' shapes);
    * ``controller``: the :class:`~rllib_fast.algorithms.pql.ratio.RatioController`
      that holds the speed ratios (the back-end gates and counts through it);
    * ``live``: the live hyperparameters the learners read;
    * ``num_envs``: rows per vectorised step (one replay add);
    * ``capacity``: replay capacity in transitions;
    * ``device``: the Actor's device.
    """

    #: bytes of the two learners' replays (logged as ``replay_bytes``)
    replay_bytes: int = 0

    def __init__(self, config, dims, actor, controller, live, *, num_envs: int, capacity: int,
                 device: torch.device):
        self.config, self.dims, self.actor, self.controller, self.live = config, dims, actor, controller, live
        self.num_envs, self.capacity, self.device = num_envs, capacity, device

    @staticmethod
    def resource_bundles(cfg) -> List[Dict[str, float]]:
        """Resource bundles the learners need besides the driver's (Tune placement)."""
        return []

    def local_learners(self):
        """(V-learner, P-learner) when they live in this process, else (None, None)."""
        return None, None

    def learners_ready(self) -> bool:
        """Whether the learners can take work (the process back-end's boot in the background);
        the speed ratios are enforced only from then on."""
        return True

    # -- one iteration (driver thread) -------------------------------------------------
    @abc.abstractmethod
    def resume(self) -> None:
        """Let the learners run (start of ``training_step``)."""

    @abc.abstractmethod
    def pause(self) -> None:
        """Park the learners, deliver what is in flight and bring the Actor's policy
        up to date (end of ``training_step``): checkpoints see a quiescent state."""

    @abc.abstractmethod
    def gate_actor(self) -> None:
        """Block the Actor while it is ahead of the speed ratio (bounded by max_wait_s)."""

    @abc.abstractmethod
    def sync_actor(self) -> None:
        """Adopt the P-learner's newest policy into the Actor, if there is one."""

    @abc.abstractmethod
    def push(self, batch: Dict[str, torch.Tensor], moments) -> None:
        """Hand one step's finished n-step transitions (and the normalisers' moments) to both learners."""

    @abc.abstractmethod
    def wait_caught_up(self) -> None:
        """Bounded wait until the learners did the work the Actor's steps owe."""

    # -- measurements ----------------------------------------------------------------
    @abc.abstractmethod
    def take_metrics(self, role: str) -> torch.Tensor:
        """(loss sum, second metric sum) of ``role`` since the last call."""

    def waited_s(self) -> Dict[str, float]:
        """Cumulative seconds each role (that this back-end can see) spent waiting at its gate."""
        return self.controller.counters()["waited_s"]

    def overrides(self) -> Dict[str, int]:
        """Cumulative waits each role cut short at max_wait_s."""
        return self.controller.counters()["overrides"]

    # -- state -------------------------------------------------------------------------
    @abc.abstractmethod
    def state_components(self) -> Dict[str, Any]:
        """The learners' checkpointed parts for ``stateful_components()`` (keys 'v', 'p', ...)."""

    @abc.abstractmethod
    def after_restore(self) -> None:
        """Make the roles' copies of each other's networks agree with the restored state."""

    @abc.abstractmethod
    def clear_replays(self) -> None:
        """Drop both learners' replays (a restore without replay)."""

    def set_live(self, live) -> None:
        """New live hyperparameters (lr, tau, grad clip); in-process learners share ``live`` already."""

    @abc.abstractmethod
    def close(self) -> None:
        """Stop the learners and release what they hold."""


def backend_class(name: str) -> type:
    if name == "thread":
        from .thread_backend import ThreadBackend

        return ThreadBackend
    if name == "process":
        from .process_backend import ProcessBackend

        return ProcessBackend
    if name == "ray":
        from .ray_backend import RayBackend

        return RayBackend
    raise ValueError(f"PQL: unknown `backend` = {name!r}; allowed: 'thread', 'process', 'ray'")
