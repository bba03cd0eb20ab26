"""PQL's process back-end: the V-learner and the P-learner each run in a
process of their own, the Actor (with the env) in the trial process, and
everything that moves per step moves through shared memory.

Why it exists: on a CPU workstation the thread back-end's three roles share
one GIL. With small networks an update is mostly Python dispatch, and a real
simulator's step (mjlab: Warp kernel launches from Python) is Python too, so
the threads take turns instead of overlapping (the simulator steps well
below its raw rate inside ``env.step``; docs/pql.md). The Ray back-end moves the learners out of the GIL but pays a remote call per
exchange. Here nothing per step is a call:

* **Transitions**: a ring of ``S`` preallocated shared slots (one vectorised
  step's finished n-step transitions each, with the observation statistics of
  that step). The Actor copies a batch into slot ``head % S`` and then bumps
  ``head``; each learner copies the slots it has not seen into its own replay
  and publishes how far it read, and the Actor never overwrites a slot a
  learner has not read (it waits, which only happens while the learners boot).
* **Weights**: one shared copy of the P-learner's policy and one of the
  V-learner's critic, each behind a sequence counter (odd while written). A
  reader copies the tensors out, then checks the counter did not move; a torn
  read is dropped and retried at the next step.
* **Speed ratios**: the trial process keeps the one
  :class:`~rllib_fast.algorithms.pql.ratio.RatioController`. Each learner writes its
  update count into a shared vector; the Actor's thread mirrors the counts into
  the controller and writes back the count each learner may reach (its limit)
  at every env step and while it waits. A learner waits only when its count
  reaches its limit, or proceeds anyway after ``max_wait_s``.
* **Waiting blocks, it does not spin**: a learner posts the shared ``learned``
  :class:`Signal` after each update and the Actor posts a learner's ``wake`` signal
  when it raises that learner's limit; a waiter drains its signal, checks its
  condition, then sleeps on the signal (at most ``WAIT_S``, so commands and a dead
  peer are still noticed). Why: on slow robot updates (0.15 CPU s per C51 critic
  update on Go1) the Actor waits most of the time, and a 200 µs poll loop there
  burned a fifth of a core that the niced learners then lacked.
* **Priority**: the learners run ``learner_nice`` (default 10) below the trial
  process. With three busy processes on two cores the OS then gives the
  simulator a core first and the learners what it leaves, so the simulator
  steps near its raw rate inside ``env.step`` while the learners wait for the
  ratio anyway (``learner_nice=0`` gives equal shares).
* **Control** (per iteration or rarer): a pipe per learner for resume, pause,
  state get/set, replay clearing, live hyperparameters and stop. States travel
  as ``torch.save`` bytes.

The learners start by ``fork`` where the OS has it (``process_start_method``,
see :mod:`rllib_fast.core.start_method`); with ``spawn`` they import torch and rllib_fast
again (seconds of a core each) and a plain script needs the usual
``if __name__ == "__main__":`` guard. Either way the Actor keeps taking its
warm-up steps while they boot (up to the ring's size), and the controller is
armed only once both report ready. A learner exits when the trial process
does (it watches its parent). CPU devices only: a CUDA tensor in shared memory
would need CUDA IPC, and on a GPU the thread back-end already overlaps
(kernels release the GIL).
"""
from __future__ import annotations

import copy
import faulthandler
import io
import math
import os
import time
import traceback
from typing import Any, Dict, List, Optional

import torch
import torch.multiprocessing as mp
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

from ...core.seeding import PQL_LEARNER, derive_seed
from ...core.start_method import resolve_start_method
from ...core.state import StateAdapter
from ...core.threads import reserve_cores
from .transition_replay import replay_bytes
from .backend import ROLES, PQLBackend
from .components import CriticLearner, Dims, PolicyLearner, make_critic
from .nets import load_snapshot, snapshot, tensors

ROLE_INDEX = {role: i for i, role in enumerate(ROLES)}
#: live hyperparameters in the shared vector, in this order (grad clip NaN = off)
LIVE_KEYS = ("lr", "actor_lr", "tau", "grad_clip")
#: most bytes the transition ring may take; it holds at least 8 steps
RING_BYTES = 64 * 2 ** 20
RING_SLOTS = 256
#: longest sleep on a Signal before the waiter looks at its pipe / its peers again
WAIT_S = 0.005


def _to_bytes(obj) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _from_bytes(data: bytes):
    return torch.load(io.BytesIO(data), weights_only=False)   # our own learners' state, not user files


class SharedWeights:
    """A module's tensors in shared memory behind a sequence counter (a seqlock
    with one writer): ``write`` makes the counter odd, copies, makes it even;
    ``read_into`` copies out and keeps the copy only if the counter was even
    and unchanged, so a reader never loads half of an update."""

    def __init__(self, module: torch.nn.Module):
        self.data = [t.detach().clone().share_memory_() for t in tensors(module)]
        self.seq = torch.zeros(1, dtype=torch.int64).share_memory_()

    def version(self) -> int:
        return int(self.seq[0]) // 2

    @torch.no_grad()
    def write(self, module: torch.nn.Module) -> None:
        self.seq += 1
        torch._foreach_copy_(self.data, tensors(module))
        self.seq += 1

    @torch.no_grad()
    def read_into(self, module: torch.nn.Module, seen: int) -> int:
        """Load a version newer than ``seen`` into ``module``; returns the version
        now held (``seen`` when there was nothing new or the read was torn)."""
        s0 = int(self.seq[0])
        if s0 % 2 or s0 // 2 <= seen:
            return seen
        copy = [t.clone() for t in self.data]
        if int(self.seq[0]) != s0:
            return seen
        load_snapshot(module, copy)
        return s0 // 2


class Signal:
    """A wake-up call between processes: ``post`` (any number of times) wakes one
    ``wait``; ``drain`` forgets the posts so far. A counting semaphore, not an Event:
    posting is one atomic ``sem_post`` with no lock held, so a learner killed
    mid-post cannot leave a lock that would hang the Actor's next wait. Waiters
    always re-check their condition after a wait (a post may be stale)."""

    def __init__(self, ctx):
        self._sem = ctx.Semaphore(0)

    def post(self) -> None:
        self._sem.release()

    def drain(self) -> None:
        while self._sem.acquire(False):
            pass

    def wait(self, timeout: float) -> None:
        self._sem.acquire(True, timeout)


class SharedState:
    """Everything the three processes share, allocated by the trial process."""

    def __init__(self, fields: Dict[str, Any], rows: int, moment_shapes: List[torch.Size], policy, critic,
                 live, ctx):
        row_bytes = sum(math.prod(shape) * torch.empty((), dtype=dt).element_size() for shape, dt in fields.values())
        self.slots = int(max(8, min(RING_SLOTS, RING_BYTES // max(1, row_bytes * rows))))
        self.ring = {k: torch.zeros((self.slots, rows, *shape), dtype=dt).share_memory_()
                     for k, (shape, dt) in fields.items()}
        self.moments = [torch.zeros((self.slots, *s)).share_memory_() for s in moment_shapes]
        self.head = torch.zeros(1, dtype=torch.int64).share_memory_()        # slots written
        self.read = torch.zeros(2, dtype=torch.int64).share_memory_()        # slots ingested, per learner
        self.counts = torch.zeros(2, dtype=torch.float64).share_memory_()    # updates done, per learner
        self.limits = torch.full((2,), math.inf, dtype=torch.float64).share_memory_()
        self.waited = torch.zeros(2, 2, dtype=torch.float64).share_memory_()  # (seconds, overrides) per learner
        self.metrics = torch.zeros(2, 2, dtype=torch.float64).share_memory_()  # cumulative take_metrics() sums
        self.failed = torch.zeros(2, dtype=torch.int64).share_memory_()
        self.live = torch.zeros(len(LIVE_KEYS), dtype=torch.float64).share_memory_()
        self.learned = Signal(ctx)                   # a learner finished an update (the Actor waits on it)
        self.wake = [Signal(ctx), Signal(ctx)]       # the Actor raised this learner's limit
        self.policy = SharedWeights(policy)
        self.critic = SharedWeights(critic)
        self.set_live(live)

    def set_live(self, live) -> None:
        vals = [live.lr, live.actor_lr, live.tau, math.nan if live.grad_clip is None else live.grad_clip]
        self.live.copy_(torch.tensor(vals, dtype=torch.float64))


class SharedLive:
    """The learners' view of the live hyperparameters (``LiveParams``'s fields,
    read from shared memory at every update, so lr schedules and PBT reach the
    learner processes without a message)."""

    def __init__(self, vec: torch.Tensor):
        self._vec = vec

    @property
    def lr(self) -> float:
        return float(self._vec[0])

    @property
    def actor_lr(self) -> float:
        return float(self._vec[1])

    @property
    def tau(self) -> float:
        return float(self._vec[2])

    @property
    def grad_clip(self) -> Optional[float]:
        g = float(self._vec[3])
        return None if math.isnan(g) else g


# ---------------------------------------------------------------------------
# learner process
# ---------------------------------------------------------------------------
class _LearnerLoop:
    """One learner in its own process: ingest the ring, adopt the other role's
    weights, update while the limit allows, publish; obey the control pipe."""

    def __init__(self, role: str, config_state, dims: Dims, rows: int, capacity: int, shared: SharedState, conn):
        torch.set_num_threads(1)
        self.cfg = cfg = AlgorithmConfig.from_state(config_state)   # of the class the state names
        self.role, self.i, self.shared, self.conn = role, ROLE_INDEX[role], shared, conn
        torch.manual_seed(derive_seed(cfg.seed or 0, PQL_LEARNER, self.i))
        live = SharedLive(shared.live)
        klass = CriticLearner if role == "critic" else PolicyLearner
        self.learner = klass(cfg, dims, torch.device("cpu"), live, rows, capacity)
        L = self.learner
        if role == "critic":    # identical initial weights everywhere
            shared.critic.read_into(L.critic, -1)
            load_snapshot(L.target, snapshot(L.critic))
            self.seen = shared.policy.read_into(L.policy, -1)
        else:
            shared.policy.read_into(L.policy, -1)
            self.seen = shared.critic.read_into(L.critic, -1)
        self.mine = shared.critic if role == "critic" else shared.policy
        self.other = shared.policy if role == "critic" else shared.critic
        self.other_module = L.policy if role == "critic" else L.critic
        self.own_module = L.critic if role == "critic" else L.policy
        self.fields = list(L.replay.data)
        self.read = 0
        self.running = False
        self.stopped = False
        self.every = cfg.weight_sync_every
        self.max_wait_s = cfg.max_wait_s

    # -- per step ------------------------------------------------------------
    def ingest(self) -> None:
        sh = self.shared
        head = int(sh.head[0])
        if head == self.read:
            return
        slot = 0
        while self.read < head:
            slot = self.read % sh.slots
            self.learner.add({k: sh.ring[k][slot] for k in self.fields})
            self.read += 1
        if sh.moments:
            self.learner.set_moments(tuple(s[slot].clone() for s in sh.moments))
        sh.read[self.i] = self.read

    def adopt(self) -> None:
        self.seen = self.other.read_into(self.other_module, self.seen)

    def gate(self) -> bool:
        """Wait until one more update is within the limit; False when a command arrived."""
        sh, n = self.shared, self.learner.updates + 1
        if n <= float(sh.limits[self.i]) + 1e-9:
            return True
        t0, wake = time.monotonic(), sh.wake[self.i]
        try:
            while True:
                wake.drain()                     # before the check: a raise after it posts again
                if n <= float(sh.limits[self.i]) + 1e-9:
                    return True
                if self.conn.poll():
                    return False
                if time.monotonic() - t0 > self.max_wait_s:
                    sh.waited[self.i, 1] += 1
                    return True
                wake.wait(WAIT_S)
        finally:
            sh.waited[self.i, 0] += time.monotonic() - t0

    def publish(self) -> None:
        self.mine.write(self.own_module)
        self.shared.metrics[self.i] += self.learner.take_metrics().double()

    # -- control ----------------------------------------------------------------
    def handle(self, msg) -> None:
        cmd, arg = msg
        reply: Any = True
        if cmd == "resume":
            self.running = True
            return                          # no reply: the driver does not wait for it
        if cmd == "pause":
            self.running = False
            self.ingest()
            self.adopt()
            self.publish()
            reply = self.learner.updates
        elif cmd == "get_state":
            reply = _to_bytes(self.learner.state_dict(arg))
        elif cmd == "set_state":
            self.learner.load_state_dict(_from_bytes(arg))
            self.shared.counts[self.i] = self.learner.updates
            self.mine.write(self.own_module)
        elif cmd == "clear_replay":
            self.learner.replay.clear()
        elif cmd == "adopt":                # after a restore: take the other role's restored weights
            self.seen = self.other.read_into(self.other_module, -1)
        elif cmd == "stop":
            self.stopped = True
        else:
            raise ValueError(f"unknown command {cmd!r}")
        self.conn.send(("ok", reply))

    def run(self) -> None:
        if self.cfg.learner_nice:
            os.nice(self.cfg.learner_nice)
        parent, checked = os.getppid(), time.monotonic()
        self.conn.send(("ready", None))
        while not self.stopped:
            if time.monotonic() - checked > 1.0:      # orphaned (the trial process was killed): exit
                if os.getppid() != parent:
                    return
                checked = time.monotonic()
            if not self.running:
                if self.conn.poll(1.0):
                    self.handle(self.conn.recv())
                continue
            if self.conn.poll():
                self.handle(self.conn.recv())
                continue
            self.ingest()
            self.adopt()
            if not self.learner.ready():
                time.sleep(1e-3)
                continue
            if not self.gate():
                continue
            self.learner.update()
            self.shared.counts[self.i] = self.learner.updates
            self.shared.learned.post()
            if self.learner.updates % self.every == 0:
                self.publish()


def _learner_main(role, config_state, dims, rows, capacity, shared, conn) -> None:
    """Entry point of a learner process (module level: ``spawn`` imports it by name).

    A native crash (the trial sees exit code -11) cannot be sent over the pipe; faulthandler
    writes the learner's Python stack to its stderr, inherited from the trial, where the
    trial's log (or pytest's capture) shows where it died."""
    faulthandler.enable()
    try:
        _LearnerLoop(role, config_state, dims, rows, capacity, shared, conn).run()
    except BaseException:  # noqa: BLE001 - reported to the trial process, then exit
        shared.failed[ROLE_INDEX[role]] = 1
        try:
            conn.send(("error", traceback.format_exc()))
            _linger(conn)
        except (BrokenPipeError, OSError):
            pass


def _linger(conn, limit_s: float = 60.0) -> None:
    """Read and drop the trial process's commands until it says stop or closes its end
    (or ``limit_s`` passes).

    Why: a socket closed with unread data in it is reset, and the reset discards what
    the peer has not read yet; a learner that exited right after reporting its failure
    turned the trial process's next read into ``ConnectionResetError`` instead of the
    learner's traceback whenever a command was already on its way."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        try:
            if conn.poll(0.5) and conn.recv()[0] == "stop":
                return
        except (EOFError, OSError):
            return


# ---------------------------------------------------------------------------
# trial-process side
# ---------------------------------------------------------------------------
class ProcessBackend(PQLBackend):
    ROLES = ROLES

    def __init__(self, config, dims, actor, controller, live, *, num_envs: int, capacity: int,
                 device: torch.device):
        super().__init__(config, dims, actor, controller, live, num_envs=num_envs, capacity=capacity, device=device)
        cfg, N = config, num_envs   # CPU devices: checked at validation
        v_fields, p_fields = cfg.replay_fields(dims.obs_dim, dims.act_dim, dims.state_dim)
        cap = (capacity // N) * N
        self.replay_bytes = replay_bytes(cap, v_fields) + replay_bytes(cap, p_fields)
        moments = actor.moments()
        critic = make_critic(cfg, dims)    # the V-learner's first critic (and the P-learner's copy)
        ctx = mp.get_context(resolve_start_method(cfg.process_start_method))
        self.shared = SharedState(v_fields, N, [s.shape for s in moments] if moments is not None else [],
                                  actor.policy, critic, live, ctx)
        self.fields = list(v_fields)
        # this process's read-only copies of the learners' networks, refreshed from shared memory
        # when the state is read (generic tools inspect nn.Module components; see state_components)
        self.policy_view = copy.deepcopy(actor.policy).requires_grad_(False)   # no RNG draw
        self.critic_view = critic.requires_grad_(False)
        self.head = 0
        self.ready = {r: False for r in self.ROLES}      # booted (sent 'ready')
        self.resumed = {r: False for r in self.ROLES}    # told to run in this iteration
        self.active = False                              # between resume() and pause()
        self.seen_policy = 0
        self.metrics_seen = torch.zeros(2, 2, dtype=torch.float64)
        self.conns, self.procs = {}, {}
        self.errors: Dict[str, str] = {}                 # a failed learner's traceback, once read
        self.cores = reserve_cores(len(self.ROLES))   # the actor here keeps what the learners leave
        for role in self.ROLES:
            ours, theirs = ctx.Pipe()
            proc = ctx.Process(target=_learner_main, name=f"pql-{role}", daemon=True,
                               args=(role, cfg.get_state(), dims, N, capacity, self.shared, theirs))
            proc.start()
            theirs.close()
            self.conns[role], self.procs[role] = ours, proc

    # -- plumbing ----------------------------------------------------------------
    def _next(self, role: str):
        """Read one message of ``role``: notes 'ready', raises a reported failure with
        the learner's traceback, returns (kind, payload) otherwise."""
        try:
            kind, payload = self.conns[role].recv()
        except (EOFError, OSError) as e:   # the learner is gone without a word (killed, or its report lost)
            raise RuntimeError(f"PQL {role} learner process failed (exit code {self.procs[role].exitcode}; "
                               f"its pipe: {type(e).__name__})") from e
        if kind == "ready":
            self.ready[role] = True
        elif kind == "error":
            self.errors[role] = payload
            raise RuntimeError(f"PQL {role} learner process failed:\n{payload}")
        return kind, payload

    def _check(self, role: Optional[str] = None) -> None:
        """Raise the learner's own traceback if it failed or died."""
        for r in (self.ROLES if role is None else (role,)):
            if int(self.shared.failed[ROLE_INDEX[r]]) or not self.procs[r].is_alive():
                if r in self.errors:
                    raise RuntimeError(f"PQL {r} learner process failed:\n{self.errors[r]}")
                while self.conns[r].poll(0.5):   # its report, if it is still in the pipe (_next raises it)
                    self._next(r)
                raise RuntimeError(f"PQL {r} learner process failed (exit code {self.procs[r].exitcode})")

    def _recv(self, role: str, timeout: float = 120.0):
        """The next reply of ``role`` (skipping its one-time 'ready')."""
        conn, deadline = self.conns[role], time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError(f"PQL {role} learner process did not answer within {timeout}s")
            if conn.poll(min(left, 0.5)):
                kind, payload = self._next(role)
                if kind != "ready":
                    return payload
            self._check(role)

    def _send(self, role: str, cmd: str, arg=None) -> None:
        try:
            self.conns[role].send((cmd, arg))
        except (BrokenPipeError, OSError):
            self._check(role)           # the learner's own traceback, if it left one
            raise

    def _call(self, role: str, cmd: str, arg=None):
        self._send(role, cmd, arg)
        return self._recv(role)

    def learners_ready(self) -> bool:
        """Poll the boot of the learners; one that booted during an iteration starts at once."""
        for role in self.ROLES:
            while not self.ready[role] and self.conns[role].poll():
                self._next(role)
            if self.ready[role] and self.active and not self.resumed[role]:
                self._resume(role)
        return all(self.ready.values())

    def _resume(self, role: str) -> None:
        self._send(role, "resume")
        self.resumed[role] = True

    def _relay(self) -> None:
        """Mirror the learners' counts into the controller and hand them their limits."""
        ctl, sh = self.controller, self.shared
        c = sh.counts.tolist()
        ctl.set_count("critic", c[0])
        ctl.set_count("policy", c[1])
        old = sh.limits.tolist()
        for i, role in enumerate(ROLES):
            new = ctl.limit(role)
            sh.limits[i] = new                 # in place: nothing allocated per env step
            if new > old[i]:                   # a learner waiting on its limit may go on
                sh.wake[i].post()

    # -- driver side ---------------------------------------------------------------
    def resume(self) -> None:
        self.shared.set_live(self.live)
        self.active = True
        self.learners_ready()            # a learner still booting starts when it is up, not now
        for role in self.ROLES:
            if self.ready[role] and not self.resumed[role]:
                self._resume(role)

    def pause(self) -> None:
        """Park the running learners (a learner still booting has done nothing and is
        not waited for: the Actor keeps stepping meanwhile, its transitions wait in
        the ring)."""
        self.active = False
        running = [r for r in self.ROLES if self.resumed[r]]
        for role in running:
            self._send(role, "pause")
        for role in running:
            self.controller.set_count(role, float(self._recv(role)))
            self.resumed[role] = False
        self.shared.limits.fill_(math.inf)
        for wake in self.shared.wake:
            wake.post()
        self.seen_policy = self.shared.policy.read_into(self.actor.policy, -1)

    def gate_actor(self) -> None:
        ctl, learned = self.controller, self.shared.learned
        t0 = time.monotonic()
        while True:
            learned.drain()                      # before the check: an update after it posts again
            self._relay()
            if ctl.may_proceed("actor"):
                break
            if time.monotonic() - t0 > ctl.max_wait_s:
                ctl.overrides["actor"] += 1
                break
            learned.wait(WAIT_S)
        waited = time.monotonic() - t0
        ctl.waited_s["actor"] += waited
        if waited > 0.2:
            self._check()

    def sync_actor(self) -> None:
        self.seen_policy = self.shared.policy.read_into(self.actor.policy, self.seen_policy)

    def push(self, batch: Dict[str, torch.Tensor], moments) -> None:
        sh = self.shared
        t0 = time.monotonic()
        while self.head - int(sh.read.min()) >= sh.slots:   # a learner has not read the oldest slot yet
            time.sleep(1e-3)
            self.learners_ready()                       # one still booting starts as soon as it is up
            if time.monotonic() - t0 > 1.0:
                self._check()
                t0 = time.monotonic()
        slot = self.head % sh.slots
        with torch.no_grad():
            torch._foreach_copy_([sh.ring[k][slot] for k in self.fields], [batch[k] for k in self.fields])
            if moments is not None:
                torch._foreach_copy_([s[slot] for s in sh.moments], list(moments))
        self.head += 1
        sh.head[0] = self.head                           # after the data: a reader never sees a half slot
        self._relay()

    def wait_caught_up(self) -> None:
        ctl, learned = self.controller, self.shared.learned
        t0 = time.monotonic()
        while True:
            learned.drain()
            self._relay()
            if ctl.caught_up("actor") or time.monotonic() - t0 >= ctl.max_wait_s:
                break
            learned.wait(WAIT_S)
        self._check()

    # -- measurements ----------------------------------------------------------------
    def take_metrics(self, role: str) -> torch.Tensor:
        i = ROLE_INDEX[role]
        now = self.shared.metrics[i].clone()
        out, self.metrics_seen[i] = (now - self.metrics_seen[i]).float(), now
        return out

    def waited_s(self) -> Dict[str, float]:
        w = self.shared.waited[:, 0].tolist()
        return {"actor": self.controller.waited_s["actor"], "critic": w[0], "policy": w[1]}

    def overrides(self) -> Dict[str, int]:
        o = self.shared.waited[:, 1].tolist()
        return {"actor": self.controller.overrides["actor"], "critic": int(o[0]), "policy": int(o[1])}

    # -- state -------------------------------------------------------------------------
    def state_components(self) -> Dict[str, Any]:
        """The learners' states (read from and written to their processes), plus this
        process's views of their newest policy and critic as modules (as the thread
        back-end exposes its learners' networks; loading into a view is harmless, the
        learners load from 'v' and 'p')."""
        with_replay = self.config.checkpoint_replay
        self.shared.policy.read_into(self.policy_view, -1)
        self.shared.critic.read_into(self.critic_view, -1)
        return {**{key: StateAdapter((lambda r: lambda: _from_bytes(self._call(r, "get_state", with_replay)))(role),
                                     (lambda r: lambda s: self._call(r, "set_state", _to_bytes(s)))(role))
                   for key, role in (("v", "critic"), ("p", "policy"))},
                "policy_net": self.policy_view, "critic_net": self.critic_view}

    def after_restore(self) -> None:
        # each role published its restored network on set_state; now each takes the other's
        for role in self.ROLES:
            self._call(role, "adopt")
        self.seen_policy = self.shared.policy.read_into(self.actor.policy, -1)
        self.metrics_seen = self.shared.metrics.clone()

    def clear_replays(self) -> None:
        for role in self.ROLES:
            self._call(role, "clear_replay")

    def set_live(self, live) -> None:
        self.shared.set_live(live)

    def close(self) -> None:
        for role, proc in self.procs.items():
            if proc.is_alive():
                try:
                    self.conns[role].send(("stop", None))
                except (BrokenPipeError, OSError):
                    pass
        for role, proc in self.procs.items():
            proc.join(timeout=10)
            if proc.is_alive():
                proc.terminate()
                proc.join(timeout=5)
            self.conns[role].close()
        self.procs = {}
        self.cores.release()
