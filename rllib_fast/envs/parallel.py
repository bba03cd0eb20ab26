"""CPU simulators in worker processes behind the tensor vector-env contract.

Stooke & Abbeel, "Accelerated Methods for Deep RL" (2018), §4.1: several
simulator *processes*, each stepping several simulator instances in sequence;
one batched inference per step in the main process; communication through
system shared-memory arrays; optionally two **alternating groups** of
processes with independent barriers, so inference for one group overlaps the
simulation of the other.

Classes and helpers:

* :class:`ParallelVecEnv` ``(make_env_fn, num_envs, num_workers, device, seed,
  affinity)`` -- a :class:`~rllib_fast.envs.base.TensorVecEnv` whose ``num_envs``
  envs live in ``num_workers`` processes, ``num_envs // num_workers`` per
  process, each process holding one single-process CPU source
  ``make_env_fn(num_envs_per_worker, worker_seed(seed, w))`` (e.g. a
  :class:`~rllib_fast.envs.minatar.MinAtarVecEnv`). Usual form:
  ``ParallelVecEnv.from_name("minatar:breakout", num_envs=16, num_workers=2, seed=0)``.
* :class:`~rllib_fast.envs.alternating.AlternatingVecEnv` -- the same with ``num_groups=2``: envs ``[0, N/2)``
  are group A, ``[N/2, N)`` group B, each group served by its own workers and
  synchronised independently (``step_async_group`` / ``wait_group``).
* ``alternating_steps`` / ``alternating_rollout`` (in :mod:`rllib_fast.envs.alternating`) -- the driver loop
  that alternates inference and simulation between the groups.
* :class:`SerialVecEnv` -- the in-process reference: the same partition and the
  same per-worker seeds, stepped one source after the other. For the same
  seeds and actions it returns exactly the transitions of the parallel envs
  (tested); use it to debug a parallel run without processes.
* :func:`worker_seed` -- the seed of worker ``w``'s source.
* :class:`ParallelEnvCreator` -- ``config.environment(ParallelEnvCreator(
  "minatar:breakout", num_workers=2))`` runs an algorithm's envs in processes.

How the sync step works (one round trip per step): the main process writes the
actions into a shared-memory array, sets each worker's command word and
releases its *command* semaphore; each worker steps its source, writes obs,
reward, flags, final_obs, extras and (for an asymmetric source) its current
critic states into its rows of the shared arrays and
releases its *done* semaphore; the main process acquires the done semaphores of
all workers of the group (that set is the group's barrier) and **copies** the
rows out, so a returned ``Step`` never aliases a buffer the next step
overwrites. ``final_obs`` is transferred only for workers whose source returned
a ``final_obs`` that is not its ``obs`` tensor (MinAtar / Atari return the
same tensor when no env ended); when no worker of the call did, ``final_obs``
*is* the returned ``obs`` tensor, as in the sources themselves.

Alternating groups, and how an algorithm uses them::

    env = AlternatingVecEnv.from_name("minatar:breakout", num_envs=32, num_workers=2, seed=0)
    obs = None
    for it in range(iters):
        with torch.no_grad():
            groups = alternating_rollout(env, policy_fn, num_steps=T, obs=obs)
        obs = [g.next_obs for g in groups]          # continue from here next time
        batch = concat_groups(groups)               # [T, N, ...] in env order
        learner.update(batch)                       # both groups idle: the
                                                    # "optimisation pause"

``policy_fn(obs_g, g)`` returns the actions of group ``g`` (``[n_g, ...]``), or
``(actions, dict_of_tensors)`` to keep per-step policy outputs (log-probs,
values) next to the transitions (``GroupRollout.policy_extras``). Inside a
rollout the loop is ``wait(A) -> act(A) -> send(A) -> wait(B) -> act(B) ->
send(B) -> ...``: while the main process runs inference for A, group B's
workers simulate, and vice versa; the policy parameters only change between
rollouts, so both groups act with the same parameters (on-policy data stays
on-policy). Off-policy learners that insert every step can iterate
:func:`alternating_steps` instead, which yields ``(g, obs, actions, step,
policy_extras)`` per group step. Each call ends with both groups idle, so the
learner's update never competes with the simulators for the cores.

The win, in step-time terms, with ``sim`` = one worker stepping its envs and
``inf(n)`` = inference on a batch of ``n``: serial = ``sim(N) + inf(N)``;
sync parallel with ``W`` workers = ``sim(N/W) + inf(N)`` + IPC; alternating
(two groups) ~ ``max(sim(N/2W) + inf(N/2), 2 inf(N/2))`` + IPC, i.e. the
quicker of simulation and inference is hidden. On a machine with few cores
the minimum useful layout is 2 groups x 1 process per simulator core (one
process of each group per core, paper: "at least 2 simulators per core");
``affinity="auto"`` pins worker ``j`` of every group to core ``j``.

Decisions:

* **Processes** are started with the ``spawn`` context (default; ``forkserver``
  accepted and much quicker when many envs are created, e.g. in sweeps -- it
  leaves its server process running until exit, which is why it is not the
  default). ``fork`` is accepted for one case: a process that has already
  imported and built the source once (FastPPO's ``learn_while_stepping`` puts
  its simulator in a forked worker: a spawned one would import mjlab again,
  seconds of a core, where the fork inherits it). The child then runs the source's CPU
  code with one torch intra-op thread and touches none of the parent's other
  state (Ray's threads), as torch's DataLoader workers do; fork is not the
  default because a source that starts threads or OpenMP pools at import
  would inherit them half-copied. A spawned worker
  unpickles ``make_env_fn`` (so it must be picklable: a module-level function,
  ``functools.partial`` or :class:`NamedEnvFactory`; lambdas are not), sets
  ``torch.set_num_threads(1)``, ignores SIGINT (the main process owns
  shutdown) and exits on its own if the main process dies.
* **Workers always simulate on CPU**; the main process copies each step out of
  shared memory and moves it to ``device`` (one ``.to(device)`` per field).
* **Partition**: worker ``w`` owns envs ``[w*n_w, (w+1)*n_w)``, ``n_w =
  num_envs // num_workers`` (``num_envs`` must be a multiple of ``num_workers``
  and ``num_workers`` of ``num_groups``); group ``g`` owns the workers
  ``[g*W/G, (g+1)*W/G)`` and hence a contiguous range of envs.
* **Seeds**: worker ``w``'s source is built with ``worker_seed(seed, w)``
  (``core.seeding.derive_seed(seed, w)``; None stays None), and
  ``reset(seed=s)`` resets it with ``worker_seed(s, w)``; results are therefore
  reproducible for a given ``(seed, num_workers)`` but differ from one
  ``N``-env source built with ``seed``. :class:`SerialVecEnv` reproduces them.
* **Extras**: worker 0 builds a throw-away 1-env source and steps it once to
  learn the extras' keys, dtypes and shapes (and the obs dtype), so that
  ``Step.extras`` (e.g. Atari's ``raw_reward``/``real_done``) cross the process
  boundary too. ``probe=False`` skips that (extras are then dropped and the obs
  dtype is the observation space's).
* **valid** is None when every worker's source returned None, else the
  concatenation (None rows = True).
* **Failures**: an exception in a worker is sent back with its traceback and
  raised as :class:`WorkerError` by the call that waits on it; a worker that
  dies (killed, segfault) is detected within ``poll_s`` and raises
  :class:`WorkerError` naming it and its exit code. The env is unusable after
  either (``close()`` still works). ``step_timeout`` (None = wait forever)
  bounds one wait.
* **Shutdown**: ``close()`` (also run by ``__del__``/garbage collection and at
  interpreter exit through ``weakref.finalize``) asks every worker to exit,
  joins it, terminates/kills stragglers, and unlinks the shared memory.
* ``get_state``/``set_state`` gather/scatter the sources' states over each
  worker's pipe (``None`` if any source returns None).
* **Frame stacking**: keep it out of the workers -- parallelise the raw frames
  (e.g. ``from_name("atari:Pong", frame_stack=1)``) and wrap the parallel env in
  :class:`~rllib_fast.envs.frame_stack.FrameStack` in the main process, which
  moves 4x fewer bytes through shared memory.
"""
from __future__ import annotations

import multiprocessing as mp
import time
import weakref
from multiprocessing import resource_tracker, shared_memory
from typing import Any, Dict, List, Optional, Sequence

import gymnasium as gym
import numpy as np
import torch

from .base import Step, TensorVecEnv, canonical_device, check_num_envs, concat_steps, env_share
from .workers import (CMD_EPISODE_METRICS, CMD_GET_STATE, CMD_RANDOMIZE_CLOCKS, CMD_RESET, CMD_SET_STATE,
                      CMD_STEP, MakeEnvFn, SharedLayout, WorkerError, WorkerResources, resolve_affinity,
                      spin_acquire, worker_main)
from ..core.seeding import worker_seed
from ..core.threads import reserve_cores

#: process start methods a ParallelVecEnv takes (``context``)
CONTEXTS = ("spawn", "forkserver", "fork")

__all__ = ["ParallelVecEnv", "SerialVecEnv", "NamedEnvFactory", "ParallelEnvCreator", "WorkerError", "worker_seed"]


class NamedEnvFactory:
    """Picklable ``make_env_fn`` for a registry name:
    ``NamedEnvFactory("minatar:breakout", sticky_action_prob=0.0)(n, seed)`` ==
    ``make("minatar:breakout", num_envs=n, device="cpu", seed=seed, ...)``."""

    def __init__(self, name: str, **task_kwargs: Any):
        self.name = name
        self.task_kwargs = dict(task_kwargs)

    def __call__(self, num_envs: int, seed: Optional[int]) -> TensorVecEnv:
        from .registry import make

        return make(self.name, num_envs=num_envs, device="cpu", seed=seed, **self.task_kwargs)

    def __repr__(self) -> str:
        kw = "".join(f", {k}={v!r}" for k, v in self.task_kwargs.items())
        return f"NamedEnvFactory({self.name!r}{kw})"


class ParallelEnvCreator:
    """Picklable env creator for ``config.environment(...)``: called with the
    algorithm's env context (``num_envs``, ``device``, ``seed`` + task kwargs)
    it returns ``cls.from_name(name, ...)``, e.g.
    ``FastDQNConfig().environment(ParallelEnvCreator("minatar:breakout", num_workers=2))``.
    ``cls`` may be :class:`AlternatingVecEnv` (then the algorithm's own
    ``step()`` loop is correct but does not alternate). ``sampler_kwargs`` go
    to the constructor (``affinity``, ``context``, ...)."""

    def __init__(self, name: str, num_workers: int, cls: Optional[type] = None, **sampler_kwargs: Any):
        self.name, self.num_workers, self.cls = name, int(num_workers), cls
        self.sampler_kwargs = dict(sampler_kwargs)

    def __call__(self, ctx: Any) -> "ParallelVecEnv":
        ctx = dict(ctx)
        cls = self.cls or ParallelVecEnv
        task = {k: v for k, v in ctx.items() if k not in ("num_envs", "device", "seed")}
        return cls.from_name(self.name, int(ctx.get("num_envs", self.num_workers)), self.num_workers,
                             device=ctx.get("device", "cpu"), seed=ctx.get("seed"), env_kwargs=task,
                             **self.sampler_kwargs)


class ParallelVecEnv(TensorVecEnv):
    """``num_envs`` CPU envs simulated in ``num_workers`` processes (see the
    module docstring for the protocol and the decisions).

    Args:
        make_env_fn: picklable ``(num_envs_per_worker, seed) -> TensorVecEnv`` on CPU.
        num_envs: total number of envs ``N`` (a multiple of ``num_workers``).
        num_workers: simulator processes.
        device: device of every returned tensor.
        seed: base seed; worker ``w``'s source gets ``worker_seed(seed, w)``.
        affinity: None (no pinning), ``"auto"`` (worker ``j`` of each group on
            core ``j`` of this process's allowed cores, modulo their count) or
            one core / list of cores per worker (``os.sched_setaffinity``). The
            main process is never pinned.
        num_groups: groups with independent barriers (1 = plain sync sampler;
            see :class:`AlternatingVecEnv`).
        context: ``"spawn"``, ``"forkserver"`` or ``"fork"``. A spawned worker imports
            torch and rllib_fast itself (seconds: ``import rllib_fast`` registers with Ray
            Tune); a forkserver worker is forked from a server that imported them
            once (``forkserver_preload``), so later envs start in milliseconds,
            but the server process stays alive (idle) until this process exits;
            a forked worker is a copy of this process (the source's modules
            already imported; see the decisions above for when that is safe).
        probe: learn the extras/obs dtype from a throw-away 1-env source.
        step_timeout: seconds one wait may take before ``TimeoutError`` (None = no limit).
        poll_s: how often a wait checks that the workers are alive.
        start_timeout: seconds to wait for the workers to build their sources.
        spin_s / worker_spin_s: before blocking on a semaphore, the main process /
            a worker polls it for up to this long, yielding the core between
            polls (0 = block at once, the default). Waking a sleeping process
            costs tens of microseconds on VMs, so spinning (e.g. ``1e-3`` for both)
            shortens a round trip of a cheap env at the price of busy cores --
            worth it only on a dedicated machine.

    Group API: ``num_groups``, ``group_slices`` (env range of each group),
    ``group_num_envs``, ``step_async_group(g, actions)``, ``wait_group(g) -> Step``
    (the group's rows only). ``step_async(actions)`` / ``step_wait()`` do the same
    for all envs; ``step`` = both.
    """

    def __init__(self, make_env_fn: MakeEnvFn, num_envs: int, num_workers: int, device: Any = "cpu",
                 seed: Optional[int] = None, affinity: Any = None, *, num_groups: int = 1,
                 context: str = "spawn", probe: bool = True, step_timeout: Optional[float] = None,
                 poll_s: float = 0.25, start_timeout: float = 300.0, spin_s: float = 0.0,
                 worker_spin_s: float = 0.0, forkserver_preload: Sequence[str] = ("rllib_fast.envs.parallel",)):
        self._res = res = WorkerResources()
        self._finalizer = weakref.finalize(self, res.shutdown)
        self._broken: Optional[str] = None
        self.num_envs = n = check_num_envs(num_envs)
        self.num_workers = W = int(num_workers)
        self.num_groups = G = int(num_groups)
        if W < 1 or G < 1:
            raise ValueError(f"num_workers and num_groups must be >= 1, got {num_workers}, {num_groups}")
        if W % G:
            raise ValueError(f"{type(self).__name__}: `num_workers` = {W} must be divisible by `num_groups` = {G}")
        nw = env_share(n, W, "num_workers", type(self).__name__)
        if context not in CONTEXTS:
            raise ValueError(f"context must be one of {', '.join(map(repr, CONTEXTS))}, got {context!r}")
        self.device = canonical_device(device)
        self.envs_per_worker = nw
        self.workers_per_group = wg = W // G
        self.seed = seed
        self.step_timeout = step_timeout
        self.poll_s = float(poll_s)
        self.spin_s, self.worker_spin_s = float(spin_s), float(worker_spin_s)
        self.make_env_fn = make_env_fn
        self.group_num_envs = n // G
        self.group_slices = [slice(g * wg * nw, (g + 1) * wg * nw) for g in range(G)]
        self.group_workers = [list(range(g * wg, (g + 1) * wg)) for g in range(G)]
        self.worker_slices = [slice(w * nw, (w + 1) * nw) for w in range(W)]
        self.affinity = resolve_affinity(affinity, W, G)
        self._pending = [False] * G

        ctx = mp.get_context(context)
        if context == "fork":
            # the shared memory is created after the workers start: start the resource tracker
            # first, so forked workers attach through this process's tracker (as spawned ones
            # do) instead of each starting its own, which would unlink the block as "leaked"
            # when the worker exits
            resource_tracker.ensure_running()
        child_conns = []
        if context == "forkserver" and forkserver_preload:
            # import torch/rllib_fast once in the server, fork workers from it (takes effect
            # when the server starts, i.e. for the first forkserver env of this process)
            ctx.set_forkserver_preload(list(forkserver_preload))
        for w in range(W):
            parent_conn, child_conn = ctx.Pipe(duplex=True)
            cmd_sem, done_sem = ctx.Semaphore(0), ctx.Semaphore(0)
            p = ctx.Process(target=worker_main, name=f"rllib_fast-sim-{w}", daemon=True,
                            args=(w, make_env_fn, nw, worker_seed(seed, w), child_conn, cmd_sem, done_sem,
                                  self.affinity[w], bool(probe) and w == 0, self.worker_spin_s))
            res.procs.append(p)
            res.conns.append(parent_conn)
            res.cmd_sems.append(cmd_sem)
            res.done_sems.append(done_sem)
            child_conns.append(child_conn)
        res.cores = reserve_cores(W)   # the learner here keeps the cores the workers leave
        try:
            for p, c in zip(res.procs, child_conns):
                p.start()
                c.close()  # the worker holds the other end now: its death closes the pipe
            infos = [self._recv(w, "ready", start_timeout) for w in range(W)]
            self._setup(infos)
            for w in range(W):
                self._recv(w, "attached", start_timeout)
        except BaseException:
            self.close()
            raise

    @classmethod
    def from_name(cls, name: str, num_envs: int, num_workers: int, device: Any = "cpu",
                  seed: Optional[int] = None, affinity: Any = None, *, env_kwargs: Optional[Dict[str, Any]] = None,
                  **kwargs: Any) -> "ParallelVecEnv":
        """``cls(NamedEnvFactory(name, **env_kwargs), ...)``; other kwargs go to the
        constructor (``num_groups``, ``context``, ...). Keyword arguments that the
        constructor does not know are taken as task kwargs too."""
        import inspect

        own = set(inspect.signature(ParallelVecEnv.__init__).parameters)
        task = dict(env_kwargs or {})
        task.update({k: kwargs.pop(k) for k in list(kwargs) if k not in own})
        return cls(NamedEnvFactory(name, **task), num_envs, num_workers, device=device, seed=seed,
                   affinity=affinity, **kwargs)

    # -- setup ------------------------------------------------------------------
    def _recv(self, w: int, kind: str, timeout: Optional[float]) -> Any:
        conn, p = self._res.conns[w], self._res.procs[w]
        deadline = None if timeout is None else time.monotonic() + timeout
        while not conn.poll(self.poll_s):
            if not p.is_alive():
                if conn.poll(0):
                    break
                raise self._fail(f"simulator worker {w} (pid {p.pid}) died with exit code {p.exitcode} "
                                 f"before sending {kind!r}")
            if deadline is not None and time.monotonic() > deadline:
                raise self._fail(f"simulator worker {w} sent no {kind!r} within {timeout} s",
                                 exc=TimeoutError)
        try:
            msg = conn.recv()
        except EOFError:
            raise self._fail(f"simulator worker {w} (pid {p.pid}) closed its pipe (exit code {p.exitcode})")
        if msg[0] == "error":
            raise self._fail(f"simulator worker {w} (pid {p.pid}) raised:\n{msg[1]}")
        if msg[0] != kind:
            raise self._fail(f"simulator worker {w}: expected {kind!r}, got {msg[0]!r}")
        return msg[1]

    def _setup(self, infos: List[Dict[str, Any]]) -> None:
        i0 = infos[0]
        for w, i in enumerate(infos[1:], 1):
            if (i["obs_space"] != i0["obs_space"] or i["act_space"] != i0["act_space"]):
                raise self._fail(f"worker {w}'s source has spaces {i['obs_space']}, {i['act_space']}; "
                                 f"worker 0's: {i0['obs_space']}, {i0['act_space']}")
        self.worker_pids = [i["pid"] for i in infos]
        self.single_observation_space = obs_space = i0["obs_space"]
        self.single_action_space = act_space = i0["act_space"]
        if not isinstance(obs_space, gym.spaces.Box):
            raise self._fail(f"ParallelVecEnv needs a Box observation space, got {obs_space!r}")
        self.max_episode_steps = i0["max_episode_steps"]
        self.normalize_obs_hint = i0.get("normalize_obs_hint")
        # a source that resets one step late says so (NEXT_STEP); wrappers and the
        # gymnasium bridge read it to handle its `valid=False` straddling steps
        self.autoreset_mode = i0.get("autoreset_mode")
        # the critic's privileged states (asymmetric actor-critic), mirrored like obs
        self.single_state_space = i0.get("state_space")
        # sources with their own episode statistics (envpool's reward terms): read per log, see episode_metrics
        self._metrics_workers = [w for w, i in enumerate(infos) if i.get("episode_metrics")]
        spec = i0["spec"]
        obs_dtype = np.dtype(spec["obs_dtype"]) if spec else np.dtype(obs_space.dtype)
        extras = spec["extras"] if spec else {}
        n, W = self.num_envs, self.num_workers
        shape = tuple(obs_space.shape)
        lay = SharedLayout()
        if isinstance(act_space, gym.spaces.Discrete):
            lay.add("actions", (n,), np.int64)
        else:
            lay.add("actions", (n, *act_space.shape), np.float32)
        lay.add("obs", (n, *shape), obs_dtype)
        lay.add("final", (n, *shape), obs_dtype)
        lay.add("reward", (n,), np.float32)
        for f in ("terminated", "truncated", "valid"):
            lay.add(f, (n,), np.bool_)
        for k, (s, dt) in extras.items():
            lay.add("x_" + k, (n, *s), dt)
        if self.single_state_space is not None:
            lay.add("states", (n, *self.single_state_space.shape), np.float32)
        lay.add("cmd", (W,), np.int32)
        lay.add("seed", (W,), np.int64)
        for f in ("has_seed", "has_final", "valid_none", "status"):
            lay.add(f, (W,), np.int8)
        for f in ("busy_s", "cpu_s"):
            lay.add(f, (W,), np.float64)
        res = self._res
        res.shm = shared_memory.SharedMemory(create=True, size=lay.size)
        res.views = self._v = lay.views(res.shm.buf)
        self._v["valid"][:] = True
        self._extra_keys = list(extras)
        for w in range(W):
            sl = self.worker_slices[w]
            res.conns[w].send(("attach", res.shm.name, lay, sl.start, sl.stop, self._extra_keys))

    # -- low level ----------------------------------------------------------------
    def _fail(self, msg: str, exc: type = WorkerError) -> BaseException:
        """Mark the env broken and return the exception to raise."""
        if self._broken is None:
            self._broken = msg
        return exc(msg)

    def _check_usable(self) -> None:
        if self._broken is not None:
            raise WorkerError(f"ParallelVecEnv is unusable after an earlier failure: {self._broken}")
        if not self._res.procs:
            raise WorkerError("ParallelVecEnv is closed")

    def _send(self, workers: Sequence[int], cmd: int) -> None:
        c, sems = self._v["cmd"], self._res.cmd_sems
        for w in workers:
            c[w] = cmd
        for w in workers:
            sems[w].release()

    def _wait(self, workers: Sequence[int]) -> None:
        res, status = self._res, self._v["status"]
        poll = self.poll_s
        spin = self.spin_s
        for w in workers:
            sem = res.done_sems[w]
            if not spin_acquire(sem, spin) and not sem.acquire(timeout=poll):
                deadline = None if self.step_timeout is None else time.monotonic() + self.step_timeout - poll
                while not sem.acquire(timeout=poll):
                    p = res.procs[w]
                    if not p.is_alive():
                        if sem.acquire(block=False):
                            break
                        raise self._fail(f"simulator worker {w} (pid {p.pid}, envs "
                                         f"[{self.worker_slices[w].start}:{self.worker_slices[w].stop}]) "
                                         f"died with exit code {p.exitcode}")
                    if deadline is not None and time.monotonic() > deadline:
                        raise self._fail(f"simulator worker {w} did not answer within "
                                         f"{self.step_timeout} s", exc=TimeoutError)
            if status[w]:
                msg = "(no message)"
                conn = res.conns[w]
                try:
                    if conn.poll(5.0):
                        m = conn.recv()
                        msg = m[1] if m[0] == "error" else repr(m)
                except (EOFError, OSError):
                    pass
                raise self._fail(f"simulator worker {w} (pid {res.procs[w].pid}) raised:\n{msg}")

    def _out(self, t: torch.Tensor) -> torch.Tensor:
        return t if self.device.type == "cpu" else t.to(self.device)

    def _collect(self, lo: int, hi: int, workers: Sequence[int]) -> Step:
        """Copy rows ``[lo, hi)`` (those of ``workers``) out of shared memory."""
        v = self._v
        out = self._out
        obs = out(torch.from_numpy(v["obs"][lo:hi].copy()))
        reward = out(torch.from_numpy(v["reward"][lo:hi].copy()))
        term = out(torch.from_numpy(v["terminated"][lo:hi].copy()))
        trunc = out(torch.from_numpy(v["truncated"][lo:hi].copy()))
        has_final, valid_none = v["has_final"], v["valid_none"]
        with_final = [w for w in workers if has_final[w]]
        if with_final:
            final_np = v["obs"][lo:hi].copy()
            for w in with_final:
                sl = self.worker_slices[w]
                final_np[sl.start - lo:sl.stop - lo] = v["final"][sl]
            final = out(torch.from_numpy(final_np))
        else:
            final = obs
        valid = None
        if not all(valid_none[w] for w in workers):
            valid = out(torch.from_numpy(v["valid"][lo:hi].copy()))
        extras = {k: out(torch.from_numpy(v["x_" + k][lo:hi].copy())) for k in self._extra_keys}
        return Step(obs=obs, reward=reward, terminated=term, truncated=trunc, final_obs=final,
                    valid=valid, extras=extras)

    def _write_actions(self, lo: int, hi: int, actions: Any) -> None:
        dst = self._v["actions"][lo:hi]
        if isinstance(actions, torch.Tensor):
            a = actions.detach()
            if a.device.type != "cpu":
                a = a.cpu()
            a = a.numpy()
        else:
            a = np.asarray(actions)
        if a.size != dst.size:
            raise ValueError(f"expected {dst.shape[0]} actions (shape {tuple(dst.shape)}), got shape {a.shape}")
        np.copyto(dst, a.reshape(dst.shape), casting="unsafe")
        if dst.dtype == np.int64:
            nA = self.single_action_space.n
            start = int(self.single_action_space.start)
            if dst.size and (dst.min() < start or dst.max() >= start + nA):
                raise ValueError(f"actions out of range [{start}, {start + nA}): "
                                 f"min {dst.min()}, max {dst.max()}")

    # -- group API ------------------------------------------------------------------
    def step_async_group(self, g: int, actions: Any) -> None:
        """Write group ``g``'s actions (``[group_num_envs, ...]``) and start its workers."""
        self._check_usable()
        if self._pending[g]:
            raise RuntimeError(f"group {g} already has a step in flight; call wait_group({g}) first")
        sl = self.group_slices[g]
        self._write_actions(sl.start, sl.stop, actions)
        self._send(self.group_workers[g], CMD_STEP)
        self._pending[g] = True

    def wait_group(self, g: int) -> Step:
        """Wait for group ``g``'s workers (only those) and return its rows' Step."""
        self._check_usable()
        if not self._pending[g]:
            raise RuntimeError(f"group {g} has no step in flight; call step_async_group({g}, actions) first")
        self._pending[g] = False
        self._wait(self.group_workers[g])
        sl = self.group_slices[g]
        return self._collect(sl.start, sl.stop, self.group_workers[g])

    def step_async(self, actions: Any) -> None:
        """Start a step of all envs (every group)."""
        self._check_usable()
        if any(self._pending):
            raise RuntimeError("a step is already in flight")
        self._write_actions(0, self.num_envs, actions)
        self._send(range(self.num_workers), CMD_STEP)
        self._pending = [True] * self.num_groups

    def step_wait(self) -> Step:
        self._check_usable()
        if not all(self._pending):
            raise RuntimeError("step_wait() needs a step_async() of all envs in flight")
        self._pending = [False] * self.num_groups
        self._wait(range(self.num_workers))
        return self._collect(0, self.num_envs, range(self.num_workers))

    # -- contract ---------------------------------------------------------------------
    def step(self, actions: Any) -> Step:
        self.step_async(actions)
        return self.step_wait()

    def reset(self, seed: Optional[int] = None) -> torch.Tensor:
        self._check_usable()
        if any(self._pending):
            raise RuntimeError("reset() while a step is in flight; wait for it first")
        v = self._v
        for w in range(self.num_workers):
            s = worker_seed(seed, w)
            v["has_seed"][w] = s is not None
            v["seed"][w] = 0 if s is None else s
        workers = range(self.num_workers)
        self._send(workers, CMD_RESET)
        self._wait(workers)
        return self._out(torch.from_numpy(v["obs"].copy()))

    def get_state(self) -> Optional[Dict[str, Any]]:
        self._check_usable()
        workers = range(self.num_workers)
        self._send(workers, CMD_GET_STATE)
        states = [self._recv(w, "state", self.step_timeout) for w in workers]
        self._wait(workers)
        if any(s is None for s in states):
            return None
        return {"workers": states}

    @property
    def states(self) -> Optional[torch.Tensor]:
        """The sources' current critic states ``[N, ...]`` (a copy), or None when
        the source has none. The workers refresh them after every reset, step
        and ``set_state``, so they are exact between steps."""
        if self.single_state_space is None:
            return None
        self._check_usable()
        if any(self._pending):
            raise RuntimeError("states read while a step is in flight; wait for it first")
        return self._out(torch.from_numpy(self._v["states"].copy()))

    def episode_metrics(self) -> Dict[str, float]:
        """The sources' own per-episode statistics since the last call (``episode_metrics()`` of each
        worker's source, e.g. envpool's reward-term means, which the algorithms' episode logging
        reads once per iteration): a key's value is the mean over the workers that report it, exact
        with one worker (``learn_while_stepping``'s simulator process); with several each worker's
        mean counts once. While a step is in flight it returns ``{}`` and the sources keep
        accumulating for the next call (a command cannot interrupt a step)."""
        workers = getattr(self, "_metrics_workers", [])
        if not workers or any(self._pending):
            return {}
        self._check_usable()
        self._send(workers, CMD_EPISODE_METRICS)
        got = [self._recv(w, "metrics", self.step_timeout) for w in workers]
        self._wait(workers)
        merged: Dict[str, List[float]] = {}
        for metrics in got:
            for key, value in metrics.items():
                merged.setdefault(key, []).append(float(value))
        return {key: sum(values) / len(values) for key, values in merged.items()}

    def worker_activity(self) -> Dict[str, np.ndarray]:
        """Seconds each worker has spent running commands since it started:
        ``busy_s`` (wall) and ``cpu_s`` (the worker process's CPU time), ``[W]``
        copies. A worker adds to them before it signals a command done, so they are
        exact whenever no step is in flight. Differences over an interval tell how
        busy the simulator was (e.g. FastPPO's ``learn_while_stepping`` meter); this
        is a host read of shared memory, no device work."""
        self._check_usable()
        return {"busy_s": self._v["busy_s"].copy(), "cpu_s": self._v["cpu_s"].copy()}

    def randomize_episode_progress(self) -> None:
        """Spread the episode clocks of every worker's source (a no-op in a
        worker whose source has none): the on-policy algorithms' start-state
        decorrelation has to reach a simulator in a worker process too, or
        its N envs time out together, every episode."""
        self._check_usable()
        if any(self._pending):
            raise RuntimeError("randomize_episode_progress() while a step is in flight; wait for it first")
        workers = range(self.num_workers)
        self._send(workers, CMD_RANDOMIZE_CLOCKS)
        self._wait(workers)

    def set_state(self, state: Dict[str, Any]) -> None:
        self._check_usable()
        states = state["workers"]
        if len(states) != self.num_workers:
            raise ValueError(f"state holds {len(states)} workers, this env has {self.num_workers}")
        workers = range(self.num_workers)
        self._send(workers, CMD_SET_STATE)
        for w in workers:
            self._res.conns[w].send(states[w])
        self._wait(workers)

    def close(self) -> None:
        """Stop the workers and free the shared memory (idempotent)."""
        self._v = {}
        self._finalizer()

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def __del__(self) -> None:
        fin = getattr(self, "_finalizer", None)
        if fin is not None:
            self._v = {}
            fin()

    def __enter__(self) -> "ParallelVecEnv":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.make_env_fn!r}, num_envs={self.num_envs}, "
                f"num_workers={self.num_workers}, num_groups={self.num_groups}, device={self.device})")


# ---------------------------------------------------------------------------
# serial reference
# ---------------------------------------------------------------------------
class SerialVecEnv(TensorVecEnv):
    """The partition and per-worker seeds of :class:`ParallelVecEnv`, stepped
    in this process one source after the other. With ``num_groups`` it also
    offers the group API (``step_async_group`` runs the step immediately), so
    it can stand in for an :class:`AlternatingVecEnv` in tests."""

    def __init__(self, make_env_fn: MakeEnvFn, num_envs: int, num_workers: int, device: Any = "cpu",
                 seed: Optional[int] = None, *, num_groups: int = 1):
        self.num_envs = n = check_num_envs(num_envs)
        self.num_workers = W = int(num_workers)
        self.num_groups = G = int(num_groups)
        nw = env_share(n, W, "num_workers", type(self).__name__)
        if G < 1 or W % G:
            raise ValueError(f"{type(self).__name__}: `num_workers` = {W} must be divisible by `num_groups` = {G}")
        self.device = canonical_device(device)
        self.envs = [make_env_fn(nw, worker_seed(seed, w)) for w in range(W)]
        e0 = self.envs[0]
        self.single_observation_space = e0.single_observation_space
        self.single_action_space = e0.single_action_space
        self.max_episode_steps = getattr(e0, "max_episode_steps", None)
        self.normalize_obs_hint = getattr(e0, "normalize_obs_hint", None)
        self.steps_on_worker_threads = getattr(e0, "steps_on_worker_threads", False)   # stepped in this process
        self.autoreset_mode = getattr(e0, "autoreset_mode", None)  # NEXT_STEP: resets one step late
        self.single_state_space = getattr(e0, "single_state_space", None)  # asymmetric critic's states
        wg = W // G
        self.group_num_envs = n // G
        self.group_slices = [slice(g * wg * nw, (g + 1) * wg * nw) for g in range(G)]
        self.group_workers = [list(range(g * wg, (g + 1) * wg)) for g in range(G)]
        self._nw = nw
        self._results: Dict[int, Step] = {}

    def reset(self, seed: Optional[int] = None) -> torch.Tensor:
        return torch.cat([e.reset(seed=worker_seed(seed, w)) for w, e in enumerate(self.envs)]).to(self.device)

    def _step_workers(self, workers: Sequence[int], actions: torch.Tensor) -> Step:
        actions = torch.as_tensor(actions)
        nw = self._nw
        outs = [self.envs[w].step(actions[j * nw:(j + 1) * nw]) for j, w in enumerate(workers)]
        return concat_steps(outs, self.device)

    def step(self, actions: Any) -> Step:
        return self._step_workers(range(self.num_workers), actions)

    def step_async_group(self, g: int, actions: Any) -> None:
        if g in self._results:
            raise RuntimeError(f"group {g} already has a step in flight")
        self._results[g] = self._step_workers(self.group_workers[g], actions)

    def wait_group(self, g: int) -> Step:
        return self._results.pop(g)

    @property
    def states(self) -> Optional[torch.Tensor]:
        """Every source's current critic states, concatenated (None without states)."""
        if self.single_state_space is None:
            return None
        return torch.cat([e.states.float().reshape(e.num_envs, *self.single_state_space.shape)
                          for e in self.envs]).to(self.device)

    def randomize_episode_progress(self) -> None:
        for e in self.envs:
            if hasattr(e, "randomize_episode_progress"):
                e.randomize_episode_progress()

    def get_state(self) -> Optional[Dict[str, Any]]:
        states = [e.get_state() for e in self.envs]
        return None if any(s is None for s in states) else {"workers": states}

    def set_state(self, state: Dict[str, Any]) -> None:
        for e, s in zip(self.envs, state["workers"]):
            e.set_state(s)

    def close(self) -> None:
        for e in self.envs:
            e.close()
        self.envs = []
