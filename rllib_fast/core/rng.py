"""An algorithm's own random stream, swapped in while the algorithm runs.

Why not the process's global RNG: a run's trajectory would depend on whatever
else in the process draws random numbers (a second algorithm in a notebook, a
Tune actor reused for another trial, a restore into a live process, user code
between iterations). Why not explicit ``torch.Generator`` objects threaded
through every draw: ``torch.compile`` breaks the graph on Generator arguments,
CUDA graphs capture the default generator's philox offsets (not a private
generator's), and simulators (mjlab, Isaac Gym, Isaac Lab) draw from the
default generator themselves, beyond our reach.

So an algorithm owns an :class:`RngStream`: the states of torch's default
generators (CPU, and every CUDA device once CUDA is initialised), numpy's
global ``RandomState`` and Python's ``random``. Every call into the algorithm
(build, ``step``/``train``, ``evaluate``, ``compute_actions``, a remote
learner's step) runs inside ``with stream:``, which puts the stream's states in
place and, on the way out, stores what the algorithm left there and puts the
caller's states back. Everything the algorithm and its simulator draw then
comes from the algorithm's stream, in the same order whatever else runs in the
process; the caller's generators come back untouched. The stream's state is
checkpointed, so a restore (in a fresh or a live process) continues it exactly.

The swap costs two copies of a few kilobytes per call (once per training
iteration), nothing on the hot path. Scopes nest (an inner ``with`` of the same
stream is a no-op). Not covered: threads that draw from the default generator
*concurrently* with each other (their interleaving is timing-dependent; HTS's
executors and PQL's learners document it), and other threads of the process
that draw while an algorithm is inside its scope.
"""
from __future__ import annotations

import random
import threading
from typing import Any, Dict, Optional

import numpy as np
import torch


def _capture() -> Dict[str, Any]:
    """The process's current global RNG states."""
    return {
        "torch": torch.get_rng_state(),
        # only once CUDA is in use: asking for its states would initialise CUDA on a
        # CPU-only run (seconds, and a context's memory on every device)
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None,
        "numpy": np.random.get_state(),
        "python": random.getstate(),
    }


def _install(state: Dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    if state.get("cuda") is not None and torch.cuda.is_initialized():
        torch.cuda.set_rng_state_all(state["cuda"])
    if state.get("numpy") is not None:
        np.random.set_state(state["numpy"])
    if state.get("python") is not None:
        random.setstate(state["python"])


class RngStream:
    """A private random stream for one algorithm (see the module docstring).

    ``seed_fn(seed)`` seeds the global generators at creation, inside the scope
    (the algorithm passes RLlib's ``update_global_seed_if_necessary``, so a run
    draws exactly what it drew when it seeded the process's generators)."""

    def __init__(self, seed: int, seed_fn=None) -> None:
        self._depth = 0
        self._owner: Optional[int] = None
        self._outside: Optional[Dict[str, Any]] = None
        self._cuda_seed = int(seed)
        outside = _capture()
        try:
            if seed_fn is not None:
                seed_fn(int(seed))
            else:
                torch.manual_seed(int(seed))
                np.random.seed(int(seed) % 2 ** 32)
                random.seed(int(seed))
            self._state = _capture()
        finally:
            _install(outside)

    @property
    def active(self) -> bool:
        """Whether the stream is in place (some thread is inside the scope)."""
        return self._depth > 0

    def __enter__(self) -> "RngStream":
        me = threading.get_ident()
        if self._depth > 0 and self._owner == me:
            self._depth += 1
            return self
        if self._depth > 0:   # another thread of the same algorithm is inside: its stream is in place
            self._depth += 1
            return self
        self._outside = _capture()
        self._install_own()
        self._owner, self._depth = me, 1
        return self

    def __exit__(self, *exc) -> None:
        self._depth -= 1
        if self._depth > 0:
            return
        self._state = _capture()
        _install(self._outside)
        self._outside, self._owner = None, None

    def _install_own(self) -> None:
        state = self._state
        if state.get("cuda") is None and torch.cuda.is_initialized():
            # CUDA came into use after the stream was made: its generators start from the
            # seed, as a process seeded with torch.manual_seed(seed) would draw
            outside_cuda = torch.cuda.get_rng_state_all()
            torch.cuda.manual_seed_all(self._cuda_seed)
            state = {**state, "cuda": torch.cuda.get_rng_state_all()}
            torch.cuda.set_rng_state_all(outside_cuda)
        _install(state)

    # -- checkpointing --------------------------------------------------------------
    def state_dict(self) -> Dict[str, Any]:
        """The stream's state: the live generators' when in place, else the stored one."""
        state = _capture() if self.active else self._state
        return {k: (v.clone() if isinstance(v, torch.Tensor) else
                    [t.clone() for t in v] if isinstance(v, list) else v) for k, v in state.items()}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Continue from ``state`` (a :meth:`state_dict`; older checkpoints hold only
        ``torch``/``cuda``, and the numpy/Python parts then stay as they are)."""
        merged = {**(_capture() if self.active else self._state),
                  **{k: v for k, v in state.items() if v is not None}}
        if self.active:
            _install(merged)
        else:
            self._state = merged
