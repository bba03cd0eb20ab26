"""The console commands' entry point (``rllib``, ``rllib-fast``): Ray's start-up
switches set before anything imports ray.

Why a top-level module: a local Ray started by our commands must bind loopback
only and start with an explicit authentication mode (see
:mod:`rllib_fast.tune.session`), and Ray reads both switches once, when ``ray``
is first imported. ``import rllib_fast`` imports ray (it registers our names
with Tune), so any module inside the package is too late: an entry point there
has to re-execute the interpreter with the switches set, paying the interpreter
start and every import twice (seconds on the clock of each ``rllib train``).
This module imports nothing but the standard library, sets the switches in its
own environment (Ray's processes inherit it) and then hands over to
:func:`rllib_fast.cli.main`, which finds nothing missing and runs in place.
``python -m rllib_fast.cli`` still works, through the re-execution.

The switch logic lives here (one owner) and :mod:`rllib_fast.tune.session`
re-exports it.
"""
from __future__ import annotations

import os
import sys
from typing import Dict, Optional, Sequence

#: Ray's environment switch that makes a local node use 127.0.0.1 as its IP (read at ``import ray``).
LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
#: Ray's authentication mode (read at ``import ray``) and the value our local Rays start with:
#: Ray's own default for a new local cluster, set explicitly so Ray does not warn about it.
AUTH_ENV, AUTH_MODE = "RAY_AUTH_MODE", "token"
#: Command-line flags that name a Ray cluster (then Ray keeps its network defaults).
ADDRESS_FLAGS = ("--address", "--ray-address")
#: Subcommands that may start a local Ray (``evaluate`` does for RLlib's built-in algorithms).
RAY_COMMANDS = ("train", "sweep", "demo", "evaluate")


def names_cluster(address: Optional[str]) -> bool:
    """True when ``address`` (a flag's value or ``RAY_ADDRESS``) is a cluster to join,
    not ``local``/empty (a new local Ray)."""
    return bool(address) and str(address).strip().lower() != "local"


def wants_cluster(argv: Sequence[str] = ()) -> bool:
    """True when ``argv`` (``--address``/``--ray-address``) or ``RAY_ADDRESS`` names a Ray cluster to join."""
    if names_cluster(os.environ.get("RAY_ADDRESS")):
        return True
    for i, a in enumerate(argv):
        if a in ADDRESS_FLAGS:
            return names_cluster(argv[i + 1] if i + 1 < len(argv) else None)
        if a.startswith(tuple(f + "=" for f in ADDRESS_FLAGS)):
            return names_cluster(a.split("=", 1)[1])
    return False


def loopback_effective() -> bool:
    """Whether a local Ray started now would bind 127.0.0.1 only."""
    if "ray" not in sys.modules:
        return os.environ.get(LOOPBACK_ENV, "").lower() in ("0", "false")
    from ray._private import ray_constants

    return not ray_constants.ENABLE_RAY_CLUSTER


def start_env_missing() -> Dict[str, str]:
    """The start-up switches a local Ray started from this process would lack
    (loopback, authentication mode), with the values we want: empty when the
    environment (or, for loopback, the imported ray) has them, or the user set
    them to anything else (theirs wins)."""
    missing: Dict[str, str] = {}
    if not loopback_effective() and LOOPBACK_ENV not in os.environ:
        missing[LOOPBACK_ENV] = "0"
    if AUTH_ENV not in os.environ:
        missing[AUTH_ENV] = AUTH_MODE
    return missing


def set_start_env(argv: Sequence[str]) -> Dict[str, str]:
    """Put the missing switches into this process's environment when ``argv`` is a
    command that may start a local Ray and names no cluster; returns what was set."""
    if not argv or argv[0] not in RAY_COMMANDS or wants_cluster(argv):
        return {}
    missing = start_env_missing()
    os.environ.update(missing)
    return missing


def main() -> None:  # pragma: no cover - the console script; tests run it as a subprocess
    set_start_env(sys.argv[1:])
    from rllib_fast.cli import main as cli_main

    sys.exit(cli_main())
