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

Where an iteration's time goes is logged per iteration as
``timers/overlap/*`` (:class:`ShadowMeter`): the simulator's busy fraction from
its own counters, the learner's wait and update fractions, and the cores both
processes used.

State between iterations: the batch whose update the next rollout carries
(``FastPPO.pending``), checkpointed, so a restore continues exactly. The first
iteration has nothing to learn; each rollout's batch is learned during the
next ``train()`` call.
"""
from __future__ import annotations

import time
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


class ShadowMeter:
    """Where one overlapped iteration's wall time goes, from counters, not timings
    of the whole run: how long the learner waited for the simulator
    (``learner_wait_fraction``), how long it took minibatch steps in the
    simulator's shadow (``update_fraction``), how long the simulator process ran
    commands (``simulator_busy_fraction``, from
    :meth:`~rllib_fast.envs.parallel.ParallelVecEnv.worker_activity`) and the
    cores the two processes used together (``cores``: simulator CPU seconds +
    this process's CPU seconds, over the iteration's wall time).

    Why: the overlap pays only while both processes have work. A simulator busy
    fraction near 1 with a small update fraction says the simulator is the
    critical path and the learner's core idles (its update is short next to a
    rollout), which no scheduling of the update can change; a busy fraction well
    below 1 says the simulator waits for this process (actions, the iteration's
    bookkeeping). Reading the counters costs a few host clock reads per env step
    and one shared-memory read per iteration; nothing touches the device.
    """

    KEYS = ("simulator_busy_fraction", "learner_wait_fraction", "update_fraction", "cores")

    def __init__(self, env: Any) -> None:
        self._activity = getattr(env, "worker_activity", None)
        self._wall0 = self._cpu0 = 0.0
        self._sim0: Optional[Dict[str, Any]] = None
        self.wait_s = 0.0
        self.update_s = 0.0

    def start(self) -> None:
        """Begin an iteration."""
        self.wait_s = self.update_s = 0.0
        self._sim0 = self._activity() if self._activity is not None else None
        self._wall0, self._cpu0 = time.perf_counter(), time.process_time()

    def stop(self) -> Dict[str, float]:
        """End the iteration: its fractions (empty when the simulator has no counters)."""
        wall = max(time.perf_counter() - self._wall0, 1e-9)
        cpu = time.process_time() - self._cpu0
        if self._sim0 is None:
            return {}
        sim = self._activity()
        busy = float((sim["busy_s"] - self._sim0["busy_s"]).sum())
        sim_cpu = float((sim["cpu_s"] - self._sim0["cpu_s"]).sum())
        return {"simulator_busy_fraction": busy / wall, "learner_wait_fraction": self.wait_s / wall,
                "update_fraction": self.update_s / wall, "cores": (sim_cpu + cpu) / wall}
