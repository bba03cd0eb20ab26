"""How a helper process of a trial starts: one rule for every key that picks it
(PQL's ``process_start_method``, FastPPO's ``simulator_start_method``).

'auto' is ``fork`` where the OS has it, else ``spawn``. Why fork by default,
although the trial process has threads (Ray's, the simulator's): the child only
runs torch CPU code with one intra-op thread (a learner, or a source the parent
already imported and built) and touches none of the parent's other state, as
torch's DataLoader workers do; it skips what a spawned child spends importing
torch, rllib_fast and the source again (seconds of a core, on the run's clock),
which on a short run is a large share of it. Spawn stays available for sources that start
threads or OpenMP pools at import, which a fork would inherit half-copied.
"""
from __future__ import annotations

import multiprocessing as mp

#: the values a start-method key takes
START_METHODS = ("auto", "fork", "spawn", "forkserver")


def resolve_start_method(name: str) -> str:
    """``name`` as a multiprocessing context name: 'auto' resolved, the rest as given."""
    if name != "auto":
        return name
    return "fork" if "fork" in mp.get_all_start_methods() else "spawn"
