"""Whether a device multiplies bfloat16 natively: what ``update_dtype='auto'`` asks.

Why a probe of our own: autocast to bfloat16 halves the matrix products' time
where the hardware has bfloat16 instructions (CPUs with AVX512-BF16 or AMX,
CUDA GPUs from Ampere on) and slows them where they are emulated, and torch
runs either without complaint. On CPU the kernel's flags are the record
(Linux ``/proc/cpuinfo``; elsewhere unknown, so no)."""
from __future__ import annotations

import functools
from typing import Any

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
