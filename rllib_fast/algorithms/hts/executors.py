"""HTS-RL's executors and actors as threads around a state buffer.

Roles (paper §4, Fig. 1(e)):

* **executors** -- executor ``e`` owns one tensor env of ``num_envs / E`` env
  slots (a *group* of slots: for tensor envs that is the unit that steps) and
  its own torch ``Generator``. Each of the ``alpha`` steps of a round it
  publishes its current observations (rows ``[lo, hi)`` of the shared state
  buffer), waits for the actor's distribution parameters, **samples the action
  itself** with its generator, steps its env and writes the transition into
  columns ``[lo, hi)`` of the write storage.
* **actors** -- poll the state buffer; every poll takes *all* executors that
  have published and are not being served, runs **one batched forward** with
  the round's behaviour snapshot, and hands back distribution parameters.
  Sampling is deferred to the executors (paper A7), so which actor served an
  observation cannot change the trajectory. With ``deterministic=True`` the
  forward is over the fixed-shape ``[N]`` state buffer and only the served
  rows are kept: each env's row is always computed in the same position of the
  same-shaped matmul, so its numerics do not depend on what else was ready
  (batch-composition invariance; rows never mix in an MLP). With
  ``deterministic=False`` only the ready rows are gathered (less compute, but
  BLAS may round a row differently for different batch sizes).
* the **learner** is the thread that calls :meth:`HTSRuntime.start_round` /
  :meth:`HTSRuntime.wait_round` (the algorithm's ``training_step``).

Threads suit one machine: env steps that sleep or wait on simulator
processes, and torch ops, release the GIL. All waits are bounded
(``poll_s``) and check a stop flag, so ``close()`` (from any thread, e.g.
Tune stopping a trial mid-iteration) ends every thread; the threads are
daemons, so a wedged env cannot keep the interpreter alive.
"""
from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, List, Optional, Sequence

import torch
from torch.nn import functional as F

from ...envs.base import Step, TensorVecEnv, concat_steps
from ...core.seeding import worker_seed
from ..asymmetric import final_states, step_states


class HTSStopped(RuntimeError):
    """The runtime was closed while a round was in progress."""


# ---------------------------------------------------------------------------
# executor group env: E tensor envs behind one TensorVecEnv
# ---------------------------------------------------------------------------
class ExecutorGroupEnv(TensorVecEnv):
    """``E`` envs, env ``e`` holding slots ``slices[e]``, presented as one
    ``TensorVecEnv`` (used for validation, start-state decorrelation and
    checkpoints; the HTS executors step ``parts[e]`` directly).

    Part ``e`` is reset with ``worker_seed(seed, e)``. ``parallel=True`` steps
    the parts from a thread pool with a barrier after every step -- exactly the
    synchronous baseline HTS-RL compares with (benchmarks use it for
    FastPPO/FastA2C on the same executors)."""

    def __init__(self, parts: Sequence[TensorVecEnv], parallel: bool = False):
        if not parts:
            raise ValueError("ExecutorGroupEnv: needs at least one part")
        self.parts = list(parts)
        p0 = self.parts[0]
        self.device = p0.device
        self.single_observation_space = p0.single_observation_space
        self.single_action_space = p0.single_action_space
        self.single_state_space = getattr(p0, "single_state_space", None)  # the critic's states, if any
        self.max_episode_steps = getattr(p0, "max_episode_steps", None)
        self.normalize_obs_hint = getattr(p0, "normalize_obs_hint", None)
        self.autoreset_mode = getattr(p0, "autoreset_mode", None)  # NEXT_STEP: resets one step late
        self.slices: List[slice] = []
        lo = 0
        for p in self.parts:
            self.slices.append(slice(lo, lo + p.num_envs))
            lo += p.num_envs
        self.num_envs = lo
        self._pool = ThreadPoolExecutor(len(self.parts), thread_name_prefix="hts-sync") \
            if parallel and len(self.parts) > 1 else None

    def reset(self, seed: Optional[int] = None) -> torch.Tensor:
        return torch.cat([p.reset(seed=worker_seed(seed, e)) for e, p in enumerate(self.parts)], 0)

    def step(self, actions: torch.Tensor) -> Step:
        chunks = [actions[s] for s in self.slices]
        if self._pool is None:
            outs = [p.step(a) for p, a in zip(self.parts, chunks)]
        else:
            outs = list(self._pool.map(lambda pa: pa[0].step(pa[1]), zip(self.parts, chunks)))
        return concat_steps(outs)

    @property
    def states(self) -> Optional[torch.Tensor]:
        """Every part's current critic states, concatenated (None without states)."""
        if self.single_state_space is None:
            return None
        return torch.cat([p.states for p in self.parts], 0)

    def randomize_episode_progress(self) -> None:
        for p in self.parts:
            if hasattr(p, "randomize_episode_progress"):
                p.randomize_episode_progress()

    def get_state(self) -> Optional[Dict[str, Any]]:
        states = [p.get_state() if hasattr(p, "get_state") else None for p in self.parts]
        return None if any(s is None for s in states) else {"parts": states}

    def set_state(self, state: Dict[str, Any]) -> None:
        for p, s in zip(self.parts, state["parts"]):
            p.set_state(s)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
        if len(self.parts) > 1 and any(hasattr(p, "num_workers") for p in self.parts):
            # closing a simulator process waits for its workers to exit: close the parts concurrently
            with ThreadPoolExecutor(len(self.parts), thread_name_prefix="hts-close") as pool:
                list(pool.map(lambda p: p.close(), self.parts))
            return
        for p in self.parts:
            p.close()


# ---------------------------------------------------------------------------
# sampling with an executor's generator
# ---------------------------------------------------------------------------
def sample_with(module: Any, p: torch.Tensor, log_std: Optional[torch.Tensor],
                generator: torch.Generator) -> tuple:
    """Action and log-prob from distribution parameters, drawing randomness
    from ``generator`` only (same law as ``ActorCriticModule.sample``)."""
    if log_std is None:  # categorical via Gumbel-max
        logp_all = F.log_softmax(p, dim=-1)
        u = torch.rand(p.shape, generator=generator, device=p.device, dtype=p.dtype)
        g = -torch.log(-torch.log(u.clamp_(1e-20, 1.0)))
        a = (logp_all + g).argmax(-1)
        return a, logp_all.gather(-1, a.unsqueeze(-1)).squeeze(-1)
    noise = torch.randn(p.shape, generator=generator, device=p.device, dtype=p.dtype)
    a = p + noise * log_std.exp()
    return a, module.gauss_logp(a, p, log_std)


# ---------------------------------------------------------------------------
# the runtime
# ---------------------------------------------------------------------------
class HTSRuntime:
    """Executor and actor threads serving rounds of ``alpha`` steps.

    Args:
        parts: executor ``e``'s env (``parts[e]``) and its slot range ``slices[e]``.
        obs: the shared state buffer ``[N, *obs_shape]`` (the algorithm's current
            observations); executors write their rows in place, so between
            rounds it always holds every env's current observation.
        generators: one torch Generator per executor (its sampling stream).
        num_actors: actor threads (``combining``: concurrent actor slots).
        combining: run the actor role in waiting executor threads (see
            :meth:`_await_action`) instead of dedicated actor threads.
        deterministic: fixed-shape forwards (see module docstring).
        normalize_obs: actors normalise with the behaviour snapshot's statistics.
        any_invalid: callback the first time a source reports ``valid`` masks.
        states: the shared ``[N, S]`` buffer of current critic states (asymmetric
            actor-critic; updated in place like ``obs``), or None.
    """

    def __init__(self, parts: Sequence[TensorVecEnv], slices: Sequence[slice], obs: torch.Tensor,
                 generators: Sequence[torch.Generator], num_actors: int, deterministic: bool,
                 normalize_obs: bool, dist_shape: tuple, any_invalid=None, poll_s: float = 0.05,
                 combining: bool = False, states: Optional[torch.Tensor] = None):
        self.parts, self.slices, self.obs, self.states = list(parts), list(slices), obs, states
        self.generators = list(generators)
        self.E = len(self.parts)
        self.deterministic, self.normalize_obs = bool(deterministic), bool(normalize_obs)
        self.poll_s = poll_s
        self._on_invalid = any_invalid
        n = obs.shape[0]
        self.p_buf = torch.zeros((n, *dist_shape), device=obs.device)
        self.ls_buf = torch.zeros((n, *dist_shape), device=obs.device)
        self._rows = [torch.arange(s.start, s.stop, device=obs.device) for s in self.slices]
        # state buffer flags (guarded by _state_cond)
        self._state_cond = threading.Condition()
        self._ready = [False] * self.E
        self._act_events = [threading.Event() for _ in range(self.E)]
        # rounds (guarded by _round_cond)
        self._round_cond = threading.Condition()
        self._round_id = 0
        self._done = 0
        self._storage = None
        self._alpha = 0
        self.behaviour = None
        self._stop = threading.Event()
        self.error: Optional[BaseException] = None
        # per-round timing (each executor writes only its own slot)
        self.busy_s = [0.0] * self.E
        self.act_wait_s = [0.0] * self.E
        self.steps_done = [0] * self.E   # env steps of each executor so far (its own slot): progress
        self.forwards = 0
        self.served = 0
        self.actor_busy_s = 0.0
        self._threads = [threading.Thread(target=self._guard, args=(self._executor, e), daemon=True,
                                          name=f"hts-executor-{e}") for e in range(self.E)]
        self.combining = bool(combining)
        self._actor_slots = threading.Semaphore(int(num_actors))
        if not self.combining:
            self._threads += [threading.Thread(target=self._guard, args=(self._actor, a), daemon=True,
                                               name=f"hts-actor-{a}") for a in range(int(num_actors))]
        for t in self._threads:
            t.start()

    # -- learner side --------------------------------------------------------------
    def start_round(self, storage: Any, behaviour: Any, alpha: int) -> None:
        """Release the executors for ``alpha`` steps into ``storage`` with the
        ``behaviour`` snapshot (the sync point: parameters change only here)."""
        self._check()
        self.busy_s = [0.0] * self.E
        self.act_wait_s = [0.0] * self.E
        self.forwards = self.served = 0
        self.actor_busy_s = 0.0
        with self._round_cond:
            self._storage, self._alpha, self.behaviour = storage, int(alpha), behaviour
            self._done = 0
            self._round_id += 1
            self._round_cond.notify_all()

    def wait_round(self, timeout_s: float) -> None:
        """Block until every executor finished the round (the barrier).
        ``timeout_s`` bounds the time *without progress* (no executor took an env
        step), not the round: a slow simulator with a long round is healthy."""
        deadline = time.monotonic() + timeout_s
        progress = -1
        with self._round_cond:
            while self._done < self.E:
                self._check()
                now, seen = time.monotonic(), sum(self.steps_done)
                if seen != progress:
                    progress, deadline = seen, now + timeout_s
                elif now > deadline:
                    raise TimeoutError(f"HTS: executors made no progress for {timeout_s}s "
                                       f"({self._done}/{self.E} finished the round)")
                self._round_cond.wait(self.poll_s)
        self._check()

    def _check(self) -> None:
        if self.error is not None:
            raise RuntimeError(f"HTS worker thread failed: {self.error!r}") from self.error
        if self._stop.is_set():
            raise HTSStopped("HTS runtime was closed")

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop every thread (safe from any thread, idempotent)."""
        self._stop.set()
        with self._round_cond:
            self._round_cond.notify_all()
        with self._state_cond:
            self._state_cond.notify_all()
        for ev in self._act_events:
            ev.set()
        deadline = time.monotonic() + timeout_s
        for t in self._threads:
            if t is not threading.current_thread():
                t.join(max(0.0, deadline - time.monotonic()))

    @property
    def alive(self) -> bool:
        return any(t.is_alive() for t in self._threads)

    # -- threads ---------------------------------------------------------------------
    def _guard(self, fn, i: int) -> None:
        try:
            with torch.no_grad():
                fn(i)
        except HTSStopped:
            pass
        except BaseException as exc:  # surfaced to the learner by _check()
            if self.error is None:
                self.error = exc
            self._stop.set()
            with self._round_cond:
                self._round_cond.notify_all()

    def _executor(self, e: int) -> None:
        env, sl, gen = self.parts[e], self.slices[e], self.generators[e]
        ev = self._act_events[e]
        seen = 0
        while True:
            with self._round_cond:
                while self._round_id == seen:
                    if self._stop.is_set():
                        return
                    self._round_cond.wait(self.poll_s)
                seen = self._round_id
                st, alpha, module = self._storage, self._alpha, self.behaviour
            busy = wait = 0.0
            for t in range(alpha):
                t0 = time.perf_counter()
                with self._state_cond:              # publish rows [lo, hi) to the state buffer
                    self._ready[e] = True
                    self._state_cond.notify()
                self._await_action(e)
                ev.clear()
                if self._stop.is_set():
                    raise HTSStopped()
                t1 = time.perf_counter()
                wait += t1 - t0
                p = self.p_buf[sl]
                log_std = None if module.discrete else self.ls_buf[sl]
                action, logp = sample_with(module, p, log_std, gen)
                obs = self.obs[sl]
                st["obs"][t, sl].copy_(obs.reshape(obs.shape[0], -1))
                if self.states is not None:   # raw; the learner normalises the batch
                    st["states"][t, sl].copy_(self.states[sl])
                step = env.step(module.to_env_action(action))
                if step.valid is not None:
                    st["valid"][t, sl].copy_(step.valid)
                    if self._on_invalid is not None:
                        self._on_invalid()
                else:
                    st["valid"][t, sl].fill_(True)
                st["final_obs"][t, sl].copy_(step.final_obs.reshape(step.final_obs.shape[0], -1))
                st["actions"][t, sl].copy_(action)
                st["logp"][t, sl].copy_(logp)
                st["rewards"][t, sl].copy_(step.reward)
                st["terminated"][t, sl].copy_(step.terminated)
                st["done"][t, sl].copy_(step.terminated | step.truncated)
                obs.copy_(step.obs)
                if self.states is not None:
                    st["final_states"][t, sl].copy_(final_states(step))
                    self.states[sl].copy_(step_states(step))
                self.steps_done[e] += 1
                busy += time.perf_counter() - t1
            self.busy_s[e], self.act_wait_s[e] = busy, wait
            with self._round_cond:
                self._done += 1
                self._round_cond.notify_all()

    def _actor(self, a: int) -> None:
        """A dedicated actor thread: sleep until observations are published, serve them."""
        while True:
            with self._state_cond:
                while not any(self._ready):
                    if self._stop.is_set():
                        return
                    self._state_cond.wait(self.poll_s)
            self._serve()

    def _serve(self) -> bool:
        """The actor's job once: take every published, unserved observation
        group, one batched forward with the round's behaviour snapshot, hand
        back distribution parameters. Returns False if nothing was ready."""
        with self._state_cond:
            ready = [e for e in range(self.E) if self._ready[e]]
            for e in ready:
                self._ready[e] = False
        if not ready:
            return False
        t0 = time.perf_counter()
        n = self.obs.shape[0]
        module = self.behaviour
        if self.deterministic:
            p, log_std = module.dist_params(self._normalize(module, self.obs.reshape(n, -1)))
            for e in ready:
                sl = self.slices[e]
                self.p_buf[sl].copy_(p[sl])
                if log_std is not None:
                    self.ls_buf[sl].copy_(log_std[sl])
        else:
            idx = torch.cat([self._rows[e] for e in ready]) if len(ready) > 1 else self._rows[ready[0]]
            obs = self.obs.index_select(0, idx)
            p, log_std = module.dist_params(self._normalize(module, obs.reshape(obs.shape[0], -1)))
            self.p_buf.index_copy_(0, idx, p)
            if log_std is not None:
                self.ls_buf.index_copy_(0, idx, log_std.contiguous())
        for e in ready:
            self._act_events[e].set()
        self.forwards += 1
        self.served += len(ready)
        self.actor_busy_s += time.perf_counter() - t0
        return True

    def _await_action(self, e: int) -> None:
        """Executor ``e`` waits until its published observations were served.

        ``combining`` mode: instead of waking a dedicated actor thread (a
        thread hand-off per step, which dominates on a busy machine), a waiting
        executor takes one of ``num_actors`` actor slots and does the actor's
        job for everything published (flat combining). Ordering argument: an
        executor publishes *before* trying a slot, and a slot holder re-checks
        the state buffer *after* releasing, so no published group is left
        unserved; the short wait timeout is only a safety net."""
        ev = self._act_events[e]
        if not self.combining:
            while not ev.wait(self.poll_s):
                if self._stop.is_set():
                    raise HTSStopped()
            return
        slots = self._actor_slots
        while not ev.is_set():
            if self._stop.is_set():
                raise HTSStopped()
            if slots.acquire(blocking=False):
                try:
                    while self._serve():
                        pass
                finally:
                    slots.release()
                while any(self._ready) and slots.acquire(blocking=False):
                    try:
                        self._serve()
                    finally:
                        slots.release()
            else:
                ev.wait(0.002)

    def _normalize(self, module: Any, obs: torch.Tensor) -> torch.Tensor:
        return module.policy_input(obs)  # the snapshot's own rule, as training and inference use
