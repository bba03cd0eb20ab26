"""Whether a device multiplies bfloat16 natively: what ``update_dtype='auto'`` asks.

Why a probe of our own: autocast to bfloat16 halves the matrix products' time
where the hardware has bfloat16 instructions (CPUs with AVX512-BF16 or AMX,
CUDA GPUs from Ampere on) and slows them where they are emulated, and torch
runs either without complaint. On CPU the kernel's flags are the record
(Linux ``/proc/cpuinfo``; elsewhere unknown, so no)."""
from __future__ import annotations

import contextlib
import functools
from typing import Any, Optional

import torch

#: CPU flags (Linux names) that mean bfloat16 matrix products in hardware
NATIVE_BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")


@functools.lru_cache(maxsize=None)
def cpu_flags() -> frozenset:
    """The CPU's feature flags as the kernel lists them (empty where unreadable)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def native_bfloat16(device: Any) -> bool:
    """True where ``device`` multiplies bfloat16 in hardware."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.is_available() and torch.cuda.get_device_capability(device)[0] >= 8
    if device.type == "cpu":
        return any(flag in cpu_flags() for flag in NATIVE_BF16_CPU_FLAGS)
    return False


#: the values of an ``update_dtype`` key
UPDATE_DTYPES = ("float32", "bfloat16", "auto")


def autocast_dtype(setting: str, device: Any, reachable: bool = True) -> Optional[torch.dtype]:
    """The autocast dtype an ``update_dtype`` setting means on ``device`` (None:
    float32 throughout). 'auto' is bfloat16 only where the device multiplies it
    natively and ``reachable`` (the algorithm's update path is one autocast
    covers: no compile, no recurrent module...); an explicit 'bfloat16' is
    validated against those paths at config time, so here it is taken as is."""
    if setting == "bfloat16":
        return torch.bfloat16
    if setting == "auto" and reachable and native_bfloat16(device):
        return torch.bfloat16
    return None


def training_precision(device: Any, dtype: Optional[torch.dtype]):
    """The context of an update's training forward (and so of its backward,
    which autograd runs in the dtypes the forward chose): ``torch.autocast`` to
    ``dtype``, or nothing for None. Only the matrix products change precision;
    parameters, optimizer state and the loss arithmetic the networks' float32
    outputs feed stay float32."""
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(torch.device(device).type, dtype=dtype)
