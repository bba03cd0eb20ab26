"""Learning in the simulator's shadow: FastPPO's ``learn_while_stepping``.

Why: a synchronous PPO iteration alternates a rollout (the simulator busy,
the learner idle) and an update (the learner busy, the simulator idle). With a
real simulator on a CPU workstation, the simulator spends the update's share
of every iteration waiting. HTS-RL (``HTSPPO``) removes the wait by learning on
the previous round's batch while the executors collect the next, at a policy
lag of exactly one update, which costs env steps on tasks where every step's
policy matters (docs/design-notes.md).

Here the simulator steps in its own process (``step_async``/``step_wait``:
:class:`~rllib_fast.envs.parallel.ParallelVecEnv`; a registered env name is
put in one automatically, forked from the trial process so it does not
re-import the source: ``simulator_start_method``), and while it computes a
batched step the learner takes minibatch steps of the *previous* rollout's
update (``PPOUpdate.learn_steps``, a generator).
``learn_steps_per_env_step = k`` front-loads them: k steps in the shadow of
each env step from the rollout's first, until the update is done, so the
policy is stale only for the first ``ceil(S / k)`` env steps of a rollout
(``S = epochs x minibatches``); None spreads them evenly (step ``t`` runs
``[t S / T, (t + 1) S / T)``), which keeps every env step's shadow equally
busy but leaves the policy stale longer.

What decides the sample cost is how long the policy stays stale, so the
default k = 20 puts a 5 x 4 update entirely in the first env step's shadow
(a minibatch step is much shorter than a batched simulator step), and what
the adaptive-KL lr reads: measured from the parameters that acted, an
update's KL starts at the lag of those first steps and the lr is cut for it,
so ``kl_reference='auto'`` measures it from the policy at the update's start
when learning while stepping (``PPOUpdate._start_logp``). What the overlap
gains and costs per task is in benchmarks/results/overlap.md and
docs/design-notes.md.

The schedule is fixed (never timed), so a run is as deterministic as
synchronous FastPPO. The ratio is taken against the log-probabilities the
rollout stored, i.e. the parameters that actually acted at each step (the
HTS-RL paper's form); decoupled PPO (clipping around the parameters at the
update's start and weighting by pi_prox / pi_behaviour, Hilton et al. 2022)
needed more env steps (docs/design-notes.md).

State between iterations: the batch whose update the next rollout carries
(``FastPPO.pending``), checkpointed, so a restore continues exactly. The first
iteration has nothing to learn; each rollout's batch is learned during the
next ``train()`` call.
"""
from __future__ import annotations

from typing import Any, Dict, Generator, Optional

import torch

from ..onpolicy.batch import OnPolicyBatch


class OverlapSchedule:
    """One update's minibatch steps placed in the shadows of a rollout's env steps."""

    def __init__(self, horizon: int, per_env_step: Optional[int] = None) -> None:
        self.horizon = int(horizon)
        self.per_env_step = per_env_step
        self._steps: Optional[Generator[None, None, Dict[str, Any]]] = None
        self._total = 0
        self._done = 0
        self.stats: Optional[Dict[str, Any]] = None

    def begin(self, rule: Any, batch: OnPolicyBatch, total_steps: int) -> None:
        """Start learning ``batch`` with ``rule`` (``PPOUpdate``: ``total_steps``
        minibatch steps) over the next rollout."""
        self._steps = rule.learn_steps(batch)
        self._total, self._done = int(total_steps), 0
        self.stats = None

    @property
    def active(self) -> bool:
        return self._steps is not None

    def due(self, t: int) -> int:
        """Minibatch steps done once the shadow of env step ``t`` has been used."""
        if self.per_env_step is None:
            return (t + 1) * self._total // self.horizon
        return min(self._total, (t + 1) * self.per_env_step)

    def work(self, t: int) -> None:
        """The minibatch steps due while the simulator computes env step ``t``."""
        due = self.due(t)
        while self._done < due and self._steps is not None:
            self._advance()

    def finish(self) -> Optional[Dict[str, Any]]:
        """Run what is left of the update (nothing when the schedule covered it);
        its statistics, or None when there was no update."""
        while self._steps is not None:
            self._advance()
        stats, self.stats = self.stats, None
        return stats

    def _advance(self) -> None:
        try:
            with torch.enable_grad():   # work() runs inside the rollout's no_grad
                next(self._steps)
            self._done += 1
        except StopIteration as done:
            self.stats = done.value
            self._steps = None
