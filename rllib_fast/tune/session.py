"""Starting Ray for the command line, sweeps and the demo: one ``init_ray`` for all three.

Why a module of its own: the CLI, ``rllib-fast sweep`` and the demo all start a
*local* Ray of their own unless given a cluster address, and all must leave it
reachable from this machine only.

Loopback: Ray 2.60's servers (GCS, raylet, core workers, object manager) bind
127.0.0.1 only when the node IP is exactly ``127.0.0.1``; otherwise they
listen on every interface. ``ray.init(_node_ip_address="127.0.0.1")`` does
not get there (``resolve_ip_for_localhost`` turns it into the machine's
address). What does is Ray's own switch ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``
(``ray_constants.ENABLE_RAY_CLUSTER``), which makes ``get_node_ip_address()``
answer 127.0.0.1 -- it is read once, when ``ray`` is first imported. It
must therefore be in the environment before ray is imported, and only when no
cluster address is given (``--address``/``--ray-address``/``RAY_ADDRESS``): a driver that joins a
cluster must be reachable by it.

Token authentication: a new local Ray 2.60 turns on token authentication
when ``RAY_AUTH_MODE`` is unset, and says so in a 245-character warning
("Token authentication is enabled for this Ray cluster. Set RAY_AUTH_MODE=disabled
to opt out ...") -- the longest line the demo printed. Setting ``RAY_AUTH_MODE=token``
ourselves asks for exactly what Ray would do (``enable_token_auth_by_default``
sets the same variable; the token lives in ``~/.ray/auth_token``), and Ray prints
nothing when the mode is set explicitly. Like the loopback switch it is read at
``import ray`` (Ray caches its config then), and a user's own value wins.

``import rllib_fast`` imports ray (it registers our names with Tune), so the
console scripts (``rllib``, ``rllib-fast``) start in :mod:`rllib_fast_boot`, a
top-level module that sets the switches before the package is imported.
``python -m rllib_fast.cli``/``rllib_fast.demo`` cannot: by the time they run,
both switches were read, so they re-execute themselves once with the switches
set (:func:`reexec_for_loopback`: one more interpreter start, no change to Ray's
code). A process that imported ray earlier and is not a
console command (a notebook, a test calling ``cli.main([...])``) keeps
Ray's defaults; :func:`loopback_effective` tells which case applies.
"""
from __future__ import annotations

import contextlib
import logging
import os
import sys
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence

from ..core.metrics import RETURN_KEY, STEP_KEY

logger = logging.getLogger(__name__)

# The switch logic has one owner, the console entry point (it must run before ray is imported).
from rllib_fast_boot import (ADDRESS_FLAGS, AUTH_ENV, AUTH_MODE, LOOPBACK_ENV,  # noqa: F401,E402  (public here too)
                             loopback_effective, names_cluster, start_env_missing, wants_cluster)


def reexec_for_loopback(module: str, argv: Sequence[str], extra_env: Optional[Mapping[str, str]] = None) -> None:
    """Replace this process by ``python -m module argv`` with the start-up switches
    set (:func:`start_env_missing`): loopback-only servers and an explicit
    authentication mode, both read when ``ray`` is imported.

    Returns (does nothing) when a cluster is named (its own settings apply) or
    when no switch is missing (the user's values, or a re-executed process)."""
    missing = {} if wants_cluster(argv) else start_env_missing()
    if not missing:
        return
    env = dict(os.environ, **dict(extra_env or {}), **missing)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, "-m", module, *argv], env)


def cpu_error(cls: Any, config: Mapping[str, Any], available: float) -> Optional[str]:
    """One-line message when a trial of ``cls`` under ``config`` asks for more CPUs
    than a local Ray has (``available``), else None.

    Why: Tune keeps such a trial pending forever, warning once a minute (FastAPPO's
    defaults ask for 9 CPUs: the driver and 8 learner actors). The request is the
    algorithm's own ``default_resource_request``; ``grid_search`` takes its first
    value, search-space objects are left out."""
    from ray.tune.search.sample import Domain

    def first(v):
        if isinstance(v, Mapping) and set(v) == {"grid_search"}:
            return v["grid_search"][0] if v["grid_search"] else None
        return v

    plain = {k: first(v) for k, v in config.items() if not isinstance(v, Domain)}
    plain = {k: v for k, v in plain.items() if not isinstance(v, Domain) and v is not None}
    try:
        request = cls.default_resource_request(plain)
        bundles = list(getattr(request, "bundles", None) or [])
    except Exception:  # noqa: BLE001 - the trial reports a config it cannot take itself
        return None
    need = sum(float(b.get("CPU", 0)) for b in bundles)
    if need <= available + 1e-9:
        return None
    parts = " + ".join(f"{float(b.get('CPU', 0)):g}" for b in bundles)
    return (f"a {getattr(cls, '__name__', cls)} trial asks for {need:g} CPUs ({parts}: the driver and its "
            f"actors) but the local Ray has {available:g} (Tune would keep it pending forever); fewer or smaller "
            "actors (num_env_runners, num_learners, num_async_learners, num_cpus_per_*), --ray-num-cpus, or a "
            "cluster (--address)")


def device_error(config: Mapping[str, Any], local: bool = True) -> Optional[str]:
    """One line when ``config`` asks for a device this machine cannot give, else None.

    Why here, before Ray starts: Tune queues a trial that asks for a GPU until
    one appears, so ``env_device: cuda`` on a CPU-only machine waits forever
    instead of failing. Checked: ``env_device`` and every other ``*_device`` key
    (e.g. PQL's learner devices; the reason is the one ``build_algo()`` gives, see
    core/devices.py) and every ``num_gpus*`` request. Only for a local Ray
    (``local``): on a cluster the trials may run on GPU nodes the driver's machine
    lacks. ``grid_search`` values are checked one by one; search-space objects are
    skipped.
    """
    if not local:
        return None
    import torch

    from ..core.devices import unavailable_reason, why_no_cuda

    def values(v):
        if isinstance(v, Mapping) and set(v) == {"grid_search"}:
            return list(v["grid_search"])
        return [v]

    keys = ["env_device"] + sorted(k for k in config if isinstance(k, str) and k.endswith("_device")
                                   and k != "env_device")
    for key in keys:
        for dev in values(config.get(key)):
            reason = unavailable_reason(dev) if isinstance(dev, str) else None
            if reason:   # env_device='cuda' makes the trial ask Tune for a GPU
                then = "Tune would wait forever for a GPU" if key == "env_device" else "the trial would fail at build"
                return f"{key}={dev!r} but {reason} ({then})"
    if torch.cuda.is_available():
        return None
    for key in sorted(k for k in config if isinstance(k, str) and k.startswith("num_gpus")):
        for gpus in values(config.get(key)):
            if isinstance(gpus, (int, float)) and not isinstance(gpus, bool) and gpus > 0:
                return f"{key}={gpus} but {why_no_cuda()} (Tune would wait forever for a GPU); allowed here: 0"
    return None


def ensure_registered() -> None:
    """Register our names in the current Ray session (Tune's registry lives
    in the cluster, per job; ``register()`` checks it and re-registers)."""
    import rllib_fast

    rllib_fast.register()


def dashboard_missing() -> Optional[str]:
    """Why the Ray dashboard cannot start here (``ray[default]`` not installed), or None."""
    try:
        from ray._private.utils import get_dashboard_dependency_error

        err = get_dashboard_dependency_error()
    except ImportError:  # pragma: no cover - other Ray layouts
        try:
            import aiohttp  # noqa: F401
            err = None
        except ImportError as e:
            err = e
    return None if err is None else f"{err}"


def init_ray(address: Optional[str] = None, *, num_cpus: Optional[int] = None, num_gpus: Optional[int] = None,
             dashboard: bool = False, dashboard_host: str = "127.0.0.1", log_to_driver: bool = False) -> bool:
    """``ray.init`` for a run (True if this call started/connected Ray; False if Ray was up).

    Without ``address`` (and without ``RAY_ADDRESS``) this starts a new local Ray
    of our own -- plain ``ray.init()`` would silently join any cluster a
    ``ray start`` left on this machine -- bound to loopback where
    :func:`reexec_for_loopback` could arrange it. The dashboard is off unless asked
    for, and then binds to ``dashboard_host`` (loopback by default): it
    executes jobs for whoever can reach it.
    """
    if dashboard:
        missing = dashboard_missing()
        if missing:
            raise RuntimeError("--dashboard needs the Ray dashboard packages: pip install 'ray[default]' "
                               f"(missing: {missing})")
    import ray

    started = False
    if not ray.is_initialized():
        kwargs: Dict[str, Any] = {"include_dashboard": dashboard, "log_to_driver": log_to_driver}
        if dashboard:
            kwargs["dashboard_host"] = dashboard_host
        if address:
            kwargs["address"] = address
        else:
            if not os.environ.get("RAY_ADDRESS"):
                kwargs["address"] = "local"
                if not loopback_effective():
                    logger.info("ray was imported before rllib_fast could ask for a loopback-only Ray; "
                                "set %s=0 before importing ray for that", LOOPBACK_ENV)
            if num_cpus is not None:
                kwargs["num_cpus"] = num_cpus
            if num_gpus is not None:
                kwargs["num_gpus"] = num_gpus
        ray.init(**kwargs)
        started = True
    ensure_registered()
    return started


@contextlib.contextmanager
def temporary_env(key: str, value: str) -> Iterator[None]:
    """``os.environ[key] = value`` for the duration of a ``with`` block (restored after)."""
    old = os.environ.get(key)
    os.environ[key] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = old


#: What the console tables show of each trial's results.
METRIC_COLUMNS = {RETURN_KEY: "return", STEP_KEY: "env_steps", "time_total_s": "time (s)"}


def swept_keys(param_space: Mapping[str, Any], prefix: str = "") -> List[str]:
    """Keys of ``param_space`` that a search varies (Tune domains, ``grid_search``), '/'-joined."""
    from ray.tune.search.sample import Domain

    out: List[str] = []
    for key, value in param_space.items():
        if isinstance(value, Domain) or (isinstance(value, Mapping) and set(value) == {"grid_search"}):
            out.append(f"{prefix}{key}")
        elif isinstance(value, Mapping):
            out.extend(swept_keys(value, f"{prefix}{key}/"))
    return out


def progress_reporter(param_spaces: Sequence[Mapping[str, Any]] = (), extra: Sequence[str] = (),
                      max_report_frequency: int = 30):
    """Tune's classic ``CLIReporter`` showing a few metrics and only the swept hyperparameters.

    Why: without ``parameter_columns`` Tune's "Current best trial ... parameters={...}"
    line prints the whole AlgorithmConfig (kilobytes per line, every report). Used
    with ``RAY_AIR_NEW_OUTPUT=0`` (see :func:`temporary_env`): Tune's newer output
    drops a given reporter and prints every config key again."""
    from ray.tune import CLIReporter

    keys: List[str] = []
    for space in param_spaces:
        keys += [k for k in swept_keys(space) if k not in keys]
    keys += [k for k in extra if k not in keys]
    if not keys:  # an empty list would mean "every config key" to Tune
        keys = ["lr"]
    return CLIReporter(metric_columns=dict(METRIC_COLUMNS), parameter_columns=keys,
                       max_report_frequency=max_report_frequency)
