"""The cores of a trial shared between the processes an algorithm starts.

Why: a component that starts busy child processes (a simulator stepping in
its own process, PQL's learner processes, HTS executors) leaves fewer cores to
the process that started it. torch's intra-op pool does not know that: with
its default (one thread per core) the parent's matrix products and the
children's work oversubscribe the cores, and OpenMP threads that spin while
they wait for each other make every process slower. Users run the shipped
files without setting ``OMP_NUM_THREADS``, so the library sets the thread
count itself.

A component calls :func:`reserve_cores` with the number of cores its children
keep busy and calls ``release()`` on the returned handle when they stop. While
any reservation is held, this process's torch intra-op threads are
``max(1, min(threads before the first reservation, usable cores - reserved))``;
after the last release the count before the first reservation comes back.
Usable cores are the cores this process may run on (its CPU affinity). The
children set their own counts (one thread each) where they start.
"""
from __future__ import annotations

import contextlib
import os
import threading
from typing import Iterator, Optional

import torch

__all__ = ["CoreReservation", "reserve_cores", "reserved_cores", "torch_threads", "usable_cores"]

_lock = threading.Lock()
_reserved = 0
_threads_before: Optional[int] = None


def usable_cores() -> int:
    """Cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - platforms without affinity
        return max(1, os.cpu_count() or 1)


def reserved_cores() -> int:
    """Cores held by live reservations of this process."""
    return _reserved


def _apply() -> None:
    if _threads_before is None:
        return
    if _reserved == 0:
        torch.set_num_threads(_threads_before)
    else:
        torch.set_num_threads(max(1, min(_threads_before, usable_cores() - _reserved)))


class CoreReservation:
    """Cores held by one component's child processes; ``release()`` once they stop."""

    def __init__(self, cores: int) -> None:
        self.cores = int(cores)
        self._held = False

    def _take(self) -> None:
        global _reserved, _threads_before
        with _lock:
            if _reserved == 0:
                _threads_before = torch.get_num_threads()
            _reserved += self.cores
            self._held = True
            _apply()

    def release(self) -> None:
        """Give the cores back (idempotent)."""
        global _reserved, _threads_before
        with _lock:
            if not self._held:
                return
            self._held = False
            _reserved -= self.cores
            _apply()
            if _reserved == 0:
                _threads_before = None

    @property
    def held(self) -> bool:
        return self._held


def reserve_cores(cores: int) -> CoreReservation:
    """Hold ``cores`` for child processes and shrink this process's torch threads
    to what is left (at least one)."""
    if int(cores) < 0:
        raise ValueError(f"reserve_cores: cores must be >= 0, got {cores}")
    r = CoreReservation(cores)
    r._take()
    return r


@contextlib.contextmanager
def torch_threads(n: Optional[int]) -> Iterator[None]:
    """torch's intra-op threads set to ``n`` inside the block and restored after
    (None: unchanged). Why: a simulator stepping on its own worker threads in this
    process (envpool) shares the cores with torch's OpenMP pool, whose threads
    spin for a while after each matrix product; during a rollout, whose forwards
    are small, one torch thread leaves the simulator its cores (docs/sources.md)."""
    before = torch.get_num_threads()
    if n is None or int(n) == before:
        yield
        return
    torch.set_num_threads(int(n))
    try:
        yield
    finally:
        torch.set_num_threads(before)
