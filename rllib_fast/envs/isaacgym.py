"""Isaac Gym (IsaacGymEnvs ``VecTask``) as a tensor vector env: ``isaacgym:<Task>``.

:class:`IsaacGymVecEnv` turns a VecTask's ``step(actions) -> (obs_dict, rew,
reset, extras)`` into the contract's :class:`~rllib_fast.envs.base.Step`:

* **aliasing**: ``rew`` and ``reset`` are the task's live ``rew_buf``/``reset_buf``
  (``.to(rl_device)`` is a no-op on one device) and are overwritten in place by
  the next step, so both are copied (``to(dtype, copy=True)``). ``obs`` is copied
  when it shares memory with the previous step's or with ``obs_buf``/``states_buf``
  (a task that returns its buffer), and always for a process-isolated task
  (shared buffers); tensor ``extras`` are always copied.
* **time-outs**: ``reset`` includes time-limit resets and ``extras["time_outs"]``
  marks which were time-outs: ``terminated = reset & ~time_outs``,
  ``truncated = time_outs`` (so learners bootstrap through time limits).
  A VecTask merges both signals into ``reset_buf``, so an env that fails on the
  very step its time limit runs out reads as a time-out (bootstrapped from the
  failed state): the reverse of the rule the other sources follow (a
  termination wins). IsaacGymEnvs exposes nothing to tell them apart; it
  affects one step in ``max_episode_length`` at most.
* **one-step-late reset**: IsaacGymEnvs returns the *terminal* observation with
  ``reset=1`` and resets the env inside the *next* ``step`` -- in
  ``pre_physics_step`` (ShadowHand, AllegroHand, BallBalance) or at the start of
  ``post_physics_step`` (Ant, Humanoid, Anymal, FrankaCubeStack). Either way the
  next transition starts from the terminal observation but ends in the new
  episode, so it is marked ``valid=False`` (reward 0, no flags); ``final_obs`` is
  ``obs`` itself (the terminal observation where ``reset=1``).
* **first observation**: ``reset_buf`` starts at ones and ``VecTask.reset()``
  does not reset the sim, so :meth:`IsaacGymVecEnv.reset` flags every env and
  takes one zero-action step: the returned observation is a real post-reset one.
* **asymmetric critic input**: ``obs_dict["states"]`` (tasks with
  ``numStates > 0``) is exposed as ``Step.extras["states"]`` on every step, as
  ``env.states`` (latest, including after ``reset``) and its space as
  ``env.single_state_space`` (None without states). Other tensor extras
  (``true_objective``, ``consecutive_successes``, ...) are in ``Step.extras``.
* **clipping**: the VecTask clamps actions to ``±clipActions`` and observations
  to ``±clipObservations`` itself; the observation space carries those bounds.
  ``clip_obs``/``clip_actions`` arguments clamp again on our side (e.g. to clip
  tighter than the task config).
* **spaces**: old ``gym`` spaces become gymnasium ``Box`` spaces (float32).
* **seeding**: ``isaacgymenvs.make`` ignores its seed, and tasks draw reset noise
  from the process-global torch RNG, so Python/numpy/torch are seeded *before*
  the sim is created. In-process, ``reset(seed)`` does not reseed (that would
  clobber the learner's RNG stream); a process-isolated sim is reseeded.
* **process constraints**: Isaac Gym must be imported before torch and allows one
  sim per process. ``isolated="auto"`` (default) therefore runs the sim in its
  own process (:mod:`rllib_fast.envs.isolated`) unless ``isaacgym`` was already
  imported here; in-process creation with torch imported first raises
  :class:`IsaacGymImportOrderError`, and a second in-process sim raises
  :class:`IsaacGymSimExistsError` (evaluation envs need ``isolated=True``).

Sources of a task (env_config keys of ``isaacgym:<Task>``): ``isaacgymenvs.make``
for ``<Task>`` (default), ``task_class`` (a VecTask subclass or ``"module:Class"``
built with ``cfg``), or ``task`` (an already-built VecTask instance, in-process).
"""
from __future__ import annotations

import importlib.util
import sys
import weakref
from typing import Any, Dict, Optional, Sequence

import gymnasium as gym
import numpy as np
import torch

from gymnasium.vector import AutoresetMode

from .base import Step, TensorVecEnv, canonical_device, check_num_envs
from .registry import register_prefix

__all__ = ["IsaacGymVecEnv", "make_isaacgym", "to_gymnasium_space", "IsaacGymImportOrderError",
           "IsaacGymSimExistsError", "IsaacGymNotInstalledError"]


class IsaacGymImportOrderError(ImportError):
    """torch was imported before isaacgym in a process that should host the sim."""


class IsaacGymSimExistsError(RuntimeError):
    """A second Isaac Gym sim was requested in one process."""


class IsaacGymNotInstalledError(ImportError):
    """isaacgym / isaacgymenvs cannot be imported by the simulator's interpreter."""


# live in-process sims that allow only one per process (weak refs to adapters)
_IN_PROCESS_SIMS: "weakref.WeakSet[IsaacGymVecEnv]" = weakref.WeakSet()


def to_gymnasium_space(space: Any, clip: Optional[float] = None) -> gym.Space:
    """An old-gym (or gymnasium, or descriptor) space as a gymnasium space;
    ``clip`` narrows infinite/wider Box bounds to ``±clip``."""
    if isinstance(space, gym.spaces.Discrete) or (hasattr(space, "n") and not hasattr(space, "low")):
        return gym.spaces.Discrete(int(space.n))
    if not (hasattr(space, "low") and hasattr(space, "high")):
        raise TypeError(f"cannot convert space {space!r} (need a Box-like space with low/high or a Discrete)")
    low = np.asarray(space.low, dtype=np.float32)
    high = np.asarray(space.high, dtype=np.float32)
    if clip is not None and np.isfinite(clip):
        low, high = np.maximum(low, -clip), np.minimum(high, clip)
    return gym.spaces.Box(low=low, high=high, dtype=np.float32)


def _shares_memory(a: torch.Tensor, b: Any) -> bool:
    return isinstance(b, torch.Tensor) and b.device == a.device and \
        a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def _finite(x: Any) -> Optional[float]:
    if x is None:
        return None
    x = float(x)
    return x if np.isfinite(x) else None


class IsaacGymVecEnv(TensorVecEnv):
    """An IsaacGymEnvs ``VecTask`` (in-process or a process-isolated proxy).

    VecTasks reset one step late (the step after a done is ``valid=False``); the
    class says so with ``autoreset_mode = NEXT_STEP``, which FrameStack and the
    gymnasium bridge (``TensorVecEnvToGym``) read.

    Args:
        task: the VecTask (anything with its ``step``/``reset``/buffer surface).
        device: device of the returned tensors (default: the task's ``rl_device``).
        clip_obs / clip_actions: extra clamping on our side (None: rely on the task's).
        close_task: whether :meth:`close` closes the task.
    """

    autoreset_mode = AutoresetMode.NEXT_STEP

    def __init__(self, task: Any, device: Any = None, clip_obs: Optional[float] = None,
                 clip_actions: Optional[float] = None, close_task: bool = True):
        self.task = task
        self.num_envs = check_num_envs(task.num_envs)
        self._task_device = canonical_device(getattr(task, "rl_device", "cpu"))
        self.device = canonical_device(device) if device is not None else self._task_device
        self._clip_obs = _finite(clip_obs)
        self._clip_actions = _finite(clip_actions)
        obs_clip = min(c for c in (self._clip_obs, _finite(getattr(task, "clip_obs", None)), np.inf)
                       if c is not None)
        self.single_observation_space = to_gymnasium_space(task.observation_space, clip=obs_clip)
        self.single_action_space = to_gymnasium_space(task.action_space)
        num_states = int(getattr(task, "num_states", 0) or 0)
        self.single_state_space = (to_gymnasium_space(task.state_space, clip=obs_clip)
                                   if num_states > 0 else None)
        mel = getattr(task, "max_episode_length", None)
        self.max_episode_steps = int(mel) if mel is not None else None
        self._shared_outputs = bool(getattr(task, "OUTPUTS_ARE_SHARED_BUFFERS", False))
        self._isolated = hasattr(task, "fill_buffer")
        self._close_task = close_task
        self._prev_reset = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        self._last_obs: Optional[torch.Tensor] = None
        self.states: Optional[torch.Tensor] = None
        self.last_extras: Dict[str, Any] = {}
        self.scalar_extras: Dict[str, torch.Tensor] = {}
        self._closed = False

    # -- helpers ------------------------------------------------------------------
    def _own(self, t: torch.Tensor, prev: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``t`` on our device, as memory nobody else will overwrite: copied when
        it shares storage with what we returned last time (``prev``, still held,
        so the allocator cannot have reused it) or with the task's buffers."""
        task = self.task
        prev = self._last_obs if prev is None else prev
        alias = (self._shared_outputs or t.device != self.device
                 or (prev is not None and _shares_memory(t, prev))
                 or _shares_memory(t, getattr(task, "obs_buf", None))
                 or _shares_memory(t, getattr(task, "states_buf", None)))
        return t.to(self.device, copy=True) if alias else t

    def _task_fill(self, name: str, value: Any) -> None:
        if self._isolated:
            self.task.fill_buffer(name, value)
        else:
            getattr(self.task, name).fill_(value)

    def _obs_and_states(self, obs_dict: Dict[str, Any]) -> torch.Tensor:
        obs = self._own(obs_dict["obs"])
        if self._clip_obs is not None:
            obs = obs.clamp(-self._clip_obs, self._clip_obs)
        states = obs_dict.get("states") if self.single_state_space is not None else None
        if states is not None:
            # VecTask.get_state() clamps into a fresh tensor; copy only if it is a live buffer
            states = self._own(states, self.states)
            if self._clip_obs is not None:
                states = states.clamp(-self._clip_obs, self._clip_obs)
        self.states = states
        self._last_obs = obs
        return obs

    def _actions(self, actions: torch.Tensor) -> torch.Tensor:
        if self._clip_actions is not None:
            actions = actions.clamp(-self._clip_actions, self._clip_actions)
        return actions.to(self._task_device, torch.float32)

    # -- contract -----------------------------------------------------------------------
    def reset(self, seed: Optional[int] = None) -> torch.Tensor:
        """Flag every env for reset and take one zero-action step (VecTask's own
        ``reset()`` only packages a never-computed ``obs_buf``)."""
        if seed is not None and self._isolated:
            self.task.seed(int(seed))
        self._task_fill("reset_buf", 1)
        obs_dict, _, reset, _ = self.task.step(self.task.zero_actions())
        self._prev_reset = reset.to(self.device, torch.bool, copy=True)
        self._last_obs = None
        obs_dict = dict(obs_dict)
        obs_dict["obs"] = obs_dict["obs"].to(self.device, copy=True)  # nothing to compare with yet: own it
        if obs_dict.get("states") is not None:
            obs_dict["states"] = obs_dict["states"].to(self.device, copy=True)
        return self._obs_and_states(obs_dict)

    def step(self, actions: torch.Tensor) -> Step:
        obs_dict, rew, reset, extras = self.task.step(self._actions(actions))
        obs = self._obs_and_states(obs_dict)
        dev = self.device
        valid = ~self._prev_reset          # the step after reset=1 straddles the episode boundary
        self._prev_reset = reset.to(dev, torch.bool, copy=True)  # raw flag: a flagged reset step resets again
        done = self._prev_reset & valid
        time_outs = extras.get("time_outs") if isinstance(extras, dict) else None
        truncated = done & time_outs.to(dev, torch.bool) if time_outs is not None else torch.zeros_like(done)
        terminated = done ^ truncated      # truncated is a subset of done
        reward = rew.to(dev) * valid       # a new tensor: the copy of the live rew_buf, zeroed where invalid
        out_extras: Dict[str, torch.Tensor] = {}
        if self.states is not None:
            out_extras["states"] = self.states
        scalars: Dict[str, torch.Tensor] = {}
        for k, v in (extras.items() if isinstance(extras, dict) else ()):
            if k == "time_outs" or not isinstance(v, torch.Tensor):
                continue
            if v.dim() >= 1 and v.shape[0] == self.num_envs:
                out_extras[k] = v.to(dev, copy=True)   # per-env: Step.extras
            else:
                scalars[k] = v.to(dev, copy=True)      # e.g. consecutive_successes: env.scalar_extras
        self.scalar_extras = scalars
        self.last_extras = extras
        return Step(obs=obs, reward=reward, terminated=terminated, truncated=truncated, final_obs=obs,
                    valid=valid, extras=out_extras)

    # -- optional capabilities -------------------------------------------------------------
    def randomize_episode_progress(self) -> None:
        """Spread the envs' episode clocks over ``[0, max_episode_length)`` so
        time-outs do not coincide (rl_games/Isaac Lab do the same)."""
        if self.max_episode_steps is None:
            return
        if self._isolated:
            self.task.randomize_progress()
        else:
            buf = self.task.progress_buf
            buf.copy_(torch.randint_like(buf, 0, max(1, self.max_episode_steps)))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        _IN_PROCESS_SIMS.discard(self)
        if self._close_task and hasattr(self.task, "close"):
            self.task.close()


# ---------------------------------------------------------------------------
# creation
# ---------------------------------------------------------------------------
def _needs_isaacgym(task_class: Any) -> bool:
    if task_class is None:
        return True
    if isinstance(task_class, str):
        where = task_class.rpartition(":")[0]
        if where.startswith("rllib_fast."):  # our stand-ins: cheap and safe to import here
            from .isolated import load_object

            task_class = load_object(task_class)
        else:
            return True  # do not import a user's task module into this (torch-first) process
    return bool(getattr(task_class, "NEEDS_ISAACGYM", True))


def _one_sim_per_process(task_class: Any) -> bool:
    if task_class is None or isinstance(task_class, str):
        return True
    return bool(getattr(task_class, "ONE_SIM_PER_PROCESS", True))


def _check_import_order() -> None:
    if "isaacgym" not in sys.modules and "torch" in sys.modules:
        raise IsaacGymImportOrderError(
            "isaacgym: torch was imported before isaacgym in this process (rllib_fast, Ray and RLlib import "
            "torch), and Isaac Gym refuses to load after torch. Use isolated=True (or the default "
            "isolated='auto') so the simulator runs in its own process that imports isaacgym first, or put "
            "`import isaacgym` as the very first import of your script.")


def _check_installed(python_executable: Optional[str], kind: str) -> None:
    same = python_executable is None or python_executable == sys.executable
    if not same:
        return  # another interpreter: only the worker can tell
    missing = [m for m in (("isaacgym", "isaacgymenvs") if kind == "isaacgymenvs" else ("isaacgym",))
               if importlib.util.find_spec(m) is None]
    if missing:
        raise IsaacGymNotInstalledError(
            f"isaacgym: {', '.join(missing)} cannot be imported by {sys.executable} (Python "
            f"{sys.version_info.major}.{sys.version_info.minor}). Isaac Gym Preview 4 supports Python <= 3.8 "
            "and is installed from NVIDIA's download (not PyPI), IsaacGymEnvs from its repository. Point "
            "env_config['python_executable'] at a Python <= 3.8 with torch + isaacgym + isaacgymenvs "
            "installed; the simulator then runs in that interpreter (process-isolated, tensors via CUDA "
            "IPC/shared memory). "
            "Tests here use the stand-in task_class='rllib_fast.envs.standins.vectask:PointReachTask'.")


def make_isaacgym(task_name: str, num_envs: int = 1, device: Any = "cpu", seed: Optional[int] = None, *,
                  task: Any = None, task_class: Any = None, cfg: Optional[Dict[str, Any]] = None,
                  overrides: Sequence[str] = (), sim_device: Optional[str] = None,
                  graphics_device_id: int = -1,
                  headless: bool = True, isolated: Any = "auto", python_executable: Optional[str] = None,
                  worker_sys_path: Optional[Sequence[str]] = None, startup_timeout: float = 300.0,
                  clip_obs: Optional[float] = None, clip_actions: Optional[float] = None,
                  torch_deterministic: bool = False) -> IsaacGymVecEnv:
    """Creator behind ``isaacgym:<Task>``.

    Args (all but the first four come from ``env_config``):
        task_name: IsaacGymEnvs task (``Ant``, ``Humanoid``, ``ShadowHand``, ...);
            a label only when ``task``/``task_class`` is given.
        device: ``rl_device`` (where tensors are returned); ``sim_device``
            defaults to it (``cuda:0`` for the GPU pipeline).
        task: an already-built VecTask instance (wrapped in-process as is).
        task_class: a VecTask subclass or ``"module:Class"`` built with
            ``cfg`` (IsaacGymEnvs task config layout) instead of ``isaacgymenvs.make``.
        overrides: Hydra overrides for ``isaacgymenvs.make`` (``"task.env.episodeLength=500"``).
        isolated: ``"auto"`` (own process unless ``isaacgym`` is already imported
            here and the task needs it), True, or False.
        python_executable: interpreter of the simulator process (Isaac Gym needs <= 3.8).
        clip_obs / clip_actions: extra clamping on our side.
    """
    num_envs = check_num_envs(num_envs)
    rl_device = str(canonical_device(device))
    if task is not None:
        if isolated is True:
            raise ValueError("isaacgym: a prebuilt `task` instance lives in this process and cannot be "
                             "isolated; pass `task_class` + `cfg` instead (allowed: isolated=False/'auto')")
        if int(task.num_envs) != num_envs:
            raise ValueError(f"isaacgym: the given task has num_envs={task.num_envs} but num_envs={num_envs} "
                             "was requested; they must match")
        return _register(IsaacGymVecEnv(task, clip_obs=clip_obs, clip_actions=clip_actions),
                         _one_sim_per_process(type(task)))
    if isolated not in ("auto", True, False):
        raise ValueError(f"isaacgym: isolated = {isolated!r}; allowed: 'auto', True, False")
    kind = "class" if task_class is not None else "isaacgymenvs"
    needs_gym = _needs_isaacgym(task_class)
    if isolated == "auto":
        isolated = needs_gym and ("isaacgym" not in sys.modules or python_executable is not None)
    spec = {"kind": kind, "task": task_name, "task_class": task_class, "cfg": cfg,
            "overrides": list(overrides),
            "num_envs": num_envs, "rl_device": rl_device, "sim_device": sim_device or rl_device,
            "graphics_device_id": graphics_device_id, "headless": headless, "seed": seed,
            "torch_deterministic": torch_deterministic}
    if needs_gym:
        _check_installed(python_executable, kind)
    if isolated:
        from .isolated import IsolatedTask

        proxy = IsolatedTask(spec, preimport=("isaacgym",) if needs_gym else (),
                             python_executable=python_executable, sys_path=worker_sys_path,
                             startup_timeout=startup_timeout)
        return IsaacGymVecEnv(proxy, device=rl_device, clip_obs=clip_obs, clip_actions=clip_actions)
    if needs_gym:
        _check_import_order()
    cls_obj = task_class
    if isinstance(task_class, str) and not needs_gym:
        from .isolated import load_object

        cls_obj = load_object(task_class)
    one_sim = _one_sim_per_process(cls_obj)
    if one_sim:
        _guard_second_sim()
    from .isolated import build_task

    env = IsaacGymVecEnv(build_task(spec), clip_obs=clip_obs, clip_actions=clip_actions)
    return _register(env, one_sim)


def _guard_second_sim() -> None:
    live = [e for e in _IN_PROCESS_SIMS if not e._closed]
    if live:
        raise IsaacGymSimExistsError(
            "isaacgym: this process already hosts an Isaac Gym sim, and Isaac Gym allows one sim per process "
            "(IsaacGymEnvs#145/#159, 'Foundation object exists already'). Create further envs (e.g. the "
            "evaluation env) with env_config isolated=True so each runs in its own process, or evaluate on "
            "the training envs.")


def _register(env: IsaacGymVecEnv, one_sim: bool) -> IsaacGymVecEnv:
    if one_sim:
        _guard_second_sim()
        _IN_PROCESS_SIMS.add(env)
    return env


register_prefix("isaacgym", make_isaacgym, probe=False)   # a simulator: not started for config checks
