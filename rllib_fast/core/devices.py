"""Whether this process can use the torch device a config key names, and the one-line error when not.

Why at build, not at validation: a config is often validated on another machine
than the one that runs it (a CPU laptop checks a sweep whose trials run on GPU
nodes; Tune's driver validates trials that run elsewhere), so validation checks
only the form of a device key (``core.algorithm.DEVICE_CHECK``). The process that
builds the algorithm -- or the Ray actor that builds a learner -- is the one that
must have the device. Left to torch, a missing CUDA device fails deep inside it
(``AssertionError: Torch not compiled with CUDA enabled``, ``RuntimeError: No
CUDA GPUs are available``); :func:`unavailable_device_error` names the key, the
reason and the devices this machine has instead.
"""
from __future__ import annotations

import os
import re
from typing import Any, List, Optional

import torch


class DeviceUnavailableError(ValueError):
    """A config key names a device this machine does not have (raised at build)."""


def available_devices() -> List[str]:
    """The devices this process can use: 'cpu', then 'cuda:i' per visible GPU, 'mps' on Apple silicon."""
    out = ["cpu"]
    if torch.cuda.is_available():
        out += [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        out.append("mps")
    return out


def why_no_cuda() -> str:
    """Why torch sees no CUDA device (a CPU build, or none visible)."""
    if torch.version.cuda is None:
        return f"this torch ({torch.__version__}) is built without CUDA"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return f"torch sees no CUDA device here (CUDA_VISIBLE_DEVICES={visible!r})"
    return "torch sees no CUDA device here"


def unavailable_reason(value: Any) -> Optional[str]:
    """Why this process cannot use device ``value`` and which devices it can
    ("this torch (2.13.0+cpu) is built without CUDA; available here: 'auto', 'cpu'"),
    or None when it can. 'auto', malformed values (validation reports those) and
    device kinds other than cpu/cuda/mps (torch reports those) pass."""
    if not isinstance(value, (str, torch.device)) or value == "auto":
        return None
    try:
        dev = torch.device(value)
    except (RuntimeError, TypeError):
        return None
    if dev.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count and (dev.index is None or dev.index < count):
            return None
        why = why_no_cuda() if not count else f"this machine has {count} CUDA device{'s' * (count > 1)}"
    elif dev.type == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is not None and mps.is_available():
            return None
        why = "this machine has no MPS device"
    else:
        return None
    return f"{why}; available here: " + ", ".join(repr(d) for d in ["auto", *available_devices()])


def unavailable_device_error(owner: str, key: str, value: Any) -> Optional[str]:
    """One line naming ``owner``'s config key ``key`` when its device ``value`` is
    one this process cannot use (see :func:`unavailable_reason`), else None."""
    reason = unavailable_reason(value)
    return None if reason is None else f"{owner}: `{key}` = {str(value)!r} but {reason}"


def raise_remote_device_error(err: BaseException) -> None:
    """Raise, as its one line, a :class:`DeviceUnavailableError` that a Ray actor hit
    while it was created (Ray wraps it in a many-line ``ActorDiedError``); return
    when ``err`` is something else (the caller re-raises it)."""
    match = re.search(rf"{DeviceUnavailableError.__name__}: ([^\n]+)", str(err))
    if match:
        raise DeviceUnavailableError(match.group(1).strip()) from None
