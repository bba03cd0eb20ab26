"""Central parameter store and multi-step Adam for asynchronous learners
(Stooke & Abbeel §4.3 and Appendix A).

The store keeps parameters *and* Adam's moments in host memory, split into a
few disjoint chunks with one lock each, so learners that write back different
chunks do not wait on each other. Learners **overwrite** central values under
the chunk lock (never add increments computed against stale values).

Multi-step Adam lets a learner take ``n`` local Adam steps between syncs while
keeping the central optimizer state consistent. Per local step (standard Adam;
the paper's "am/sqrt(v eps)" is garbled; we place eps exactly as
``torch.optim.Adam`` does, so a single learner matches PyTorch's Adam)::

    t += 1;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
    s = lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps);  theta -= s
    acc_g = b1 acc_g + g;   acc_g2 = b2 acc_g2 + g^2;  acc_s += s

and at a sync after ``n`` local steps, under each chunk's lock::

    theta~ -= acc_s;  m~ = b1^n m~ + (1 - b1) acc_g;  v~ = b2^n v~ + (1 - b2) acc_g2

then the learner pulls ``theta~, m~, v~``. The step count ``t`` is central:
a learner starts its local steps from the central count and adds ``n`` at sync,
so one learner reproduces serial Adam (tested to float64 round-off).
"""
from __future__ import annotations

import threading
from typing import Iterable, List, Sequence

import torch


def _chunk_bounds(total: int, num_chunks: int) -> List[tuple]:
    num_chunks = max(1, min(num_chunks, total))
    edges = [round(i * total / num_chunks) for i in range(num_chunks + 1)]
    return list(zip(edges[:-1], edges[1:]))


class ChunkedParameterStore:
    """Flat parameter vector + Adam moments in host memory, in locked chunks."""

    def __init__(self, params: Iterable[torch.Tensor], num_chunks: int = 4, dtype: torch.dtype = torch.float32):
        flat = torch.cat([p.detach().reshape(-1).to("cpu", dtype) for p in params])
        self.theta = flat.clone()
        self.m = torch.zeros_like(flat)
        self.v = torch.zeros_like(flat)
        self.step = 0
        self.chunks = _chunk_bounds(flat.numel(), num_chunks)
        self.locks = [threading.Lock() for _ in self.chunks]
        self._step_lock = threading.Lock()

    def pull(self) -> tuple:
        """Consistent-per-chunk copies of (theta, m, v) and the step count."""
        theta, m, v = torch.empty_like(self.theta), torch.empty_like(self.m), torch.empty_like(self.v)
        for (lo, hi), lock in zip(self.chunks, self.locks):
            with lock:
                theta[lo:hi].copy_(self.theta[lo:hi])
                m[lo:hi].copy_(self.m[lo:hi])
                v[lo:hi].copy_(self.v[lo:hi])
        with self._step_lock:
            return theta, m, v, self.step

    def apply(self, fn) -> None:
        """Run ``fn(lo, hi)`` for each chunk while holding its lock (the
        read-modify-write of a sync)."""
        for (lo, hi), lock in zip(self.chunks, self.locks):
            with lock:
                fn(lo, hi)

    def add_steps(self, n: int) -> None:
        with self._step_lock:
            self.step += n

    def sync(self, acc_s: torch.Tensor, acc_g: torch.Tensor, acc_g2: torch.Tensor, n: int,
             betas: Sequence[float]) -> tuple:
        """Fold one learner's ``n`` local steps in (App. A), chunk by chunk
        under the chunk's lock, then return a fresh :meth:`pull`.

        The write is an overwrite of ``theta~ - acc_s`` computed *inside* the
        lock from the current central value, so a concurrent learner's write
        to the same chunk is never lost (tested with concurrent writers).
        """
        b1, b2 = betas
        b1n, b2n = b1 ** n, b2 ** n
        acc_s, acc_g, acc_g2 = (a.to("cpu", self.theta.dtype) for a in (acc_s, acc_g, acc_g2))

        def write(lo: int, hi: int) -> None:
            self.theta[lo:hi].sub_(acc_s[lo:hi])
            self.m[lo:hi].mul_(b1n).add_(acc_g[lo:hi], alpha=1 - b1)
            self.v[lo:hi].mul_(b2n).add_(acc_g2[lo:hi], alpha=1 - b2)

        self.apply(write)
        self.add_steps(n)
        return self.pull()

    def pull_theta(self) -> torch.Tensor:
        """Central parameters only (the mid-sampling pull of APPO)."""
        theta = torch.empty_like(self.theta)
        for (lo, hi), lock in zip(self.chunks, self.locks):
            with lock:
                theta[lo:hi].copy_(self.theta[lo:hi])
        return theta

    def state_dict(self) -> dict:
        theta, m, v, step = self.pull()
        return {"theta": theta, "m": m, "v": v, "step": step}

    def load_state_dict(self, state: dict) -> None:
        def load(lo: int, hi: int) -> None:
            self.theta[lo:hi].copy_(state["theta"][lo:hi])
            self.m[lo:hi].copy_(state["m"][lo:hi])
            self.v[lo:hi].copy_(state["v"][lo:hi])

        self.apply(load)
        with self._step_lock:
            self.step = int(state["step"])


class MultiStepAdam:
    """One learner's local Adam with the accumulators of App. A.

    ``store`` is anything with ``pull()`` and ``sync(acc_s, acc_g, acc_g2, n,
    betas)`` returning ``(theta, m, v, step)``: a :class:`ChunkedParameterStore`
    in this process (threads) or a client of the parameter-server actor
    (:mod:`rllib_fast.algorithms.appo.param_server`). Local state lives on ``device`` (the
    learner's GPU in the paper: pull to the GPU, step there, write back).
    """

    def __init__(self, store, lr: float = 1e-3, betas: Sequence[float] = (0.9, 0.999),
                 eps: float = 1e-8, device: torch.device | str = "cpu"):
        self.store, self.lr, self.eps = store, lr, eps
        self.b1, self.b2 = betas
        self.device = torch.device(device)
        self._take(store.pull())

    def _take(self, pulled: tuple) -> None:
        theta, m, v, t = pulled
        self.theta, self.m, self.v = (x.to(self.device) for x in (theta, m, v))
        self.t = int(t)
        self.acc_g = torch.zeros_like(self.theta)
        self.acc_g2 = torch.zeros_like(self.theta)
        self.acc_s = torch.zeros_like(self.theta)
        self.n_local = 0

    def pull(self) -> None:
        """Take central parameters, moments and step count; reset accumulators.
        Only meaningful with no pending local steps (they would be dropped)."""
        self._take(self.store.pull())

    def local_step(self, grad: torch.Tensor) -> torch.Tensor:
        """One Adam step on the local copy; returns the new local parameters."""
        g = grad.reshape(-1).to(self.theta.dtype)
        self.t += 1
        self.n_local += 1
        self.m.mul_(self.b1).add_(g, alpha=1 - self.b1)
        self.v.mul_(self.b2).addcmul_(g, g, value=1 - self.b2)
        denom = self.v.sqrt() / (1 - self.b2 ** self.t) ** 0.5 + self.eps
        s = (self.lr / (1 - self.b1 ** self.t)) * self.m / denom
        self.theta.sub_(s)
        self.acc_g.mul_(self.b1).add_(g)
        self.acc_g2.mul_(self.b2).addcmul_(g, g)
        self.acc_s.add_(s)
        return self.theta

    def sync(self) -> None:
        """Fold the local steps into the central store (overwrite under the
        chunk locks), then continue from the central result."""
        if self.n_local == 0:
            self.pull()
            return
        self._take(self.store.sync(self.acc_s, self.acc_g, self.acc_g2, self.n_local, (self.b1, self.b2)))
