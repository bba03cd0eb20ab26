"""The worker side of :class:`~rllib_fast.envs.parallel.ParallelVecEnv`: one
simulator process, its command loop and the shared-memory block it writes into.

Protocol (one round trip per step): the main process writes the actions into
the shared block, sets the worker's command word (``CMD_STEP``, ``CMD_RESET``,
``CMD_GET_STATE``, ``CMD_SET_STATE``, ``CMD_EPISODE_METRICS``, ``CMD_CLOSE``) and releases the worker's
*command* semaphore; the worker runs the command on its source, writes its rows
and releases its *done* semaphore. Exceptions travel back over the worker's pipe
with their traceback and are raised as :class:`WorkerError`; a worker exits on
its own when its parent dies. :class:`WorkerResources` owns the processes, pipes,
semaphores and shared memory of one env and releases them exactly once. The
design decisions (spawn context, seeds, partition, extras probing) are in
:mod:`rllib_fast.envs.parallel`'s docstring.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
import traceback
from multiprocessing import shared_memory
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from .base import TensorVecEnv, canonical_device
from ..core.threads import CoreReservation

__all__ = ["WorkerError", "MakeEnvFn", "SharedLayout", "WorkerResources", "worker_main",
           "resolve_affinity", "spin_acquire", "CMD_STEP", "CMD_RESET", "CMD_GET_STATE", "CMD_SET_STATE",
           "CMD_CLOSE", "CMD_RANDOMIZE_CLOCKS", "CMD_EPISODE_METRICS"]

MakeEnvFn = Callable[[int, Optional[int]], TensorVecEnv]

# command words (shared int32 per worker)
(CMD_STEP, CMD_RESET, CMD_GET_STATE, CMD_SET_STATE, CMD_CLOSE, CMD_RANDOMIZE_CLOCKS,
 CMD_EPISODE_METRICS) = range(1, 8)
_ALIGN = 64


class WorkerError(RuntimeError):
    """A simulator worker raised, died, or the env was used after that."""


# ---------------------------------------------------------------------------
# shared-memory layout
# ---------------------------------------------------------------------------
class SharedLayout:
    """Named numpy arrays at 64-byte aligned offsets of one shared block."""

    def __init__(self) -> None:
        self.fields: Dict[str, Tuple[int, Tuple[int, ...], str]] = {}
        self.size = 0

    def add(self, name: str, shape: Sequence[int], dtype: Any) -> None:
        dt = np.dtype(dtype)
        shape = tuple(int(s) for s in shape)
        off = -(-self.size // _ALIGN) * _ALIGN
        self.fields[name] = (off, shape, dt.str)
        self.size = off + max(1, int(np.prod(shape, dtype=np.int64)) * dt.itemsize)

    def views(self, buf: memoryview) -> Dict[str, np.ndarray]:
        out = {}
        for name, (off, shape, dt) in self.fields.items():
            count = int(np.prod(shape, dtype=np.int64))
            out[name] = np.frombuffer(buf, dtype=np.dtype(dt), count=count, offset=off).reshape(shape)
        return out


def _np_dtype(t: torch.dtype) -> np.dtype:
    return torch.empty(0, dtype=t).numpy().dtype


# ---------------------------------------------------------------------------
# worker process
# ---------------------------------------------------------------------------
def _probe_spec(make_env_fn: MakeEnvFn) -> Dict[str, Any]:
    """Obs dtype and extras (key -> (per-env shape, numpy dtype)) of a 1-env source."""
    env = make_env_fn(1, None)
    try:
        obs = env.reset()
        out = env.step(env.sample_actions())
        extras = {}
        for k, v in (out.extras or {}).items():
            v = torch.as_tensor(v)
            if v.dim() < 1 or v.shape[0] != 1:
                raise ValueError(f"extras[{k!r}] must have a leading env dimension, got shape {tuple(v.shape)}")
            extras[k] = (tuple(v.shape[1:]), _np_dtype(v.dtype).str)
        return {"obs_dtype": _np_dtype(obs.dtype).str, "extras": extras}
    finally:
        env.close()


def _write_rows(dst: np.ndarray, src: Any) -> None:
    if isinstance(src, torch.Tensor):
        src = src.detach()
        if src.device.type != "cpu":
            src = src.cpu()
        src = src.numpy()
    np.copyto(dst, src, casting="unsafe")


def spin_acquire(sem: Any, spin_s: float) -> bool:
    """Poll ``sem`` for up to ``spin_s`` seconds, yielding the core between polls
    (a runnable process on this core gets it), instead of sleeping in the
    kernel: on VMs waking an idle vCPU costs tens of microseconds."""
    if sem.acquire(block=False):
        return True
    if spin_s <= 0:
        return False
    end = time.perf_counter() + spin_s
    yield_ = os.sched_yield
    while time.perf_counter() < end:
        yield_()
        if sem.acquire(block=False):
            return True
    return False


def _parent_alive(ppid: int) -> bool:
    parent = mp.parent_process()
    if parent is not None and not parent.is_alive():
        return False
    return os.getppid() == ppid


def _serve(w: int, env: TensorVecEnv, conn: Any, cmd_sem: Any, done_sem: Any, buf: memoryview,
           layout: SharedLayout, lo: int, hi: int, extra_keys: Sequence[str], ppid: int, spin_s: float) -> None:
    """The worker's command loop. Every shared-memory view lives in this frame
    only, so the block can be closed once it returns."""
    v = layout.views(buf)
    rows = slice(lo, hi)
    actions_v, obs_v, final_v = v["actions"][rows], v["obs"][rows], v["final"][rows]
    rew_v, term_v, trunc_v, valid_v = v["reward"][rows], v["terminated"][rows], v["truncated"][rows], v["valid"][rows]
    ext_v = {k: v["x_" + k][rows] for k in extra_keys}
    # asymmetric actor-critic: the source's current critic states, kept current after
    # every reset and step so the main process can read `env.states` at any barrier
    states_v = v["states"][rows] if "states" in v else None

    def mirror_states() -> None:
        if states_v is not None:
            _write_rows(states_v, env.states.reshape(states_v.shape))

    cmd, seeds, has_seed, has_final, valid_none = v["cmd"], v["seed"], v["has_seed"], v["has_final"], v["valid_none"]
    # what this worker spent running commands (wall and CPU seconds), read by the main
    # process between steps to see how busy the simulator is (ParallelVecEnv.worker_activity)
    busy_s, cpu_s = v["busy_s"], v["cpu_s"]
    clock, cpu_clock = time.perf_counter, time.process_time
    while True:
        if not spin_acquire(cmd_sem, spin_s):
            while not cmd_sem.acquire(timeout=1.0):
                if not _parent_alive(ppid):
                    return
        started, cpu_started = clock(), cpu_clock()
        c = int(cmd[w])
        if c == CMD_STEP:
            out = env.step(torch.from_numpy(actions_v.copy()))
            _write_rows(obs_v, out.obs)
            _write_rows(rew_v, out.reward)
            _write_rows(term_v, out.terminated)
            _write_rows(trunc_v, out.truncated)
            if out.final_obs is out.obs:
                has_final[w] = 0
            else:
                _write_rows(final_v, out.final_obs)
                has_final[w] = 1
            if out.valid is None:
                valid_none[w] = 1
                valid_v[:] = True  # other workers' rows may be real flags this step
            else:
                valid_none[w] = 0
                _write_rows(valid_v, out.valid)
            extras = out.extras or {}
            for k, dst in ext_v.items():
                if k not in extras:
                    raise KeyError(f"step() returned no extras[{k!r}], which the probe step returned "
                                   f"(keys now: {sorted(extras)})")
                _write_rows(dst, extras[k])
            mirror_states()
        elif c == CMD_RESET:
            obs = env.reset(seed=int(seeds[w]) if has_seed[w] else None)
            _write_rows(obs_v, obs)
            mirror_states()
        elif c == CMD_GET_STATE:
            conn.send(("state", env.get_state()))
        elif c == CMD_SET_STATE:
            env.set_state(conn.recv())
            mirror_states()
        elif c == CMD_RANDOMIZE_CLOCKS:   # a no-op for a source without episode clocks
            if hasattr(env, "randomize_episode_progress"):
                env.randomize_episode_progress()
        elif c == CMD_EPISODE_METRICS:   # the source's own episode statistics (e.g. envpool's reward terms)
            metrics = getattr(env, "episode_metrics", None)
            conn.send(("metrics", metrics() if callable(metrics) else {}))
        elif c == CMD_CLOSE:
            return
        else:
            raise RuntimeError(f"unknown command {c}")
        busy_s[w] += clock() - started
        cpu_s[w] += cpu_clock() - cpu_started
        done_sem.release()


def worker_main(w: int, make_env_fn: MakeEnvFn, n: int, seed: Optional[int], conn: Any,
                 cmd_sem: Any, done_sem: Any, cpus: Optional[List[int]], probe: bool, spin_s: float) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    ppid = os.getppid()
    shm = None
    layout = None
    env = None
    try:
        if cpus:
            os.sched_setaffinity(0, cpus)
        torch.set_num_threads(1)
        env = make_env_fn(n, seed)
        if int(env.num_envs) != n:
            raise ValueError(f"make_env_fn({n}, seed) returned an env with num_envs={env.num_envs}")
        if canonical_device(env.device).type != "cpu":
            raise ValueError(f"make_env_fn must return a CPU env, got device {env.device}")
        info = {"obs_space": env.single_observation_space, "act_space": env.single_action_space,
                "max_episode_steps": getattr(env, "max_episode_steps", None),
                "normalize_obs_hint": getattr(env, "normalize_obs_hint", None), "pid": os.getpid(),
                "autoreset_mode": getattr(env, "autoreset_mode", None),
                "state_space": getattr(env, "single_state_space", None),
                "episode_metrics": callable(getattr(env, "episode_metrics", None)),
                "spec": _probe_spec(make_env_fn) if probe else None}
        conn.send(("ready", info))
        msg = conn.recv()
        if msg[0] != "attach":
            return
        _, shm_name, layout, lo, hi, extra_keys = msg
        shm = shared_memory.SharedMemory(name=shm_name)
        conn.send(("attached", None))
        _serve(w, env, conn, cmd_sem, done_sem, shm.buf, layout, lo, hi, extra_keys, ppid, spin_s)
    except BaseException as e:  # noqa: BLE001 - everything goes back to the main process
        tb = traceback.format_exc()
        try:
            if shm is not None and layout is not None:
                layout.views(shm.buf)["status"][w] = 1
            conn.send(("error", f"{type(e).__name__}: {e}\n{tb}"))
        except BaseException:
            pass
        done_sem.release()
        os._exit(1)  # no cleanup: the traceback still references the views
    try:
        if env is not None:
            env.close()
    except Exception:
        pass
    if shm is not None:
        shm.close()


# ---------------------------------------------------------------------------
# resources (owned by a weakref.finalize, so GC and interpreter exit clean up)
# ---------------------------------------------------------------------------
class WorkerResources:
    def __init__(self) -> None:
        self.procs: List[Any] = []
        self.conns: List[Any] = []
        self.cmd_sems: List[Any] = []
        self.done_sems: List[Any] = []
        self.shm: Optional[shared_memory.SharedMemory] = None
        self.views: Dict[str, np.ndarray] = {}
        #: the cores the workers keep busy, given back to this process at shutdown
        self.cores: Optional[CoreReservation] = None

    def shutdown(self) -> None:
        if self.cores is not None:
            self.cores.release()
        cmd = self.views.get("cmd")
        for w, p in enumerate(self.procs):
            if p.is_alive() and cmd is not None:
                try:
                    cmd[w] = CMD_CLOSE
                    self.cmd_sems[w].release()
                except Exception:
                    pass
            elif p.is_alive():  # still in the handshake
                try:
                    self.conns[w].send(("close",))
                except Exception:
                    pass
        started = [p for p in self.procs if getattr(p, "_popen", None) is not None]
        deadline = time.monotonic() + 3.0
        for p in started:
            p.join(timeout=max(0.0, deadline - time.monotonic()))
        for p in started:
            if p.is_alive():
                p.terminate()
                p.join(timeout=1.0)
            if p.is_alive():
                p.kill()
                p.join(timeout=1.0)
        for c in self.conns:
            try:
                c.close()
            except Exception:
                pass
        for p in self.procs:
            try:
                p.close()
            except Exception:
                pass
        self.procs = []
        self.views = {}
        cmd = None
        if self.shm is not None:
            try:
                self.shm.close()
            except BufferError:  # a view is still referenced somewhere; the unlink below still frees it
                pass
            try:
                self.shm.unlink()
            except FileNotFoundError:
                pass
            self.shm = None


# ---------------------------------------------------------------------------
# the env
# ---------------------------------------------------------------------------
def resolve_affinity(affinity: Any, num_workers: int, num_groups: int) -> List[Optional[List[int]]]:
    if affinity is None:
        return [None] * num_workers
    if isinstance(affinity, str):
        if affinity != "auto":
            raise ValueError(f"affinity must be None, 'auto' or a per-worker list, got {affinity!r}")
        if not hasattr(os, "sched_setaffinity"):
            return [None] * num_workers
        cpus = sorted(os.sched_getaffinity(0))
        per_group = num_workers // num_groups
        return [[cpus[(w % per_group) % len(cpus)]] for w in range(num_workers)]
    affinity = list(affinity)
    if len(affinity) != num_workers:
        raise ValueError(f"affinity lists {len(affinity)} entries for {num_workers} workers")
    out: List[Optional[List[int]]] = []
    for a in affinity:
        if a is None:
            out.append(None)
        elif isinstance(a, (int, np.integer)):
            out.append([int(a)])
        else:
            out.append([int(x) for x in a])
    return out
