"""The Ray actors that host a learner: what they share, written once.

Three kinds of actor run learning work in their own process: a data-parallel
learner ``r >= 1`` (:mod:`rllib_fast.core.multi_learner`), an asynchronous
APPO/A3C learner (:mod:`rllib_fast.algorithms.appo.learner`) and PQL's V- and
P-learners on the Ray backend (:mod:`rllib_fast.algorithms.pql.ray_backend`).
Each one

* is handed the algorithm class and the trial's config *state* (a config object
  does not survive pickling across Ray's process boundary unchanged: a frozen
  copy is rebuilt from its state) and runs with one intra-op torch thread (a
  learner actor owns one core; torch's default of one thread per core
  oversubscribes the machine as soon as two actors share it);
* checkpoints through ``get_state()`` / ``set_state(state)`` of what it hosts;
* releases what it holds (envs, process groups, threads) on ``close()``, which
  :func:`close_actors` calls best-effort before killing the actor, so a wedged
  actor never hangs a shutdown.

:class:`LearnerActor` is that shared part; the subclasses are decorated with
``ray.remote`` where they are defined.
"""
from __future__ import annotations

from typing import Any, Dict

import ray
import torch

__all__ = ["LearnerActor", "close_actors"]


class LearnerActor:
    """Base of the learner-hosting actors (see the module docstring).

    Subclasses set ``self.hosted`` to the object whose state is checkpointed
    (an algorithm, or PQL's learner) and may override :meth:`release`.
    """

    def __init__(self, algo_cls: type, config_state: Dict[str, Any]):
        torch.set_num_threads(1)
        self.algo_cls = algo_cls
        self.config = algo_cls.get_default_config().from_state(config_state)
        self.hosted: Any = None

    def get_state(self) -> Dict[str, Any]:
        return self.hosted.get_state()

    def set_state(self, state: Dict[str, Any]) -> bool:
        self.hosted.set_state(state)
        return True

    def release(self) -> None:
        """Free envs, process groups and threads (default: ``hosted.stop()``)."""
        stop = getattr(self.hosted, "stop", None)
        if callable(stop):
            stop()

    def close(self) -> bool:
        self.release()
        return True


def close_actors(actors: list, timeout_s: float = 30.0) -> None:
    """Ask actors to ``close()`` (release envs, process groups, threads), then
    kill them: best effort, so shutdown never hangs on a wedged actor."""
    try:
        ray.get([a.close.remote() for a in actors], timeout=timeout_s)
    except Exception:  # noqa: BLE001 - best effort at shutdown
        pass
    for a in actors:
        ray.kill(a)
