"""One host->device copy per step for CPU sources (the one uploader).

Sources that compute on the host (gymnasium vector envs, envpool, MinAtar, the
ALE) produce a step as several small numpy arrays. Sending each with its own
``.to(device)`` costs one copy (and on CUDA one launch and one pageable-memory
sync) per array; :class:`PackedUploader` instead packs the whole step into one
preallocated host buffer -- pinned on CUDA -- and moves it with a single copy.
:class:`StepUploader` is the ``obs()`` / ``step()`` face of it that the
gymnasium bridge and the envpool adapter call; MinAtar and the ALE fill the
views themselves (they write their results straight into them).

Layout of the byte buffer::

    float32 rows [n_f32, N] | bool rows [n_bool, N] | pad | obs [N, *shape] | final [N, *shape]

with the observation blocks aligned to their dtype (float32 or uint8 frames).
"""
from __future__ import annotations

from typing import Any, Optional, Sequence, Tuple

import numpy as np
import torch

__all__ = ["PackedUploader", "StepUploader"]

_OBS_DTYPES = {np.dtype(np.uint8): torch.uint8, np.dtype(np.float32): torch.float32}


class PackedUploader:
    """Packs one step into a single byte buffer and moves it to the device with one copy.

    Fill the numpy views ``f32``, ``bools``, ``obs`` and ``final`` in place, then
    call :meth:`send`; ``final`` is only transferred when asked (when some env
    ended), otherwise the returned ``final_obs`` is the ``obs`` tensor itself.
    Every call returns tensors backed by a fresh device buffer (on a CPU device a
    fresh copy), so results of earlier steps are never overwritten -- the
    contract's "no aliasing between returned steps".

    On CUDA the copy is ``non_blocking`` and an event guards the staging buffer:
    :meth:`wait` (call it before writing the views) blocks only until the
    previous step's copy has left the buffer, not on the device's work.
    """

    def __init__(self, num_envs: int, obs_shape: Sequence[int], device: Any,
                 n_f32: int = 1, n_bool: int = 2, obs_dtype: Any = np.uint8):
        self.n = n = int(num_envs)
        self.obs_shape = tuple(int(s) for s in obs_shape)
        self.obs_dtype = np.dtype(obs_dtype)
        if self.obs_dtype not in _OBS_DTYPES:
            raise ValueError(f"PackedUploader: obs_dtype {self.obs_dtype} not supported; allowed: uint8, float32")
        self._torch_obs_dtype = _OBS_DTYPES[self.obs_dtype]
        self.d = int(np.prod(self.obs_shape, dtype=np.int64))
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self.n_f32, self.n_bool = int(n_f32), int(n_bool)
        self._f32_end = 4 * n * self.n_f32            # offset 0: float32 views stay aligned
        size = self.obs_dtype.itemsize
        self._head = -(-(self._f32_end + n * self.n_bool) // 8) * 8   # obs blocks 8-byte aligned
        self._obs_bytes = n * self.d * size
        total = self._head + 2 * self._obs_bytes
        self._buf = torch.zeros(total, dtype=torch.uint8, pin_memory=self.cuda)
        self._buf_np = b = self._buf.numpy()
        self.f32 = b[:self._f32_end].view(np.float32).reshape(self.n_f32, n)
        self.bools = b[self._f32_end:self._f32_end + n * self.n_bool].view(np.bool_).reshape(self.n_bool, n)
        h, ob = self._head, self._obs_bytes
        self.obs = b[h:h + ob].view(self.obs_dtype).reshape(n, *self.obs_shape)
        self.final = b[h + ob:].view(self.obs_dtype).reshape(n, *self.obs_shape)
        self._event = None

    def wait(self) -> None:
        if self._event is not None:
            self._event.synchronize()
            self._event = None

    def _transfer(self, lo: int, hi: int) -> torch.Tensor:
        if self.device.type == "cpu":
            # a plain single-threaded memcpy: torch's parallel copy of a small buffer costs
            # OpenMP barrier latency (milliseconds on an oversubscribed CPU)
            return torch.from_numpy(self._buf_np[lo:hi].copy())
        src = self._buf[lo:hi]
        if not self.cuda:
            return src.to(self.device, copy=True)
        dev = src.to(self.device, non_blocking=True)
        self._event = torch.cuda.Event()
        self._event.record()
        return dev

    def _obs_view(self, raw: torch.Tensor) -> torch.Tensor:
        return raw.view(self._torch_obs_dtype).view(self.n, *self.obs_shape)

    def send_obs(self) -> torch.Tensor:
        """Only the ``obs`` block (for ``reset``)."""
        h = self._head
        return self._obs_view(self._transfer(h, h + self._obs_bytes))

    def send(self, with_final: bool) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(f32 [n_f32, N], bools [n_bool, N], obs, final_obs)`` on the device."""
        n, h, ob = self.n, self._head, self._obs_bytes
        length = h + ob * (2 if with_final else 1)
        dev = self._transfer(0, length)
        f32 = dev[:self._f32_end].view(torch.float32).view(self.n_f32, n)
        bools = dev[self._f32_end:self._f32_end + n * self.n_bool].view(torch.bool).view(self.n_bool, n)
        obs = self._obs_view(dev[h:h + ob])
        final = self._obs_view(dev[h + ob:length]) if with_final else obs
        return f32, bools, obs, final


class StepUploader:
    """``obs(obs)`` / ``step(obs, final_obs, reward, terminated, truncated, valid)``:
    the numpy results of a host vector env (gymnasium, envpool) as one step of
    device tensors.

    Off the CPU (``packed``, the default there) the step goes through a
    :class:`PackedUploader`: one copy. On a CPU device each array becomes a
    tensor over a fresh owned copy instead (``torch.from_numpy``): packing would
    add a copy and a dozen tensor views per step for nothing to save (there is no
    host-to-device transfer to batch).
    Either way arrays are copied, so a source that reuses its buffers can never
    alias a returned step; ``final_obs`` is transferred only when it is a
    different array from ``obs`` (some env ended), otherwise it *is* ``obs``.
    ``packed=True`` on a CPU device exists to test the staging layout.
    """

    def __init__(self, num_envs: int, obs_shape: Sequence[int], device: Any, obs_dtype: Any = np.float32,
                 packed: Optional[bool] = None):
        self.device = torch.device(device)
        self.obs_dtype = np.dtype(obs_dtype)
        self.packed = self.device.type != "cpu" if packed is None else bool(packed)
        self.pk = (PackedUploader(num_envs, obs_shape, self.device, n_f32=1, n_bool=3, obs_dtype=obs_dtype)
                   if self.packed else None)

    def _owned(self, x: Any, dtype: Any) -> torch.Tensor:
        return torch.from_numpy(np.array(x, dtype=dtype, copy=True, order="C"))

    def obs(self, obs: np.ndarray) -> torch.Tensor:
        if not self.packed:
            return self._owned(obs, self.obs_dtype)
        self.pk.wait()
        self.pk.obs[...] = np.asarray(obs).reshape(self.pk.obs.shape)
        return self.pk.send_obs()

    def step(self, obs, final_obs, reward, terminated, truncated,
             valid) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
                             Optional[torch.Tensor]]:
        with_final = final_obs is not obs
        if not self.packed:
            o = self._owned(obs, self.obs_dtype)
            return (o, self._owned(final_obs, self.obs_dtype) if with_final else o,
                    self._owned(reward, np.float32), self._owned(terminated, np.bool_),
                    self._owned(truncated, np.bool_), None if valid is None else self._owned(valid, np.bool_))
        pk = self.pk
        pk.wait()
        pk.f32[0] = reward
        pk.bools[0], pk.bools[1] = terminated, truncated
        pk.bools[2] = True if valid is None else valid
        pk.obs[...] = np.asarray(obs).reshape(pk.obs.shape)
        if with_final:
            pk.final[...] = np.asarray(final_obs).reshape(pk.final.shape)
        f32, bools, o, fo = pk.send(with_final)
        return o, fo, f32[0], bools[0], bools[1], None if valid is None else bools[2]
