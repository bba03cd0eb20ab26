"""``ensure_ray``: the local Ray an algorithm starts for its own actors outside Tune.

FastAPPO/FastA3C (asynchronous learners), PQL with ``backend='ray'`` and
data-parallel learners (``num_learners > 1``) run Ray actors. Built from a plain
script, outside Tune and before any ``ray.init``, they start a local Ray
themselves, through this one function: no dashboard (it would execute jobs for
whoever reaches it).

Why the filter: a new local Ray 2.60 turns token authentication on when
``RAY_AUTH_MODE`` is unset (the secure default, which we keep) and announces it
in a 245-character warning, "Token authentication is enabled for this Ray
cluster. Set RAY_AUTH_MODE=disabled to opt out ...". The clean way to keep Ray
quiet is to set ``RAY_AUTH_MODE=token`` before ``ray`` is imported, which the
console commands do (tune/session.py); a script that imported ``rllib_fast`` has
imported ray already, and Ray reads the variable only then (its config is cached
at import). So here, and only for the ``ray.init`` this function makes, that one
notice is dropped from the logger that emits it through the ``logging`` module's
public ``addFilter``; Ray's warning that authentication is *disabled* still shows.
"""
from __future__ import annotations

import logging
import os
from typing import Any

import ray

#: the logger of Ray's token-authentication set-up, and the notice dropped from it
AUTH_LOGGER = "ray._private.authentication.authentication_token_setup"
AUTH_ENABLED_NOTICE = "Token authentication is enabled for this Ray cluster"


class _DropAuthEnabledNotice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(AUTH_ENABLED_NOTICE)


def ensure_ray(**init_kwargs: Any) -> bool:
    """``ray.init(include_dashboard=False, **init_kwargs)`` unless Ray is up; True if this call started it."""
    if ray.is_initialized():
        return False
    log = logging.getLogger(AUTH_LOGGER)
    quiet = _DropAuthEnabledNotice() if "RAY_AUTH_MODE" not in os.environ else None
    if quiet is not None:
        log.addFilter(quiet)
    try:
        ray.init(**{"include_dashboard": False, **init_kwargs})
    finally:
        if quiet is not None:
            log.removeFilter(quiet)
    return True
