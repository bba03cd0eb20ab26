"""Process-isolated simulators: the sim lives in its own process, imported first.

Why: Isaac Gym must be imported *before* torch (``gymdeps`` raises "PyTorch was
imported before isaacgym modules"), allows one sim per process, and supports
only Python <= 3.8 -- while a Ray/RLlib worker has imported torch long before
it builds an env, and ray 2.60 needs Python >= 3.9. So the simulator runs in a
separate, bare process (optionally a *different* interpreter,
``python_executable``) that imports ``isaacgym`` first, builds the task and
serves ``step``/``reset`` over a local socket; bulk data never goes through
the socket:

* **CPU tensors** live in ``multiprocessing.shared_memory`` blocks the worker
  creates; both sides view them as torch tensors (``torch.from_numpy``);
* **CUDA tensors** are allocated by the worker and shared once with CUDA IPC
  (``torch.multiprocessing.reductions.reduce_tensor``); afterwards every step
  writes into the same device memory.

Per step the parent writes the actions into the shared action buffer, sends one
byte, and the worker answers with an empty message after copying
``obs``/``states``/``rew``/``reset``/tensor ``extras`` into their shared
buffers (a pickled update only when a buffer appears or changes shape, or for
non-tensor extras). On CUDA each side synchronises its stream before signalling
so the other never reads half-written memory. The buffers are overwritten in
place on the next step -- exactly like Isaac Gym's own ``rew_buf``/``reset_buf``
-- so consumers must copy (the adapter in :mod:`rllib_fast.envs.isaacgym` does).

Why not ``multiprocessing`` spawn: spawn re-imports the parent's ``__main__``
in the child (torch first, breaking the import order) and must run the same
interpreter. This module is therefore also a *script*: it imports only the
standard library at module level (torch after the pre-imports), never imports
the ``rllib_fast`` package, and keeps Python 3.8 syntax. Task classes from
``rllib_fast`` (the stand-ins) and from a ``__main__`` script are loaded by file
path in the worker.

The parent side is :class:`IsolatedTask`, a proxy with the VecTask surface the
adapter uses (``step``, ``reset``, ``zero_actions``, attributes via RPC).
"""
from __future__ import annotations

import copy
import importlib
import importlib.util
import os
import pickle
import random
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import weakref
from multiprocessing.connection import Client, Listener
from typing import Any, Dict, List, Optional, Sequence

__all__ = ["IsolatedTask", "IsolatedWorkerError", "build_task", "load_object", "seed_everything",
           "object_ref"]

_ADDR_ENV = "RLLIB_FAST_ISOLATED_ADDRESS"
_KEY_ENV = "RLLIB_FAST_ISOLATED_AUTHKEY"
_PATH_ENV = "RLLIB_FAST_ISOLATED_SYS_PATH"


class IsolatedWorkerError(RuntimeError):
    """The simulator process failed (its traceback and log tail are attached)."""


# ---------------------------------------------------------------------------
# building a task (used in-process and in the worker)
# ---------------------------------------------------------------------------
def seed_everything(seed: Optional[int], torch_deterministic: bool = False) -> None:
    """Seed Python, numpy and torch (all devices) *before* a sim is created:
    ``isaacgymenvs.make`` accepts a seed and ignores it, and Isaac tasks draw
    reset noise from the global torch RNG (IsaacLab#904: seed before creation)."""
    if seed is None:
        return
    import numpy as np
    import torch

    os.environ["PYTHONHASHSEED"] = str(seed)
    random.seed(seed)
    np.random.seed(seed % (2 ** 32))
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)
    if torch_deterministic:
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
        torch.backends.cudnn.benchmark = False
        torch.backends.cudnn.deterministic = True
        torch.use_deterministic_algorithms(True)


def load_object(ref: str) -> Any:
    """``"package.module:Qual.Name"`` or ``"/path/to/file.py:Qual.Name"``."""
    if not isinstance(ref, str) or ":" not in ref:
        raise ValueError(f"object reference {ref!r} must look like 'module:Name' or '/path/file.py:Name'")
    where, _, qual = ref.rpartition(":")
    if where.endswith(".py"):
        name = "_rllib_fast_isolated_" + os.path.splitext(os.path.basename(where))[0]
        module = sys.modules.get(name)
        if module is None or getattr(module, "__file__", None) != where:
            spec = importlib.util.spec_from_file_location(name, where)
            if spec is None or spec.loader is None:
                raise ImportError(f"cannot load {where!r}")
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
    else:
        module = importlib.import_module(where)
    obj = module
    for part in qual.split("."):
        obj = getattr(obj, part)
    return obj


def object_ref(obj: Any) -> str:
    """A reference :func:`load_object` resolves in a bare worker: by file path
    for objects of ``rllib_fast`` (importing the package would import Ray) and
    of ``__main__`` (its name means something else in the worker), by module
    name otherwise."""
    if isinstance(obj, str):
        where, _, qual = obj.rpartition(":")
        if where.startswith("rllib_fast.") and not where.endswith(".py"):
            spec = importlib.util.find_spec(where)
            if spec is not None and spec.origin:
                return f"{spec.origin}:{qual}"
        return obj
    module = sys.modules.get(obj.__module__)
    qual = obj.__qualname__
    if obj.__module__ == "__main__" or obj.__module__.startswith("rllib_fast.") or \
            obj.__module__.startswith("_rllib_fast_isolated_"):
        path = getattr(module, "__file__", None)
        if not path:
            raise ValueError(f"{obj!r} is defined in {obj.__module__!r} without a file; "
                             "define it in an importable module")
        return f"{os.path.abspath(path)}:{qual}"
    return f"{obj.__module__}:{qual}"


def _deep_update(base: Dict[str, Any], upd: Dict[str, Any]) -> Dict[str, Any]:
    for k, v in upd.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            _deep_update(base[k], v)
        else:
            base[k] = v
    return base


def build_task(spec: Dict[str, Any]) -> Any:
    """Create the simulator task described by ``spec`` (seeded first).

    ``spec["kind"]``:

    * ``"class"``: ``task_class`` (object or reference) is called with the
      IsaacGymEnvs constructor signature ``(cfg=..., rl_device=...,
      sim_device=..., graphics_device_id=..., headless=...,
      virtual_screen_capture=False, force_render=False)``; ``cfg`` is the task
      config dict (deep-merged over ``make_cfg()`` of the module of the class
      or of its nearest base class offering one, as the stand-ins do) with
      ``cfg["env"]["numEnvs"] = num_envs``;
    * ``"isaacgymenvs"``: ``isaacgymenvs.make(...)`` for ``task`` with a Hydra
      config composed from ``task=<task>``, ``num_envs``, ``seed``, the devices
      and the user's ``overrides`` (``make`` itself ignores ``seed`` and,
      without a ``cfg``, any override).
    """
    seed_everything(spec.get("seed"), bool(spec.get("torch_deterministic", False)))
    kind = spec["kind"]
    num_envs = int(spec["num_envs"])
    if kind == "class":
        cls = spec["task_class"]
        if isinstance(cls, str):
            cls = load_object(cls)
        cfg = copy.deepcopy(spec.get("cfg") or {})
        make_cfg = None
        for klass in getattr(cls, "__mro__", (cls,)):  # the nearest module offering make_cfg()
            make_cfg = getattr(sys.modules.get(getattr(klass, "__module__", ""), None), "make_cfg", None)
            if callable(make_cfg):
                break
        if callable(make_cfg):
            cfg = _deep_update(make_cfg(), cfg)
        if "env" not in cfg:
            raise ValueError(f"task class {cls!r} needs a task config dict `cfg` with an 'env' section "
                             "(IsaacGymEnvs layout: cfg['env'], cfg['sim'], ...)")
        cfg["env"]["numEnvs"] = num_envs
        return cls(cfg=cfg, rl_device=spec["rl_device"], sim_device=spec["sim_device"],
                   graphics_device_id=int(spec.get("graphics_device_id", -1)),
                   headless=bool(spec.get("headless", True)), virtual_screen_capture=False,
                   force_render=False)
    if kind == "isaacgymenvs":
        import isaacgym  # noqa: F401  (must precede torch; the worker pre-imports it)
        import isaacgymenvs
        from hydra import compose, initialize_config_dir
        from hydra.core.global_hydra import GlobalHydra

        task = spec["task"]
        sim_device, rl_device = spec["sim_device"], spec["rl_device"]
        overrides = [f"task={task}", f"num_envs={num_envs}", f"seed={int(spec.get('seed') or 0)}",
                     f"sim_device={sim_device}", f"rl_device={rl_device}",
                     f"headless={bool(spec.get('headless', True))}",
                     f"pipeline={'gpu' if sim_device.startswith('cuda') else 'cpu'}",
                     *list(spec.get("overrides") or ())]
        if GlobalHydra.instance().is_initialized():
            GlobalHydra.instance().clear()
        cfg_dir = os.path.join(os.path.dirname(isaacgymenvs.__file__), "cfg")
        try:
            ctx = initialize_config_dir(config_dir=cfg_dir, version_base="1.1")
        except TypeError:  # hydra 1.1 has no version_base
            ctx = initialize_config_dir(config_dir=cfg_dir)
        with ctx:
            cfg = compose(config_name="config", overrides=overrides)
        return isaacgymenvs.make(seed=int(spec.get("seed") or 0), task=task, num_envs=num_envs,
                                 sim_device=sim_device, rl_device=rl_device,
                                 graphics_device_id=int(spec.get("graphics_device_id", -1)),
                                 headless=bool(spec.get("headless", True)), multi_gpu=False,
                                 virtual_screen_capture=False, force_render=False, cfg=cfg)
    raise ValueError(f"unknown task kind {kind!r}; allowed: 'class', 'isaacgymenvs'")


# ---------------------------------------------------------------------------
# values crossing the process boundary
# ---------------------------------------------------------------------------
def _portable(value: Any) -> Any:
    """Picklable without the worker's modules: tensors to CPU, old-gym spaces to
    plain descriptors (the parent turns them into gymnasium spaces)."""
    import numpy as np
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, (str, bytes, int, float, bool, type(None), np.ndarray, np.generic)):
        return value
    if isinstance(value, dict):
        return {k: _portable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_portable(v) for v in value)
    if hasattr(value, "low") and hasattr(value, "high") and hasattr(value, "shape"):
        return {"__space__": "Box", "low": np.asarray(value.low), "high": np.asarray(value.high),
                "dtype": str(np.dtype(getattr(value, "dtype", np.float32)))}
    if hasattr(value, "n") and type(value).__name__ == "Discrete":
        return {"__space__": "Discrete", "n": int(value.n)}
    if callable(value):
        return {"__callable__": repr(value)}
    return {"__repr__": repr(value)}


class _Buffers:
    """Worker side: one persistent shared buffer per output key."""

    def __init__(self):
        self.tensors: Dict[str, Any] = {}
        self._shms: List[Any] = []

    def allocate(self, key: str, shape: Sequence[int], dtype: Any, device: Any):
        import numpy as np
        import torch

        device = torch.device(device)
        if device.type == "cuda":
            from torch.multiprocessing.reductions import reduce_tensor

            t = torch.zeros(tuple(shape), dtype=dtype, device=device)
            desc = ("cuda", pickle.dumps(reduce_tensor(t)))
        else:
            from multiprocessing import shared_memory

            np_dtype = torch.empty(0, dtype=dtype).numpy().dtype
            nbytes = max(1, int(np.prod(shape, dtype=np.int64)) * np_dtype.itemsize)
            shm = shared_memory.SharedMemory(create=True, size=nbytes)
            self._shms.append(shm)
            t = torch.from_numpy(np.ndarray(tuple(shape), dtype=np_dtype, buffer=shm.buf))
            desc = ("shm", shm.name, tuple(shape), np_dtype.str)
        self.tensors[key] = t
        return t, desc

    def publish(self, key: str, value: Any, new: Dict[str, Any]) -> None:
        t = self.tensors.get(key)
        if t is None or t.shape != value.shape or t.dtype != value.dtype or t.device != value.device:
            t, desc = self.allocate(key, value.shape, value.dtype, value.device)
            new[key] = desc
        t.copy_(value)

    def close(self) -> None:
        self.tensors.clear()
        for shm in self._shms:
            try:
                shm.close()
                shm.unlink()
            except Exception:
                pass
        self._shms.clear()


def _flatten_extras(extras: Dict[str, Any], prefix: str = ""):
    for k, v in extras.items():
        if isinstance(v, dict):
            yield from _flatten_extras(v, f"{prefix}{k}/")
        else:
            yield f"{prefix}{k}", v


def _serve(conn) -> None:
    """Worker loop: build the task from the spec, then answer commands."""
    import torch

    msg = pickle.loads(conn.recv_bytes())
    task = build_task(msg["spec"])
    bufs = _Buffers()
    device = torch.device(getattr(task, "rl_device", "cpu"))
    act_shape = (int(task.num_envs), int(getattr(task, "num_actions", getattr(task, "num_acts", 1))))
    act, act_desc = bufs.allocate("__actions__", act_shape, torch.float32, device)
    conn.send_bytes(pickle.dumps(("ready", {"actions": act_desc, "rl_device": str(device),
                                            "num_envs": int(task.num_envs)})))
    cuda = device.type == "cuda"
    last_keys: set = set()

    def publish_outputs(obs_dict, rew=None, reset=None, extras=None) -> bytes:
        nonlocal last_keys
        new: Dict[str, Any] = {}
        misc: Dict[str, Any] = {}
        keys = set()
        for k, v in obs_dict.items():
            if isinstance(v, torch.Tensor):
                bufs.publish("obs/" + k, v, new)
                keys.add("obs/" + k)
        if rew is not None:
            bufs.publish("rew", rew, new)
            bufs.publish("reset", reset, new)
            keys |= {"rew", "reset"}
            for k, v in _flatten_extras(extras or {}):
                if isinstance(v, torch.Tensor):
                    bufs.publish("extras/" + k, v, new)
                    keys.add("extras/" + k)
                else:
                    misc[k] = _portable(v)
        if cuda:
            torch.cuda.synchronize(device)
        if not new and not misc and keys == last_keys:
            return b""
        changed = keys != last_keys
        last_keys = keys
        return b"U" + pickle.dumps({"new": new, "misc": misc, "keys": sorted(keys) if changed else None})

    while True:
        try:
            data = conn.recv_bytes()
        except (EOFError, OSError):
            break
        try:
            if data == b"S":
                out = task.step(act)
                conn.send_bytes(publish_outputs(*out))
            elif data == b"Q":
                conn.send_bytes(b"")
                break
            else:
                cmd, args = pickle.loads(data[1:])
                if cmd == "reset":
                    reply = publish_outputs(task.reset())
                    conn.send_bytes(b"R" + pickle.dumps(reply))
                    continue
                if cmd == "getattr":
                    result = _portable(getattr(task, args[0]))
                elif cmd == "call":
                    name, a, kw = args
                    result = _portable(getattr(task, name)(*a, **kw))
                elif cmd == "fill":
                    getattr(task, args[0]).fill_(args[1])
                    result = None
                elif cmd == "randomize_progress":
                    buf = task.progress_buf
                    buf.copy_(torch.randint_like(buf, 0, max(1, int(task.max_episode_length))))
                    result = None
                elif cmd == "seed":
                    seed_everything(args[0])
                    result = None
                else:
                    raise ValueError(f"unknown command {cmd!r}")
                conn.send_bytes(b"R" + pickle.dumps(result))
        except Exception:
            conn.send_bytes(b"E" + traceback.format_exc().encode())
    try:
        if hasattr(task, "close"):
            task.close()
    finally:
        bufs.close()


def _worker_main(argv: Sequence[str]) -> int:
    preimport: List[str] = []
    if "--preimport" in argv:
        preimport = [m for m in argv[argv.index("--preimport") + 1].split(",") if m]
    conn = Client(os.environ[_ADDR_ENV], authkey=bytes.fromhex(os.environ[_KEY_ENV]))
    extra = [p for p in os.environ.get(_PATH_ENV, "").split(os.pathsep) if p and p not in sys.path]
    sys.path[:0] = extra
    try:
        for name in preimport:  # before anything imports torch
            importlib.import_module(name)
        _serve(conn)
    except BaseException:
        try:
            conn.send_bytes(b"E" + traceback.format_exc().encode())
        except Exception:
            pass
        return 1
    return 0


# ---------------------------------------------------------------------------
# parent side
# ---------------------------------------------------------------------------
def _attach(desc) -> Any:
    import numpy as np
    import torch

    if desc[0] == "cuda":
        fn, args = pickle.loads(desc[1])
        return fn(*args), None
    from multiprocessing import resource_tracker, shared_memory

    _, name, shape, dtype = desc
    shm = shared_memory.SharedMemory(name=name)
    try:  # the worker owns (and unlinks) the block; do not let our tracker unlink it too
        resource_tracker.unregister(shm._name, "shared_memory")  # type: ignore[attr-defined]
    except Exception:
        pass
    return torch.from_numpy(np.ndarray(tuple(shape), dtype=np.dtype(dtype), buffer=shm.buf)), shm


def _from_portable(value: Any) -> Any:
    if isinstance(value, dict):
        if "__space__" in value:
            return _SpaceSpec(value)
        return {k: _from_portable(v) for k, v in value.items()}
    return value


class _SpaceSpec:
    """An old-gym space as seen from the parent (``low``, ``high``, ``shape``,
    ``dtype`` or ``n``); the adapter converts it to gymnasium."""

    def __init__(self, d: Dict[str, Any]):
        self.kind = d["__space__"]
        if self.kind == "Box":
            self.low, self.high = d["low"], d["high"]
            self.shape = tuple(self.low.shape)
            self.dtype = d["dtype"]
        else:
            self.n = d["n"]

    def __repr__(self) -> str:
        return f"{self.kind}Spec({getattr(self, 'shape', getattr(self, 'n', ''))})"


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
        try:
            proc.wait(timeout=5)
        except Exception:
            pass


class IsolatedTask:
    """A VecTask served by a separate simulator process.

    Args:
        spec: what :func:`build_task` builds (``kind``, ``num_envs``, devices,
            ``seed``, ``task_class``/``cfg`` or ``task``/``overrides``).
        preimport: modules the worker imports before anything else (``isaacgym``).
        python_executable: interpreter of the worker (default: this one); may be
            another Python (Isaac Gym needs <= 3.8) with torch and the simulator.
        sys_path: entries prepended to the worker's ``sys.path`` (default: this
            process's path when the interpreter is the same, else the cwd).
        startup_timeout: seconds to wait for the task to be built.
        log_path: file receiving the worker's stdout/stderr (default: a temp file).

    ``step``/``reset`` return the same shared tensors every time, overwritten
    in place by the next call (like Isaac Gym's live buffers).
    """

    # the adapter copies every output of a proxy (they are shared buffers)
    OUTPUTS_ARE_SHARED_BUFFERS = True

    def __init__(self, spec: Dict[str, Any], preimport: Sequence[str] = (),
                 python_executable: Optional[str] = None,
                 sys_path: Optional[Sequence[str]] = None, startup_timeout: float = 300.0,
                 log_path: Optional[str] = None):
        import torch

        python = python_executable or sys.executable
        if sys_path is None:
            same = os.path.realpath(python) == os.path.realpath(sys.executable)
            sys_path = [p for p in sys.path if p] if same else [os.getcwd()]
        spec = dict(spec)
        if "task_class" in spec and not isinstance(spec["task_class"], str):
            spec["task_class"] = object_ref(spec["task_class"])
        elif isinstance(spec.get("task_class"), str):
            spec["task_class"] = object_ref(spec["task_class"])
        self.spec = spec
        self._tmpdir = tempfile.mkdtemp(prefix="rllib_fast_sim_")
        address = os.path.join(self._tmpdir, "sock")
        key = os.urandom(32)
        listener = Listener(address, family="AF_UNIX", authkey=key)
        self.log_path = log_path or os.path.join(self._tmpdir, "worker.log")
        self._log = open(self.log_path, "ab")
        env = dict(os.environ, **{_ADDR_ENV: address, _KEY_ENV: key.hex(),
                                  _PATH_ENV: os.pathsep.join(sys_path)})
        cmd = [python, "-u", os.path.abspath(__file__)]
        if preimport:
            cmd += ["--preimport", ",".join(preimport)]
        self._proc = subprocess.Popen(cmd, env=env, stdout=self._log, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL)
        self._finalizer = weakref.finalize(self, _kill, self._proc)
        holder: List[Any] = []
        accept = threading.Thread(target=lambda: holder.append(listener.accept()), daemon=True)
        accept.start()
        deadline = time.monotonic() + startup_timeout
        while accept.is_alive() and self._proc.poll() is None and time.monotonic() < deadline:
            accept.join(0.02)
        if not holder:
            listener.close()
            _kill(self._proc)
            raise IsolatedWorkerError(f"simulator process did not connect ({self._why()})")
        listener.close()
        self._conn = holder[0]
        self._conn.send_bytes(pickle.dumps({"spec": spec}))
        reply = self._recv(timeout=startup_timeout)
        if reply[:1] == b"E":
            self.close()
            raise IsolatedWorkerError(f"simulator process failed to build the task:\n{reply[1:].decode()}")
        _, info = pickle.loads(reply)
        self._shms: List[Any] = []
        self._actions = self._attach(info["actions"])
        self.rl_device = info["rl_device"]
        self.device = torch.device(self.rl_device)
        self.num_envs = int(info["num_envs"])
        self._cuda = self.device.type == "cuda"
        self._bufs: Dict[str, Any] = {}
        self.obs_dict: Dict[str, Any] = {}
        self.extras: Dict[str, Any] = {}
        self._attrs: Dict[str, Any] = {}

    # -- plumbing -----------------------------------------------------------------
    def _why(self) -> str:
        code = self._proc.poll()
        try:
            self._log.flush()
            with open(self.log_path, "rb") as f:
                tail = f.read()[-3000:].decode(errors="replace")
        except OSError:
            tail = ""
        state = "running" if code is None else f"exit code {code}"
        return f"{state}; log {self.log_path}:\n{tail}"

    def _recv(self, timeout: Optional[float] = None) -> bytes:
        try:
            if timeout is not None:
                deadline = time.monotonic() + timeout
                while not self._conn.poll(0.05):
                    if self._proc.poll() is not None or time.monotonic() > deadline:
                        raise EOFError
            return self._conn.recv_bytes()
        except (EOFError, OSError, ConnectionError):
            raise IsolatedWorkerError(f"simulator process died ({self._why()})") from None

    def _send(self, data: bytes) -> None:
        try:
            self._conn.send_bytes(data)
        except (OSError, ConnectionError):
            raise IsolatedWorkerError(f"simulator process died ({self._why()})") from None

    def _attach(self, desc) -> Any:
        t, shm = _attach(desc)
        if shm is not None:
            self._shms.append(shm)
        return t

    def _apply(self, reply: bytes) -> None:
        if not reply:
            return
        if reply[:1] == b"E":
            raise IsolatedWorkerError(f"simulator process raised:\n{reply[1:].decode()}")
        upd = pickle.loads(reply[1:])
        for key, desc in upd["new"].items():
            self._bufs[key] = self._attach(desc)
        if upd["keys"] is not None:
            for key in list(self._bufs):
                if key not in upd["keys"]:
                    del self._bufs[key]
            self.obs_dict.clear()
            self.extras.clear()
        for key, t in self._bufs.items():
            kind, _, name = key.partition("/")
            if kind == "obs":
                self.obs_dict[name] = t
            elif kind == "extras":
                self.extras[name] = t
        self.extras.update({k: _from_portable(v) for k, v in upd["misc"].items()})

    def _rpc(self, cmd: str, *args: Any) -> Any:
        self._send(b"C" + pickle.dumps((cmd, args)))
        reply = self._recv()
        if reply[:1] == b"E":
            raise IsolatedWorkerError(f"simulator process raised in {cmd}{args!r}:\n{reply[1:].decode()}")
        return pickle.loads(reply[1:])

    # -- the VecTask surface --------------------------------------------------------
    def step(self, actions: Any):
        import torch

        self._actions.copy_(actions)
        if self._cuda:
            torch.cuda.current_stream(self.device).synchronize()
        self._send(b"S")
        self._apply(self._recv())
        return self.obs_dict, self._bufs["rew"], self._bufs["reset"], self.extras

    def reset(self):
        self._apply(self._rpc("reset"))
        return self.obs_dict

    def zero_actions(self):
        import torch

        return torch.zeros(tuple(self._actions.shape), dtype=torch.float32, device=self.device)

    def fill_buffer(self, name: str, value: Any) -> None:
        self._rpc("fill", name, value)

    def randomize_progress(self) -> None:
        self._rpc("randomize_progress")

    def seed(self, seed: int) -> None:
        self._rpc("seed", int(seed))

    def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """Call a task method in the simulator process (slow path)."""
        return _from_portable(self._rpc("call", name, args, kwargs))

    _STATIC = ("num_envs", "num_obs", "num_states", "num_actions", "num_acts", "observation_space",
               "state_space", "action_space", "clip_obs", "clip_actions", "max_episode_length",
               "control_freq_inv", "num_agents")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        attrs = self.__dict__.get("_attrs")
        if attrs is not None and name in attrs:
            return attrs[name]
        try:
            value = _from_portable(self._rpc("getattr", name))
        except IsolatedWorkerError as e:
            if "AttributeError" in str(e):
                raise AttributeError(name) from None
            raise
        if name in self._STATIC and attrs is not None:
            attrs[name] = value
        return value

    def close(self) -> None:
        conn = self.__dict__.get("_conn")
        if conn is not None:
            try:
                conn.send_bytes(b"Q")
                if conn.poll(5):
                    conn.recv_bytes()
            except Exception:
                pass
            conn.close()
            self._conn = None
        proc = self.__dict__.get("_proc")
        if proc is not None:
            try:
                proc.wait(timeout=5)
            except Exception:
                _kill(proc)
        self._bufs = {}
        self.obs_dict, self.extras = {}, {}
        self.__dict__["_actions"] = None
        crashed = proc is not None and proc.returncode not in (0, None)
        for shm in self.__dict__.get("_shms", []):
            if crashed:  # a killed worker could not unlink its blocks
                try:
                    shm.unlink()
                except Exception:
                    pass
            try:
                shm.close()
            except Exception:  # a tensor view may still be alive; the worker unlinked the block
                pass
        self._shms = []
        log = self.__dict__.get("_log")
        if log is not None and not log.closed:
            log.close()

    @property
    def alive(self) -> bool:
        return self._proc.poll() is None


if __name__ == "__main__":
    sys.exit(_worker_main(sys.argv[1:]))
