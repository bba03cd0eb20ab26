"""The central parameter store of asynchronous learners as a Ray actor.

Stooke & Abbeel §4.3 keep parameters and optimizer moments in host memory,
split into chunks with one lock each. Here that host is a threaded Ray actor
(``max_concurrency`` > 1), so several learners' ``sync`` calls really run at
the same time and the chunk locks of :class:`ChunkedParameterStore` are what
keeps every update (tested with concurrent writers). Learners reach it through
:class:`RemoteStoreClient`, which has the same ``pull``/``sync`` interface as a
local store, so :class:`~rllib_fast.algorithms.appo.async_adam.MultiStepAdam` does not
care whether it runs in a thread next to the store or on another node.
"""
from __future__ import annotations

from typing import Iterable, Sequence

import ray
import torch

from .async_adam import ChunkedParameterStore


@ray.remote(num_cpus=0)
class ParameterServer:
    """Host-memory parameter/moment store shared by all asynchronous learners."""

    def __init__(self, params: Iterable[torch.Tensor], num_chunks: int = 4):
        torch.set_num_threads(1)
        self.store = ChunkedParameterStore(params, num_chunks=num_chunks)
        self.num_syncs = 0

    def pull(self) -> tuple:
        return self.store.pull()

    def pull_theta(self) -> tuple:
        """Parameters and the central step count (the count tells a learner
        how many updates of others it is about to absorb)."""
        return self.store.pull_theta(), self.store.step

    def sync(self, acc_s, acc_g, acc_g2, n: int, betas: Sequence[float]) -> tuple:
        self.num_syncs += 1
        return self.store.sync(acc_s, acc_g, acc_g2, n, betas)

    def get_state(self) -> dict:
        return {**self.store.state_dict(), "num_syncs": self.num_syncs}

    def set_state(self, state: dict) -> None:
        self.store.load_state_dict(state)
        self.num_syncs = int(state.get("num_syncs", 0))

    def counters(self) -> dict:
        return {"step": self.store.step, "num_syncs": self.num_syncs, "num_chunks": len(self.store.chunks),
                "num_parameters": int(self.store.theta.numel())}


def start_parameter_server(params: Iterable[torch.Tensor], num_chunks: int, max_concurrency: int):
    """A threaded server: one thread per learner plus the driver's calls."""
    params = [p.detach().cpu() for p in params]
    return ParameterServer.options(max_concurrency=max(2, max_concurrency)).remote(params, num_chunks)


class RemoteStoreClient:
    """``pull``/``sync`` of a :class:`ParameterServer`, blocking like a local
    store (a learner cannot continue before it has the central result)."""

    def __init__(self, handle):
        self.handle = handle

    def pull(self) -> tuple:
        return ray.get(self.handle.pull.remote())

    def pull_theta(self) -> tuple:
        return ray.get(self.handle.pull_theta.remote())

    def sync(self, acc_s, acc_g, acc_g2, n: int, betas: Sequence[float]) -> tuple:
        cpu = [a.detach().to("cpu") for a in (acc_s, acc_g, acc_g2)]
        return ray.get(self.handle.sync.remote(*cpu, n, tuple(betas)))
