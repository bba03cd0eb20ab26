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


class WholeGradientStep:
    """One minibatch's whole gradient step -- loss forward, backward, global-norm
    gradient clip, Adam step -- as ONE compiled graph with static shapes (what
    CUDA graphs need), for an on-policy update rule whose ``gradient_step`` is
    ``loss -> backward -> clip -> optimizer.step()`` (``core.compile`` only
    builds it where that holds: :meth:`applies`).

    How it is one graph: dynamo traces ``torch.autograd.grad`` inside the
    function (``trace_autograd_ops``), so AOTAutograd sees forward and
    backward together; the clip is ``_foreach_norm`` + ``_foreach_mul`` as
    ``clip_grad_norm_(foreach=True)`` computes it; the Adam step is torch's
    Adam update written with foreach ops on the optimizer's own state tensors
    (``optimizer.state[p]``: ``step``, ``exp_avg``, ``exp_avg_sq``, so
    checkpoints, restores and the eager path share one state), with the
    learning rate a 0-d tensor refreshed only when the param group's lr
    changes (a float would be a graph constant: a recompile per adaptive-KL
    change). Inductor fuses clip and Adam into one kernel.

    Numbers: the eager step (fused Adam) and this agree to float rounding
    (1e-7 on the parameters after a few steps, ``tests/algorithms/test_compile.py``).
    Gradients are not left in ``p.grad`` (nothing reads them after the step)."""

    def __init__(self, rule: Any, setting: Any, device: torch.device | str = "cpu",
                 backend: str | None = None) -> None:
        self.rule = rule
        self.params = list(rule.params)
        self._lr = torch.zeros((), dtype=torch.float32, device=self.params[0].device)
        self._lr_value: float | None = None
        self._fn = compiled(self._step, setting, device, backend)

    @staticmethod
    def applies(rule: Any) -> bool:
        """Whether ``rule``'s step can be captured whole: one learner (no
        gradient all-reduce), no ``before_apply`` override (HTSA2C's delayed
        gradient), and plain Adam (one param group, no weight decay, amsgrad,
        maximize or capturable state): the optimizer this step reimplements."""
        opt = getattr(rule, "optimizer", None)
        if type(opt) is not torch.optim.Adam or len(opt.param_groups) != 1:
            return False
        g = opt.param_groups[0]
        if g["weight_decay"] or g["amsgrad"] or g["maximize"] or g.get("differentiable") or \
                torch.is_tensor(g["lr"]) or g.get("capturable"):
            return False
        if getattr(getattr(rule, "learners", None), "dist", None) is not None:
            return False
        if len(rule.clip_groups()) != 1:   # the step clips one global norm
            return False
        hook = getattr(type(rule), "before_apply", None)
        return hook is not None and hook.__qualname__ == "UpdateRule.before_apply"   # not overridden

    def _state(self) -> tuple:
        """The optimizer's state tensors (created as torch's fused Adam creates
        them on its first step, when this step comes first)."""
        opt = self.rule.optimizer
        steps, avgs, sqs = [], [], []
        for p in self.params:
            st = opt.state[p]
            if not st:
                st["step"] = torch.zeros((), dtype=torch.float32, device=p.device)
                st["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                st["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            steps.append(st["step"])
            avgs.append(st["exp_avg"])
            sqs.append(st["exp_avg_sq"])
        return steps, avgs, sqs

    def __call__(self, batch, idx, denom) -> torch.Tensor:
        group = self.rule.optimizer.param_groups[0]
        lr = group["lr"]
        if torch.is_tensor(lr):   # a rule adapting lr on the device (PPO's adaptive_lr_every='minibatch')
            self._lr_value = None
        else:
            if lr != self._lr_value:   # once per adaptive-KL change, never per minibatch
                self._lr_value = lr
                self._lr.fill_(float(lr))
            lr = self._lr
        steps, avgs, sqs = self._state()
        clip = self.rule.settings.grad_clip
        beta1, beta2 = group["betas"]
        with torch._dynamo.config.patch(trace_autograd_ops=True):
            return self._fn(batch, idx, denom, lr, steps, avgs, sqs,
                            -1.0 if clip is None else float(clip), float(beta1), float(beta2), float(group["eps"]))

    def _step(self, batch, idx, denom, lr, steps, avgs, sqs, clip: float, beta1: float, beta2: float,
              eps: float) -> torch.Tensor:
        params = self.params
        loss, stats = self.rule.loss(batch, idx, denom)
        grads = torch.autograd.grad(loss, params)
        with torch.no_grad():
            if clip >= 0:   # clip_grad_norm_(foreach=True)'s arithmetic
                total = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
                grads = torch._foreach_mul(grads, (clip / (total + 1e-6)).clamp(max=1.0))
            # torch.optim.Adam's update (amsgrad, weight decay and maximize off)
            torch._foreach_add_(steps, 1.0)
            torch._foreach_lerp_(avgs, grads, 1.0 - beta1)
            torch._foreach_mul_(sqs, beta2)
            torch._foreach_addcmul_(sqs, grads, grads, 1.0 - beta2)
            step_size = [-lr / (1.0 - beta1 ** s) for s in steps]
            root_bc2 = [(1.0 - beta2 ** s).sqrt() for s in steps]
            denom_ = torch._foreach_add(torch._foreach_div(torch._foreach_sqrt(sqs), root_bc2), eps)
            torch._foreach_add_(params, torch._foreach_div(torch._foreach_mul(avgs, step_size), denom_))
        return stats

    def graph_breaks(self, batch, idx, denom) -> int:
        """Graph breaks of the whole step (``torch._dynamo.explain``: it also runs
        the step once, eagerly, so the parameters take one step)."""
        group = self.rule.optimizer.param_groups[0]
        steps, avgs, sqs = self._state()
        with torch._dynamo.config.patch(trace_autograd_ops=True):
            return graph_breaks(self._step, batch, idx, denom, self._lr, steps, avgs, sqs, 0.5, *group["betas"],
                                float(group["eps"]))


def whole_gradient_step(rule: Any, setting: Any, device: torch.device | str = "cpu",
                        backend: str | None = None) -> "WholeGradientStep | None":
    """The compiled whole minibatch step of ``rule`` under ``compile`` =
    ``setting``, or None (eager, or a rule :meth:`WholeGradientStep.applies`
    rejects: then only its loss is compiled)."""
    if compile_mode(setting) is None or not WholeGradientStep.applies(rule):
        return None
    return WholeGradientStep(rule, setting, device, backend)


def graph_breaks(fn: Callable, *args, **kwargs) -> int:
    """Graph breaks dynamo meets tracing ``fn(*args, **kwargs)`` (the uncompiled
    function; nothing is code-generated). Used by tests, benchmarks and docs."""
    return torch._dynamo.explain(getattr(fn, "_torchdynamo_orig_callable", fn))(*args, **kwargs).graph_break_count
