"""The on-policy learning phase as an object: :class:`UpdateRule`.

An algorithm composes a rule (PPO's minibatch epochs, A2C's one step) built
with everything it uses -- module, optimizer, settings, the learners'
collectives, the parameter sync -- and calls ``learn(batch)`` once per
iteration (rsl_rl's ``PPO.update()`` shape). The rule never reads the
algorithm, so the other iteration shapes (HTS-RL's overlapped rounds, the
asynchronous learners' driver) reuse both rules unchanged.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Dict, Optional

import torch

from ...core.compile import compiled
from .batch import OnPolicyBatch
from .collectives import LOCAL_PARAMETERS, LearnerCollectives
from .whole_step import whole_gradient_step


class UpdateRule:
    """An on-policy algorithm's learning phase (rsl_rl's ``PPO.update()`` shape):
    built with everything it uses, then ``learn(batch)`` returns the
    statistics the algorithm logs.

    Built from: the actor-critic ``module``, the ``optimizer``, the ``settings``
    (the rule's config keys, :meth:`settings_from`; the algorithm hands it new
    ones when live keys change), the data-parallel ``learners``
    (:class:`LearnerCollectives`), ``after_step`` (called after every optimizer
    step: an asynchronous learner's central-store sync), the minibatch
    shuffles' ``shuffle_generator`` and ``compile`` (the loss function runs
    compiled under the ``compile`` key).

    One minibatch's whole gradient step is :meth:`gradient_step`, a function of
    explicit tensors with static shapes (forward and loss, backward, gradient
    average over learners, global-norm clip, optimizer step): the unit a
    compiler can capture as one graph. ``learn`` only loops over it. The
    rule never reads the algorithm."""

    #: the statistics ``loss`` stacks, in order (``learn`` reports their means)
    STATS: tuple = ()

    def __init__(self, module: torch.nn.Module, optimizer: torch.optim.Optimizer, settings: Any,
                 learners: LearnerCollectives, *, after_step: Callable[[], None] = LOCAL_PARAMETERS.after_update,
                 shuffle_generator: Optional[torch.Generator] = None, compile: Any = False) -> None:
        self.module, self.optimizer, self.settings, self.learners = module, optimizer, settings, learners
        self.params = list(module.parameters())
        self.device = self.params[0].device
        self.after_step = after_step
        #: None: torch's default generator (the algorithm's own stream, checkpointed)
        self.shuffle_generator = shuffle_generator
        #: the loss (forward included) as ``compile`` runs it: the same function when eager
        self.loss_fn = compiled(self.loss, compile, self.device)
        #: under ``compile``, the whole gradient step as one graph where it can be (plain Adam,
        #: no before_apply hook; one learner at call time): whole_step.WholeGradientStep
        self.whole_step = whole_gradient_step(self, compile, self.device)

    @staticmethod
    def settings_from(config) -> Any:
        """The rule's settings read from ``config`` (at build and after a live change)."""
        raise NotImplementedError("abstract: UpdateRule.settings_from")

    @staticmethod
    def make_optimizer(params, lr: float, config) -> torch.optim.Optimizer:
        """The rule's optimizer over ``params`` at learning rate ``lr``."""
        raise NotImplementedError("abstract: UpdateRule.make_optimizer")

    def training_intensity(self) -> float:
        """Average number of gradient uses of each sample."""
        raise NotImplementedError("abstract: UpdateRule.training_intensity")

    def loss(self, batch: OnPolicyBatch, idx: Optional[torch.Tensor], denom: Optional[torch.Tensor]):
        """The loss of the transitions ``idx`` of ``batch`` (None: all) and a
        stack of its detached statistics (``STATS``); ``denom``: the masked
        means' denominator (:meth:`LearnerCollectives.mean_denominator`)."""
        raise NotImplementedError("abstract: UpdateRule.loss")

    def gradient_step(self, batch: OnPolicyBatch, idx: Optional[torch.Tensor],
                      denom: Optional[torch.Tensor]) -> torch.Tensor:
        """One minibatch's whole gradient step; returns the loss statistics."""
        if self.whole_step is not None and self.learners.dist is None:
            return self.whole_step(batch, idx, denom)
        loss, stats = self.loss_fn(batch, idx, denom)
        self.after_forward()
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.before_apply()
        self.learners.average_gradients(self.params)
        if self.settings.grad_clip is not None:
            for group in self.clip_groups():
                torch.nn.utils.clip_grad_norm_(group, self.settings.grad_clip, foreach=True)
        self.optimizer.step()
        return stats

    def clip_groups(self) -> list:
        """The parameter groups ``grad_clip`` bounds the gradient norm of, each on
        its own: all parameters together (FastPPO's ``grad_clip_scope`` may split them)."""
        return [self.params]

    def after_forward(self) -> None:
        """Between the loss's forward and the gradient's application (PPO reads
        its adaptive lr's KL off the training forward here)."""

    def before_apply(self) -> None:
        """Between backward and the gradient's application (HTSA2C's delayed
        gradient puts the learner's parameters back here)."""

    def has_before_apply_hook(self) -> bool:
        """Whether this rule overrides :meth:`before_apply`: then its step
        cannot be captured as one compiled graph (``whole_step.WholeGradientStep``)."""
        return type(self).before_apply is not UpdateRule.before_apply

    def learn(self, batch: OnPolicyBatch) -> Dict[str, Any]:
        """Gradient steps on a rollout's batch; returns ``{statistic: value}``
        (device tensors or numbers) for the algorithm to log."""
        raise NotImplementedError("abstract: UpdateRule.learn")

    def acting_parameters(self, behaviour):
        """Context in which targets and gradients of a batch are computed when
        the parameters that acted (``behaviour``, HTS-RL's snapshot) are not the
        learner's: nothing changes for PPO and plain A2C; HTSA2C's delayed
        gradient evaluates at ``behaviour`` (``hts.algorithm.DelayedA2CUpdate``)."""
        return contextlib.nullcontext()
