"""``FastTorchRLModule``: the base of every rllib_fast RLModule (RLlib's ``TorchRLModule``, built quietly,
and able to say which one policy a policy file of it holds: :meth:`FastTorchRLModule.select`).

Why a base of our own: Ray 2.60's ``RLModule.__init__`` always builds an
``RLModuleConfig`` for old custom models (rl_module.py: "We keep it here for now
in case users still have custom models ... into which they pass in a `config`
argument"), and that class is decorated ``@Deprecated``. So the first RLModule
built in every process -- the driver, each Tune trial, each remote learner --
logs ``DeprecationWarning: `RLModule(config=[RLModuleConfig object])` has been
deprecated``, however it is constructed: our modules already pass
``observation_space=``, ``action_space=``, ``model_config=`` as the message asks
(a known Ray issue, ray-project/ray#51630). No argument, option or environment
variable avoids it, so -- the only way short of patching Ray -- the message is
filtered on the logger that emits it (``ray._common.deprecation``, through the
``logging`` module's public ``addFilter``), only while one of our modules runs
``RLModule.__init__``, and only that message: every other deprecation warning
still shows.
"""
from __future__ import annotations

import contextlib
import logging
import threading
from typing import Iterator, Optional

from ray.rllib.core.rl_module.torch.torch_rl_module import TorchRLModule

#: the logger Ray's ``@Deprecated`` decorator writes to
DEPRECATION_LOGGER = "ray._common.deprecation"
#: what identifies the message RLModule.__init__ triggers itself
RLMODULE_CONFIG_MESSAGE = "RLModule(config=[RLModuleConfig object])"


class _DropRLModuleConfigWarning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return RLMODULE_CONFIG_MESSAGE not in record.getMessage()


_FILTER = _DropRLModuleConfigWarning()
_lock = threading.Lock()
_depth = 0   # modules being built now (threads may build concurrently)


@contextlib.contextmanager
def quiet_rl_module_init() -> Iterator[None]:
    """While active, Ray's RLModuleConfig deprecation message is dropped (see the module docstring)."""
    global _depth
    log = logging.getLogger(DEPRECATION_LOGGER)
    with _lock:
        if _depth == 0:
            log.addFilter(_FILTER)
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                log.removeFilter(_FILTER)


class FastTorchRLModule(TorchRLModule):
    """A ``TorchRLModule`` whose construction does not log Ray's RLModuleConfig deprecation
    message (which Ray itself triggers; see the module docstring). Build it as any
    RLModule: ``Cls(observation_space=..., action_space=..., model_config=...)``."""

    def __init__(self, *args, **kwargs) -> None:
        with quiet_rl_module_init():
            super().__init__(*args, **kwargs)

    def select(self, member: Optional[int] = None) -> "FastTorchRLModule":
        """The one policy an exported file of this module holds, as a module of its
        own: this module, which has one policy. A population's module overrides it
        to return one member's copy; ``member`` applies to those only."""
        if member is not None:
            raise ValueError(f"member={member} applies to population algorithms only; this policy is a "
                             f"{type(self).__name__}")
        return self
