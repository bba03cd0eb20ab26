"""Student-teacher distillation on the on-policy loop (rsl_rl's
``Distillation`` algorithm and runner as the reference).

Why its own small algorithm, not a FastPPO mode: nothing of PPO's update
applies (no returns, advantages, critic or ratio clip) and the checkpoint holds
a teacher PPO lacks; what it shares is the rollout, which it reuses whole from
:class:`..onpolicy.algorithm.OnPolicyAlgorithm` (batched acting into preallocated ``[T,
N]`` storage, observation normalisation, start-state decorrelation, the
source's privileged ``states`` stored beside the observations). One iteration:

1. the **student** acts (sampling from its own policy: DAgger, the states are
   the student's) on the actor observations for ``rollout_length`` steps;
2. the frozen **teacher** (:mod:`.teacher`) labels every stored state from the
   privileged observations in one batched pass;
3. :class:`DistillationUpdate` regresses the student's action parameters onto
   the labels, ``gradient_length`` consecutive env steps per gradient step.

The student is the actor of the loop's actor-critic module (its critic is not
trained). With ``rnn_type`` it is a recurrent actor (rsl_rl's ``RNNModel``
student): it acts with FastPPO's recurrent acting (:class:`..ppo.recurrent.RecurrentActing`:
the memory carried across steps and rollouts, zeroed at episode ends,
checkpointed), and :class:`RecurrentDistillationUpdate` replays the rollout in
time order from the memory it began with.
``get_module()`` is the student, so evaluation and export act with it."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, NamedTuple, Optional

import torch
from torch.nn import functional as F

from ..onpolicy.algorithm import OnPolicyAlgorithm
from ..onpolicy.reductions import masked_mean
from ..onpolicy.update import UpdateRule
from ..ppo.recurrent import RecurrentActing
from ..recurrent_module import Sequences
from .config import DistillationConfig
from .teacher import load_teacher


class DistillationBatch(NamedTuple):
    """A rollout as the distillation update reads it, time-major."""

    obs: torch.Tensor               # [T, N, D] the student's normalised observations
    labels: torch.Tensor            # [T, N, A] the teacher's action parameters (means or logits)
    weights: Optional[torch.Tensor]  # [T, N] 1 for valid transitions; None when all are valid
    #: a recurrent student's sequence layout (``recurrent_module.Sequences``: episode starts
    #: ``[T * N]``, the memories the rollout began from); None for a feed-forward student
    sequences: Optional[Sequences] = None


@dataclass(frozen=True)
class DistillationSettings:
    num_epochs: int
    gradient_length: int
    loss_type: str
    grad_clip: Optional[float]

    @classmethod
    def from_config(cls, config) -> "DistillationSettings":
        return cls(config.num_epochs, config.gradient_length, config.loss_type, config.grad_clip)


LOSSES = {"mse": F.mse_loss, "huber": F.huber_loss}


class DistillationUpdate(UpdateRule):
    """Behaviour cloning of the teacher's labels: ``num_epochs`` passes over the
    rollout in time order, one gradient step per ``gradient_length`` env steps
    whose per-step mean losses are summed (rsl_rl's accumulation; the last,
    shorter window of a rollout steps too)."""

    STATS = ("behavior_loss",)
    settings_from = staticmethod(DistillationSettings.from_config)

    @staticmethod
    def make_optimizer(params, lr: float, config) -> torch.optim.Optimizer:
        return torch.optim.Adam(params, lr=lr)

    def training_intensity(self) -> float:
        return float(self.settings.num_epochs)

    def student_output(self, features: torch.Tensor) -> torch.Tensor:
        """What is compared with the labels: action means, or probabilities, from
        the features the student's MLP reads ``[B, *]``."""
        p, _ = self.module.dist_params(features)
        return p.softmax(-1) if self.module.discrete else p

    def window_features(self, batch: DistillationBatch, idx: torch.Tensor) -> torch.Tensor:
        """What the student's MLP reads at the env steps ``idx`` (time indices), flat
        ``[L * N, *]``: the stored normalised observations."""
        obs = batch.obs[idx]
        return obs.reshape(obs.shape[0] * obs.shape[1], -1)

    def begin_epoch(self, batch: DistillationBatch) -> None:
        """Before each pass over the rollout (a recurrent student restarts its memory)."""

    def loss(self, batch: DistillationBatch, idx: Optional[torch.Tensor], denom: Optional[torch.Tensor]):
        """The summed per-step losses of the env steps ``idx`` (time indices)."""
        labels = batch.labels[idx]
        L, N = labels.shape[:2]
        pred = self.student_output(self.window_features(batch, idx))
        target = labels.reshape(L * N, -1)
        if self.module.discrete:
            target = target.softmax(-1)
        per_row = LOSSES[self.settings.loss_type](pred, target, reduction="none").mean(-1)
        w = None if batch.weights is None else batch.weights[idx].reshape(-1)
        mean = masked_mean(per_row, w, None if w is None else w.sum().clamp_min(1.0))
        return mean * L, mean.detach().reshape(1)

    def learn(self, batch: DistillationBatch) -> Dict[str, Any]:
        T, g = batch.obs.shape[0], self.settings.gradient_length
        total = torch.zeros(1, device=self.device)
        steps = 0
        for _ in range(self.settings.num_epochs):
            self.begin_epoch(batch)
            for start in range(0, T, g):
                idx = torch.arange(start, min(start + g, T), device=self.device)
                total += self.gradient_step(batch, idx, None)
                self.after_step()
                steps += 1
        return {"behavior_loss": total[0] / steps, "curr_lr": self.optimizer.param_groups[0]["lr"]}


class RecurrentDistillationUpdate(DistillationUpdate):
    """The update of a recurrent student (rsl_rl's ``Distillation.update`` with an
    ``RNNModel`` student): each epoch walks the rollout in time order from the
    memory state the rollout began with; a gradient window replays its
    ``gradient_length`` steps through the memory (zeroed in front of every
    episode start, so no gradient crosses an episode end), and its end state,
    detached, starts the next window: truncated BPTT of ``gradient_length`` steps
    over a sequence that spans the whole rollout. All envs of the rollout are in
    every window (as rsl_rl's), so there is no minibatch over envs."""

    def begin_epoch(self, batch: DistillationBatch) -> None:
        #: the memory the next window starts from ``[K, L, N, H]`` (detached)
        self.carry = batch.sequences.memories.actor

    def window_features(self, batch: DistillationBatch, idx: torch.Tensor) -> torch.Tensor:
        seq = batch.sequences
        starts = seq.starts.view(seq.horizon, -1)[idx]
        latent, end = self.module.pi_memory.unroll(batch.obs[idx], self.carry, starts)
        self.carry = end.detach()
        return latent.reshape(-1, latent.shape[-1])


class Distillation(RecurrentActing, OnPolicyAlgorithm):
    """DAgger-style student-teacher distillation (module docstring)."""

    UPDATE = DistillationUpdate
    RECURRENT_UPDATE = RecurrentDistillationUpdate
    SUPPORTS_DATA_PARALLEL = False

    def build(self) -> None:
        super().build()
        cfg = self.config
        if cfg.teacher_checkpoint is None:   # checked here, not at validate: every default config validates
            raise ValueError("Distillation: `teacher_checkpoint` = None; allowed: an rllib_fast checkpoint "
                             "directory or an rsl_rl checkpoint file")
        if cfg.teacher_obs == "states" and self.state_dim is None:
            raise ValueError(f"Distillation: `teacher_obs` = 'states' but env {cfg.env!r} exposes no privileged "
                             "states; allowed: 'obs' or 'auto'")
        use_states = self.state_dim is not None and cfg.teacher_obs != "obs"
        #: the storage key of the teacher's raw input
        self.teacher_key = "states" if use_states else ("raw_obs" if self.normalize_obs else "obs")
        width = self.state_dim if use_states else math.prod(self.env.obs_shape)
        self.teacher = load_teacher(cfg.teacher_checkpoint, cfg.teacher_activation, width,
                                    self.env.single_action_space, self.device)

    def _targets(self) -> DistillationBatch:
        """The rollout with the teacher's labels of every visited state."""
        st = self.storage
        T, N = self.horizon, self.env.num_envs
        labels = self.teacher.labels(st.flat(self.teacher_key)).view(T, N, -1)
        valid = st["valid"].float() if self.any_invalid else None
        return DistillationBatch(st["obs"], labels, valid)

    def _batch(self, targets: DistillationBatch) -> DistillationBatch:
        if not self.recurrent:
            return targets
        return targets._replace(sequences=Sequences(self._starts().reshape(-1), self.rollout_start, self.horizon))

    def stateful_components(self) -> Dict[str, Any]:
        return {**super().stateful_components(), "teacher": self.teacher}

    @classmethod
    def get_default_config(cls) -> DistillationConfig:
        return DistillationConfig()
