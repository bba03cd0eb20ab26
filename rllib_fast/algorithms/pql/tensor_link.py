"""Point-to-point tensor transfer between a few processes of one job.

Used where tensors must move between a trial process and its Ray actors
without a round trip through host memory: NCCL moves CUDA tensors device to
device (over NVLink/PCIe where the GPUs allow it), gloo moves CPU tensors
(which is also how the path is exercised on a CPU-only machine).

The group is private (its own ``TCPStore`` and process-group object) rather
than ``torch.distributed``'s default group, because a trial process may
already own the default group (data-parallel learners) and several
algorithms may live in one process (tests, Tune's actor reuse).

Sends are asynchronous: ``send`` starts them and returns the layout the
receiver needs (shapes and dtypes, small enough to ride in a Ray call);
the tensors are kept alive until ``settle(dst)``, which the caller invokes
once the receiver has confirmed receipt (its reply came back): gloo marks a
send complete only when it is waited on, so completion cannot be polled.
``recv`` allocates on this end's device and blocks until the data is there.
"""
from __future__ import annotations

import datetime
import math
from typing import Dict, List, Sequence, Tuple

import torch
import torch.distributed as dist

Layout = List[Tuple[Tuple[int, ...], torch.dtype]]


class TensorLink:
    """This process's end (``rank`` of ``world_size``) of a point-to-point group."""

    def __init__(self, rank: int, world_size: int, address: str, device: torch.device, timeout_s: float = 300.0):
        host, port = address.rsplit(":", 1)
        timeout = datetime.timedelta(seconds=timeout_s)
        self.rank, self.device = rank, torch.device(device)
        self.store = dist.TCPStore(host, int(port), world_size, rank == 0, timeout=timeout)
        if self.device.type == "cuda":
            self.backend = "nccl"
            self.group = dist.ProcessGroupNCCL(self.store, rank, world_size)
        else:
            self.backend = "gloo"
            self.group = dist.ProcessGroupGloo(self.store, rank, world_size, timeout)
        self._in_flight: list = []
        self.bytes_sent = 0
        self.bytes_received = 0

    @staticmethod
    def _wire_dtype(dtype: torch.dtype) -> torch.dtype:
        # bool tensors travel as bytes (not every backend sends bool)
        return torch.uint8 if dtype == torch.bool else dtype

    def send(self, tensors: Sequence[torch.Tensor], dst: int) -> Layout:
        """Start sending ``tensors`` (moved to this end's device) to ``dst``; returns their layout.

        Tensors of one dtype travel packed in one flat message (one per dtype,
        in order of first appearance): per-message latency, not bandwidth,
        dominates the small batches of an RL exchange."""
        layout: Layout = [(tuple(t.shape), t.dtype) for t in tensors]
        groups: Dict[torch.dtype, List[torch.Tensor]] = {}
        for t in tensors:
            wd = self._wire_dtype(t.dtype)
            groups.setdefault(wd, []).append(t.detach().to(self.device).reshape(-1).view(wd))
        for flat in (torch.cat(parts) for parts in groups.values()):
            self._in_flight.append((dst, self.group.send([flat], dst, 0), flat))
            self.bytes_sent += flat.numel() * flat.element_size()
        return layout

    def recv(self, layout: Layout, src: int) -> List[torch.Tensor]:
        """Receive tensors of ``layout`` from ``src`` (blocking), on this end's device."""
        sizes: Dict[torch.dtype, int] = {}
        for shape, dtype in layout:
            wd = self._wire_dtype(dtype)
            sizes[wd] = sizes.get(wd, 0) + math.prod(shape)
        flats = {}
        for wd, n in sizes.items():
            flats[wd] = torch.empty(n, dtype=wd, device=self.device)
            self.group.recv([flats[wd]], src, 0).wait()
            self.bytes_received += n * flats[wd].element_size()
        offsets = dict.fromkeys(sizes, 0)
        out = []
        for shape, dtype in layout:
            wd, n = self._wire_dtype(dtype), math.prod(shape)
            t = flats[wd][offsets[wd]:offsets[wd] + n].view(shape)
            offsets[wd] += n
            out.append(t.view(torch.bool) if dtype == torch.bool else t)
        return out

    def settle(self, dst: int) -> None:
        """Complete the sends to ``dst`` (call once ``dst`` has received them) and free their tensors."""
        keep = []
        for d, work, t in self._in_flight:
            if d == dst:
                work.wait()
            else:
                keep.append((d, work, t))
        self._in_flight = keep

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def close(self) -> None:
        self._in_flight = []
        self.group = None
        self.store = None
