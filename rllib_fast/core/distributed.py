"""Synchronous data-parallel learning (Stooke & Abbeel §4.2).

L learners hold identical parameters; each computes gradients on its own
envs' data, the gradients are averaged with one all-reduce over a flat buffer
(NCCL on GPUs, gloo on CPU), and every learner applies the same update. What
else must agree across learners for the parameters to stay identical is
reduced too: running observation/return statistics, advantage statistics and
the KL that drives an adaptive learning rate.
"""
from __future__ import annotations

import socket
from typing import Iterable, List, Optional

import torch
import torch.distributed as dist


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return s.getsockname()[1]


class DistributedContext:
    """This learner's view of the process group."""

    def __init__(self, rank: int, world_size: int, init_method: str, device: torch.device,
                 timeout_s: float = 300.0):
        import datetime

        self.rank, self.world_size, self.device = rank, world_size, device
        backend = "nccl" if device.type == "cuda" else "gloo"
        if not dist.is_initialized():
            dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=world_size,
                                    timeout=datetime.timedelta(seconds=timeout_s))
        self._flat: Optional[torch.Tensor] = None

    def sum_(self, t: torch.Tensor) -> torch.Tensor:
        """In-place sum over learners (a no-op for one learner)."""
        if self.world_size > 1:
            dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return t

    def mean_(self, t: torch.Tensor) -> torch.Tensor:
        return self.sum_(t).div_(self.world_size)

    def broadcast_(self, tensors: Iterable[torch.Tensor], src: int = 0) -> None:
        for t in tensors:
            dist.broadcast(t.data, src=src)

    def average_gradients(self, params: List[torch.Tensor]) -> None:
        """Average ``.grad`` of ``params`` over learners with ONE all-reduce
        (gradients are packed into a preallocated flat buffer)."""
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        numel = sum(g.numel() for g in grads)
        if self._flat is None or self._flat.numel() != numel:
            self._flat = torch.empty(numel, dtype=grads[0].dtype, device=grads[0].device)
        offset = 0
        for g in grads:
            self._flat[offset:offset + g.numel()].copy_(g.reshape(-1))
            offset += g.numel()
        self.mean_(self._flat)
        offset = 0
        for p, g in zip(params, grads):
            n = g.numel()
            if p.grad is None:
                p.grad = g
            p.grad.copy_(self._flat[offset:offset + n].view_as(g))
            offset += n

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()
