"""``compile``: one switch that runs the hot path's act and update steps (and,
on the built-in torch tasks, the task's own step: ``TensorVecEnv.compile_step``)
under ``torch.compile``.

Why functions, not modules: ``torch.compile(module)`` returns an
``OptimizedModule`` whose ``state_dict`` keys carry an ``_orig_mod.`` prefix,
so checkpoints of compiled and eager runs would not load into each other.
Algorithms therefore keep their modules as they are and compile the *same*
Python function the eager path calls (``compiled(fn, setting)`` returns ``fn``
itself when ``compile`` is False): one code path, interchangeable checkpoints.

Random draws: inductor normally generates random numbers with its own kernels,
which neither match eager draws nor advance the global generator the way a
checkpoint's RNG state expects. We compile with inductor's ``fallback_random``
(ATen's generator), so a compiled run draws exactly what the eager run draws and
a restored checkpoint continues identically under either setting; the hot-path
functions take their random tensors as arguments where that is cheap anyway.

Shapes are static (``dynamic=False``): the act step always sees ``num_envs``
rows, the update step a fixed minibatch. On CUDA, ``'reduce-overhead'`` adds
CUDA graphs; on CPU there is nothing to graph and inductor compiles without
them (a one-time log line says so).
"""
from __future__ import annotations

import logging
from typing import Any, Callable

import torch

from .params import Param

logger = logging.getLogger(__name__)

COMPILE_MODES = ("default", "reduce-overhead", "max-autotune")
ALLOWED = "one of False, True, " + ", ".join(repr(m) for m in COMPILE_MODES)

# torch.compile backend. Only tests and debugging change it (e.g. to "aot_eager",
# which traces with dynamo and AOTAutograd like inductor but skips code generation).
BACKEND = "inductor"


def _compile_ok(value: Any) -> bool:
    return isinstance(value, bool) or value in COMPILE_MODES


COMPILE = Param(False, "torch.compile the act and update steps (and a built-in torch task's step): False "
                "(eager), True/'default', "
                "'reduce-overhead' (CUDA graphs on CUDA) or 'max-autotune'", (bool, str),
                check=(_compile_ok, ALLOWED))


def compile_mode(setting: Any) -> str | None:
    """The torch.compile mode of a ``compile`` setting, None for eager."""
    if setting is False or setting is None:
        return None
    return "default" if setting is True else setting


_NOTED: set = set()


def compiled(fn: Callable, setting: Any, device: torch.device | str = "cpu",
             backend: str | None = None) -> Callable:
    """``fn`` compiled under ``setting`` (the ``compile`` key), or ``fn`` itself.

    Static shapes, no forced full graph (an untested component that breaks
    the graph still runs; the tests assert zero breaks on the hot paths).
    ``backend``: a config's own ``compile_backend`` (populations), else ``BACKEND``."""
    mode = compile_mode(setting)
    backend = backend or BACKEND
    if mode is None:
        return fn
    kind = torch.device(device).type
    if mode != "default" and kind != "cuda" and (mode, kind) not in _NOTED:
        _NOTED.add((mode, kind))
        logger.info("compile=%r on %s: CUDA graphs need CUDA tensors; compiled without them", mode, kind)
    if backend != "inductor":
        return torch.compile(fn, backend=backend, dynamic=False)
    options = {**torch._inductor.list_mode_options(mode), "fallback_random": True}
    return torch.compile(fn, backend=backend, dynamic=False, options=options)


def graph_breaks(fn: Callable, *args, **kwargs) -> int:
    """Graph breaks dynamo meets tracing ``fn(*args, **kwargs)`` (the uncompiled
    function; nothing is code-generated). Used by tests, benchmarks and docs."""
    return torch._dynamo.explain(getattr(fn, "_torchdynamo_orig_callable", fn))(*args, **kwargs).graph_break_count
