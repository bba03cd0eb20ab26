"""The compiled whole gradient step of an on-policy update rule.

Under ``compile``, :meth:`UpdateRule.gradient_step <.update.UpdateRule.gradient_step>`
(loss forward, backward, global-norm clip, optimizer step) runs as ONE
compiled graph with static shapes where the rule allows it (what CUDA graphs
need); elsewhere only the rule's loss is compiled (``core.compile.compiled``).
"""
from __future__ import annotations

from typing import Any

import torch

from ...core.compile import compile_mode, compiled, graph_breaks


class WholeGradientStep:
    """One minibatch's whole gradient step -- loss forward, backward, global-norm
    gradient clip, Adam step -- as ONE compiled graph with static shapes (what
    CUDA graphs need), for an on-policy update rule whose ``gradient_step`` is
    ``loss -> backward -> clip -> optimizer.step()`` (:func:`whole_gradient_step`
    only builds it where that holds: :meth:`applies`).

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

    The eager step (fused Adam) and this agree to float rounding
    (``tests/algorithms/test_compile.py`` compares them).
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
        return not rule.has_before_apply_hook()

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
