"""What a GPU would pay for, counted on a CPU: kernel launches and host syncs.

GPU readiness is checked without a GPU by counting, on CPU, the two costs that dominate a small-network RL loop on a GPU: one launch
per device kernel (a few microseconds of host time each) and every
device-to-host synchronisation (the host waits until the GPU's queue drains,
which ends the asynchronous overlap of host and device).

Counting rules (:class:`LaunchCounter`):

* **kernels, eager ops** -- every ATen op that reaches the dispatcher (a
  ``TorchDispatchMode``: composite ops such as ``linear`` arrive already split
  into ``t`` + ``addmm``, as they reach a device) counts as one launch, except
  ops that launch nothing on a device: views and aliases (``OpOverload.is_view``,
  plus ``_unsafe_view``/``_reshape_alias``/``as_strided``), allocations
  (``empty*``, ``new_empty*``, ``resize_``, ``set_``), profiler markers and
  the syncs below. A composite op that reaches the mode whole (autograd off,
  as under ``inference_mode``) is decomposed and its parts are counted.
  Foreach and fused ops (``_foreach_*``, ``_fused_adam_``) count once: on CUDA
  they are one multi-tensor kernel per chunk of tensors (a few at most here).
* **kernels, compiled code** -- each call of an inductor-generated kernel
  (``cpp_fused_*`` on CPU, where CUDA would run a Triton kernel: inductor's CPU
  and GPU fusion differ in detail, not in kind), counted by wrapping the
  kernels of every loaded inductor module, plus every ATen op the generated
  code still calls (``extern_kernels.mm/addmm``, random fallbacks, copies),
  counted under the same rules as eager ops: the mode declares
  ``ignore_compile_internals``, so torch.compile runs its compiled code under
  it (instead of falling back to eager, which is what a plain mode makes it
  do) and the mode sees only what that code dispatches.
* **host syncs** -- ``_local_scalar_dense`` (``.item()``, ``float(t)``,
  ``int(t)``, ``bool(t)``, ``if t:``), ``equal``, ops whose output shape
  depends on data (``nonzero``, ``masked_select``, ``unique*``,
  ``repeat_interleave`` without ``output_size``, indexing or index-assigning
  with a boolean mask: all of them copy a count to the host on CUDA), and the
  explicit host copies ``Tensor.cpu()``, ``.numpy()`` and ``.tolist()`` (on a
  CPU run these dispatch nothing, so they are counted at the Python method).
  Not seen: ``.to(device)`` with a host device (on a CPU run it cannot be told
  from the ``.to(self.device)`` that is a no-op on a GPU). A sync is not also
  counted as a kernel. Not a sync: an optimizer reading its step counter
  (``torch.optim``'s ``_get_value``), which torch keeps on the host for a GPU
  model unless the optimizer is capturable or fused.
* **GPU defaults** -- torch picks an optimizer's implementation by device:
  with ``foreach`` unset, Adam/AdamW/SGD run one multi-tensor kernel per step
  phase on CUDA but a per-parameter loop on CPU. While a counter is installed
  (``gpu_defaults=True``) the CPU counts as a foreach device, so an
  optimizer left at torch's defaults (rsl_rl's) is counted as it would launch
  on a GPU. (Gradient clipping already uses foreach on CPU.)

Threads: a dispatch mode is thread-local, so while a counter is installed
every thread started from then on (PQL's learner threads, HTS-RL's executors
and actors) runs under its own copy of the mode; counts carry the thread's
name. Recording is switched on and off (:meth:`LaunchCounter.recording`)
without leaving the modes, so warm-up and compilation stay out of the counts.
"""
from __future__ import annotations

import collections
import contextlib
import sys
import threading
import traceback
from typing import Any, Callable, Dict, Iterator, List, Optional

import torch
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten

#: ops that launch nothing on a device (besides views, found from the schema)
_FREE_OPS = {
    "aten::empty", "aten::empty_like", "aten::empty_strided", "aten::new_empty", "aten::new_empty_strided",
    "aten::resize_", "aten::set_", "aten::_unsafe_view", "aten::_reshape_alias", "aten::as_strided",
    "aten::lift_fresh", "aten::sym_size", "aten::sym_stride", "aten::sym_numel", "aten::sym_storage_offset",
    "aten::is_same_size", "aten::_has_compatible_shallow_copy_type", "aten::record_stream",
}
#: ops that copy a value to the host on CUDA whatever their arguments
_SYNC_OPS = {
    "aten::_local_scalar_dense", "aten::equal", "aten::nonzero", "aten::masked_select", "aten::unique",
    "aten::_unique", "aten::_unique2", "aten::unique_dim", "aten::unique_consecutive", "aten::argwhere",
    "aten::allclose",
}
#: ops that sync only when indexed with a boolean mask
_MASK_INDEX_OPS = {"aten::index", "aten::index_put", "aten::index_put_", "aten::_index_put_impl_"}

#: where a sync is attributed in reports: the innermost frame outside torch itself
_SKIP_FRAMES = ("/torch/", "/launch_count.py", "/threading.py", "/contextlib.py")


def classify(func, args, kwargs) -> str:
    """``'sync'``, ``'free'`` or ``'kernel'`` for one dispatched ATen op."""
    name = func._schema.name
    if name in _SYNC_OPS:
        return "sync"
    if name in _MASK_INDEX_OPS:
        indices = args[1] if len(args) > 1 else kwargs.get("indices", ())
        if any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in indices or ()):
            return "sync"
        return "kernel"
    if name == "aten::repeat_interleave" and kwargs.get("output_size") is None and \
            isinstance(args[0] if args else None, torch.Tensor) and len(args) < 3:
        return "sync"
    if getattr(func, "is_view", False) or name in _FREE_OPS or name.startswith("profiler::"):
        return "free"
    return "kernel"


#: counters installed now, innermost last (the generated kernels' wrappers report to it)
_INSTALLED: List["LaunchCounter"] = []

_COMPOSITE: Dict[Any, bool] = {}


def _composite(func) -> bool:
    """Whether ``func`` is a CompositeImplicitAutograd op (made of other ATen ops)."""
    hit = _COMPOSITE.get(func)
    if hit is None:
        hit = _COMPOSITE[func] = torch._C._dispatch_has_kernel_for_dispatch_key(
            func.name(), torch._C.DispatchKey.CompositeImplicitAutograd)
    return hit


def _host_step_counter() -> bool:
    """A read of an optimizer's step counter (``torch.optim``'s ``_get_value``):
    outside capturable/fused mode torch keeps it on the host even for a GPU
    model, so reading it is no device sync."""
    f = sys._getframe(2)
    while f is not None:
        if f.f_code.co_name == "_get_value" and "/torch/optim/" in f.f_code.co_filename:
            return True
        f = f.f_back
    return False


def _call_site() -> str:
    """``file:line function`` of the innermost frame that is not torch's (or this module's)."""
    for frame in reversed(traceback.extract_stack()[:-2]):
        if not any(s in frame.filename for s in _SKIP_FRAMES):
            path = frame.filename.split("site-packages/", 1)[-1]
            for root in ("/rllib_fast/", "/rsl_rl/", "/benchmarks/", "/tests/"):
                if root in path:
                    path = root.strip("/") + "/" + path.split(root, 1)[1]
                    break
            return f"{path}:{frame.lineno} {frame.name}"
    return "?"


class _ThreadMode(TorchDispatchMode):
    """One thread's view of a :class:`LaunchCounter` (dispatch modes are thread-local)."""

    def __init__(self, counter: "LaunchCounter"):
        super().__init__()
        self.counter = counter

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        # compile (tracing, code generation) happens without the mode; the compiled
        # code then runs under it, so the ops it dispatches are counted
        return True

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        c = self.counter
        if c.active and _composite(func):
            # a composite op reaches a mode whole where autograd is off (inference_mode):
            # count the ops it is made of, as a device would run them
            with self:
                out = func.decompose(*args, **kwargs)
            if out is not NotImplemented:
                return out
        if c.active:
            kind = classify(func, args, kwargs)
            if kind != "free":
                c._add(kind, str(func.overloadpacket.__name__), sync_site=kind == "sync")
        return func(*args, **kwargs)


class LaunchCounter:
    """Counts kernel launches and host syncs of everything run while
    :meth:`recording` (this thread and every thread started after
    :meth:`install`). Use as ``with LaunchCounter() as lc: ...build...;
    with lc.recording(): ...run...``."""

    HOST_COPY_METHODS = ("cpu", "numpy", "tolist")

    def __init__(self, gpu_defaults: bool = True) -> None:
        self.gpu_defaults = gpu_defaults
        self.active = False
        self._lock = threading.Lock()
        self.reset()
        self._undo: List[Callable[[], None]] = []
        self._wrapped: set = set()

    # -- results ---------------------------------------------------------------------
    def reset(self) -> None:
        #: (thread name, kind, op) -> count; kind: 'kernel' (eager ATen op), 'compiled' (generated kernel), 'sync'
        self.counts: collections.Counter = collections.Counter()
        #: (thread name, call site) -> syncs there
        self.sync_sites: collections.Counter = collections.Counter()

    def total(self, kind: str, thread: Optional[str] = None) -> int:
        return sum(n for (t, k, _), n in self.counts.items() if k == kind and (thread is None or t == thread))

    def kernels(self, thread: Optional[str] = None) -> int:
        """Launches: eager ATen kernels plus generated kernels."""
        return self.total("kernel", thread) + self.total("compiled", thread)

    def syncs(self, thread: Optional[str] = None) -> int:
        return self.total("sync", thread)

    def threads(self) -> List[str]:
        return sorted({t for t, _, _ in self.counts})

    def by_op(self, kind: str) -> Dict[str, int]:
        out: collections.Counter = collections.Counter()
        for (_, k, op), n in self.counts.items():
            if k == kind:
                out[op] += n
        return dict(out.most_common())

    def summary(self) -> Dict[str, Any]:
        return {"kernels": self.kernels(), "eager_kernels": self.total("kernel"),
                "generated_kernels": self.total("compiled"), "syncs": self.syncs(),
                "by_thread": {t: {"kernels": self.kernels(t), "syncs": self.syncs(t)} for t in self.threads()},
                "sync_sites": {f"{t}: {s}": n for (t, s), n in self.sync_sites.most_common()}}

    # -- recording ----------------------------------------------------------------------
    def _add(self, kind: str, op: str, sync_site: bool = False) -> None:
        thread = threading.current_thread().name
        site = None
        if sync_site:
            if _host_step_counter():
                return
            site = _call_site()
        with self._lock:
            self.counts[(thread, kind, op)] += 1
            if site is not None:
                self.sync_sites[(thread, site)] += 1

    @contextlib.contextmanager
    def recording(self) -> Iterator["LaunchCounter"]:
        """Count what runs inside (the generated kernels loaded so far are wrapped
        now; a module inductor loads inside, e.g. after a recompile, on load)."""
        self.wrap_generated_kernels()
        from torch._inductor.codecache import PyCodeCache

        orig = PyCodeCache.__dict__["load_by_key_path"]
        counter = self

        def load_by_key_path(cls, *args, **kwargs):
            mod = orig.__func__(cls, *args, **kwargs)
            counter._wrap_module(mod)
            return mod

        PyCodeCache.load_by_key_path = classmethod(load_by_key_path)
        self.active = True
        try:
            yield self
        finally:
            self.active = False
            PyCodeCache.load_by_key_path = orig

    def wrap_generated_kernels(self) -> int:
        """Make every inductor-generated kernel of the loaded modules count its
        calls (a module's ``call`` looks its kernels up as globals at call
        time, so replacing the globals is enough). Returns how many were wrapped."""
        try:
            from torch._inductor.codecache import PyCodeCache
        except ImportError:  # pragma: no cover - inductor always ships with torch 2.x
            return 0
        mods = list(PyCodeCache.modules) + list(PyCodeCache.modules_no_attr.values())
        return sum(self._wrap_module(mod) for mod in mods)

    def _wrap_module(self, mod) -> int:
        n = 0
        for name, fn in list(vars(mod).items()):
            if not name.startswith(("cpp_fused", "cpp_kernel", "triton_")) or not callable(fn):
                continue
            if getattr(fn, "_launch_counted", False):
                continue
            setattr(mod, name, self._counting_kernel(name, fn))
            n += 1
        return n

    def _counting_kernel(self, name: str, fn: Callable) -> Callable:
        # the wrapper stays in the module after this counter is gone (a later build may
        # reuse the loaded module from inductor's in-process caches), so it reports to
        # whichever counter is installed when it runs
        def kernel(*args, **kwargs):
            counter = _INSTALLED[-1] if _INSTALLED else None
            if counter is not None and counter.active:
                counter._add("compiled", name)
            return fn(*args, **kwargs)

        kernel._launch_counted = True
        return kernel

    # -- install / uninstall --------------------------------------------------------------
    def __enter__(self) -> "LaunchCounter":
        self.install()
        return self

    def __exit__(self, *exc) -> None:
        self.uninstall()

    def install(self) -> None:
        """Enter the mode in this thread, in every thread started from now on,
        and count the Python-level host copies."""
        counter = self
        mode = _ThreadMode(self)
        mode.__enter__()
        self._undo.append(lambda: mode.__exit__(None, None, None))
        _INSTALLED.append(self)
        self._undo.append(lambda: _INSTALLED.remove(self))

        orig_run = threading.Thread.run

        def run(thread_self):
            with _ThreadMode(counter):
                orig_run(thread_self)

        threading.Thread.run = run
        self._undo.append(lambda: setattr(threading.Thread, "run", orig_run))

        for meth in self.HOST_COPY_METHODS:
            self._patch_host_copy(meth)
        if self.gpu_defaults:
            import torch.optim.optimizer as optim_mod

            orig_devices = optim_mod._get_foreach_kernels_supported_devices
            optim_mod._get_foreach_kernels_supported_devices = lambda: [*orig_devices(), "cpu"]
            self._undo.append(lambda: setattr(optim_mod, "_get_foreach_kernels_supported_devices", orig_devices))

    def _patch_host_copy(self, meth: str) -> None:
        counter = self
        orig = getattr(torch.Tensor, meth)

        def method(t, *args, **kwargs):
            if counter.active:
                counter._add("sync", f"Tensor.{meth}", sync_site=True)
            return orig(t, *args, **kwargs)

        setattr(torch.Tensor, meth, method)
        self._undo.append(lambda: setattr(torch.Tensor, meth, orig))

    def uninstall(self) -> None:
        self.active = False
        while self._undo:
            self._undo.pop()()

