"""A stand-in for IsaacGymEnvs' ``VecTask`` base class and one small task.

Written from the documented contract of ``isaacgymenvs/tasks/base/vec_task.py``
(the class every IsaacGymEnvs task subclasses), reproducing exactly the semantics an
RL adapter depends on, with plain torch "physics" instead of PhysX:

* buffers allocated once on the sim device: ``obs_buf``, ``states_buf``,
  ``rew_buf`` (float), ``reset_buf`` (long, **initialised to ones**, so every env
  is reset inside the first ``step``), ``timeout_buf``, ``progress_buf``,
  ``randomize_buf``; ``extras`` and ``obs_dict`` are the same dict objects on
  every call;
* ``step(actions)``: clamp actions to ``±clip_actions`` -> ``pre_physics_step``
  -> ``control_freq_inv`` x simulate -> ``post_physics_step`` ->
  ``timeout_buf = (progress_buf >= max_episode_length - 1) & (reset_buf != 0)``
  -> ``extras["time_outs"]`` -> ``obs_dict["obs"] = clamp(obs_buf, ±clip_obs)``
  (a fresh tensor) and ``obs_dict["states"]`` when ``numStates > 0`` ->
  returns ``(obs_dict, rew_buf, reset_buf, extras)`` where ``rew_buf`` and
  ``reset_buf`` are the **live buffers** (``.to(rl_device)`` is a no-op when the
  devices match), overwritten in place by the next step;
* ``reset()`` only packages the current ``obs_buf`` -- it does not reset the sim;
* auto-reset happens one step late, either at the start of the next
  ``post_physics_step`` (Ant, Humanoid, Anymal, FrankaCubeStack) or in the next
  ``pre_physics_step`` (ShadowHand, AllegroHand, BallBalance); the task below
  takes ``cfg["env"]["resetIn"]`` to choose;
* spaces are *old-gym* style objects (``gym`` is not installed here, so
  :class:`LegacyBox` mimics ``gym.spaces.Box``'s attributes);
* one sim per process, optionally: with ``ONE_SIM_PER_PROCESS = True`` on a
  subclass, a second task in the same process fails the way Isaac Gym does
  ("Foundation object exists already").

This module imports only numpy and torch so the process-isolated mode can load
it by file path in a bare simulator process. It keeps Python 3.8 syntax.
"""
from __future__ import annotations

from typing import Any, Dict, Optional

import numpy as np
import torch

__all__ = ["LegacyBox", "VecTask", "PointReachTask", "make_cfg", "release_sim"]

_EXISTING_SIM: Optional[object] = None


def release_sim() -> None:
    """Forget the emulated process-wide sim (tests only; Isaac Gym cannot)."""
    global _EXISTING_SIM
    _EXISTING_SIM = None


class LegacyBox:
    """What an old ``gym.spaces.Box`` looks like to an adapter: ``low``,
    ``high``, ``shape``, ``dtype`` (and ``sample``/``contains``)."""

    def __init__(self, low, high, shape=None, dtype=np.float32):
        low = np.asarray(low, dtype=dtype)
        high = np.asarray(high, dtype=dtype)
        if shape is not None:
            low = np.broadcast_to(low, shape).copy()
            high = np.broadcast_to(high, shape).copy()
        self.low, self.high = low, high
        self.shape = tuple(low.shape)
        self.dtype = np.dtype(dtype)

    def sample(self):
        low = np.where(np.isfinite(self.low), self.low, -1.0)
        high = np.where(np.isfinite(self.high), self.high, 1.0)
        return np.random.uniform(low, high).astype(self.dtype)

    def contains(self, x) -> bool:
        x = np.asarray(x)
        return x.shape == self.shape and bool(np.all(x >= self.low) and np.all(x <= self.high))

    def __repr__(self) -> str:
        return f"LegacyBox({self.shape}, {self.dtype})"


class VecTask:
    """The VecTask base semantics (constructor signature of IsaacGymEnvs)."""

    #: Real Isaac Gym allows one sim per process; the stand-in only emulates
    #: that (and its PhysX error) when a subclass sets this to True.
    ONE_SIM_PER_PROCESS = False
    #: read by rllib_fast's adapter: this class does not need ``import isaacgym``
    NEEDS_ISAACGYM = False

    def __init__(self, config: Dict[str, Any], rl_device: str, sim_device: str, graphics_device_id: int,
                 headless: bool, virtual_screen_capture: bool = False, force_render: bool = False):
        self.cfg = config
        env = config["env"]
        device_type = sim_device.split(":")[0]
        use_gpu = bool(config.get("sim", {}).get("use_gpu_pipeline", device_type in ("cuda", "gpu")))
        self.device = sim_device if (use_gpu and device_type in ("cuda", "gpu")) else "cpu"
        self.rl_device = rl_device
        self.headless = headless
        self.graphics_device_id = -1 if headless else graphics_device_id
        self.num_environments = int(env["numEnvs"])
        self.num_agents = int(env.get("numAgents", 1))
        self.num_observations = int(env.get("numObservations", 0))
        self.num_states = int(env.get("numStates", 0))
        self.num_actions = int(env["numActions"])
        self.control_freq_inv = int(env.get("controlFrequencyInv", 1))
        self.clip_obs = float(env.get("clipObservations", np.inf))
        self.clip_actions = float(env.get("clipActions", np.inf))
        self.observation_space = LegacyBox(-np.inf, np.inf, (self.num_obs,))
        self.state_space = LegacyBox(-np.inf, np.inf, (self.num_states,))
        self.action_space = LegacyBox(-1.0, 1.0, (self.num_actions,))
        self.total_train_env_frames = 0
        self.control_steps = 0
        self.sim = self._create_sim_once(bool(type(self).ONE_SIM_PER_PROCESS))
        self.create_sim()
        self.allocate_buffers()
        self.obs_dict: Dict[str, torch.Tensor] = {}

    # -- the sim (emulated) ------------------------------------------------------
    @staticmethod
    def _create_sim_once(one_per_process: bool) -> object:
        global _EXISTING_SIM
        if one_per_process and _EXISTING_SIM is not None:
            # what PhysX reports when a second foundation is created (legged_gym#46)
            raise RuntimeError("Foundation object exists already. "
                               "Only one instance per process can be created.")
        sim = object()
        if one_per_process:
            _EXISTING_SIM = sim
        return sim

    def create_sim(self) -> None:
        """Tasks create actors here (nothing to do for torch physics)."""

    def simulate(self) -> None:
        """One physics substep (``gym.simulate`` in Isaac Gym)."""
        raise NotImplementedError("abstract: VecTask.simulate")

    # -- properties -----------------------------------------------------------
    @property
    def num_envs(self) -> int:
        return self.num_environments

    @property
    def num_obs(self) -> int:
        return self.num_observations

    @property
    def num_acts(self) -> int:
        return self.num_actions

    def allocate_buffers(self) -> None:
        n, d = self.num_envs, self.device
        self.obs_buf = torch.zeros((n, self.num_obs), device=d, dtype=torch.float)
        self.states_buf = torch.zeros((n, self.num_states), device=d, dtype=torch.float)
        self.rew_buf = torch.zeros(n, device=d, dtype=torch.float)
        self.reset_buf = torch.ones(n, device=d, dtype=torch.long)
        self.timeout_buf = torch.zeros(n, device=d, dtype=torch.long)
        self.progress_buf = torch.zeros(n, device=d, dtype=torch.long)
        self.randomize_buf = torch.zeros(n, device=d, dtype=torch.long)
        self.extras: Dict[str, Any] = {}

    # -- task hooks -------------------------------------------------------------
    def pre_physics_step(self, actions: torch.Tensor) -> None:
        raise NotImplementedError("abstract: VecTask.pre_physics_step")

    def post_physics_step(self) -> None:
        raise NotImplementedError("abstract: VecTask.post_physics_step")

    def reset_idx(self, env_ids: torch.Tensor) -> None:
        """Should be implemented in an environment class inherited from VecTask."""

    # -- the public API -----------------------------------------------------------
    def step(self, actions: torch.Tensor):
        action_tensor = torch.clamp(actions, -self.clip_actions, self.clip_actions)
        self.pre_physics_step(action_tensor)
        for _ in range(self.control_freq_inv):
            self.simulate()
        self.post_physics_step()
        self.control_steps += 1
        timed_out = (self.progress_buf >= self.max_episode_length - 1) & (self.reset_buf != 0)
        self.timeout_buf = torch.where(timed_out, torch.ones_like(self.timeout_buf),
                                       torch.zeros_like(self.timeout_buf))
        self.extras["time_outs"] = self.timeout_buf.to(self.rl_device)
        self.obs_dict["obs"] = torch.clamp(self.obs_buf, -self.clip_obs, self.clip_obs).to(self.rl_device)
        if self.num_states > 0:
            self.obs_dict["states"] = self.get_state()
        return self.obs_dict, self.rew_buf.to(self.rl_device), self.reset_buf.to(self.rl_device), self.extras

    def zero_actions(self) -> torch.Tensor:
        return torch.zeros((self.num_envs, self.num_actions), dtype=torch.float32, device=self.rl_device)

    def reset_idx_all(self) -> None:
        self.reset_idx(torch.arange(self.num_envs, device=self.device))

    def reset(self):
        """Called once to get the first observations; does not reset the sim."""
        self.obs_dict["obs"] = torch.clamp(self.obs_buf, -self.clip_obs, self.clip_obs).to(self.rl_device)
        if self.num_states > 0:
            self.obs_dict["states"] = self.get_state()
        return self.obs_dict

    def reset_done(self):
        done_env_ids = self.reset_buf.nonzero(as_tuple=False).squeeze(-1)
        if len(done_env_ids) > 0:
            self.reset_idx(done_env_ids)
        self.obs_dict["obs"] = torch.clamp(self.obs_buf, -self.clip_obs, self.clip_obs).to(self.rl_device)
        if self.num_states > 0:
            self.obs_dict["states"] = self.get_state()
        return self.obs_dict, done_env_ids

    def get_state(self) -> torch.Tensor:
        return torch.clamp(self.states_buf, -self.clip_obs, self.clip_obs).to(self.rl_device)

    def set_train_info(self, env_frames, *args, **kwargs) -> None:
        self.total_train_env_frames = env_frames

    def get_env_state(self):
        return None

    def set_env_state(self, env_state) -> None:
        pass


class PointReachTask(VecTask):
    """A 2-D point mass pushed towards a random target.

    obs (6): position, velocity, target - position; states (8, the asymmetric
    critic input): obs + the target itself; actions (2): force in [-1, 1].
    Reward ``1 - |target - position|`` per step (plus an extra term kept in
    ``extras["true_objective"]``); **terminated** when the point leaves the
    ``[-2, 2]^2`` box; time-out after ``episodeLength``. ``cfg["env"]["resetIn"]``
    picks ``"post_physics_step"`` (Ant-style) or ``"pre_physics_step"``
    (ShadowHand-style) reset timing.
    """

    def __init__(self, cfg: Dict[str, Any], rl_device: str, sim_device: str, graphics_device_id: int,
                 headless: bool, virtual_screen_capture: bool = False, force_render: bool = False):
        self.cfg = cfg
        self.max_episode_length = int(cfg["env"]["episodeLength"])
        self.reset_in = cfg["env"].get("resetIn", "post_physics_step")
        if self.reset_in not in ("post_physics_step", "pre_physics_step"):
            raise ValueError(f"resetIn = {self.reset_in!r}; allowed: post_physics_step, pre_physics_step")
        self.dt = float(cfg.get("sim", {}).get("dt", 0.05))
        cfg["env"]["numObservations"] = 6
        cfg["env"]["numActions"] = 2
        cfg["env"].setdefault("numStates", 8)
        super().__init__(config=cfg, rl_device=rl_device, sim_device=sim_device,
                         graphics_device_id=graphics_device_id, headless=headless,
                         virtual_screen_capture=virtual_screen_capture, force_render=force_render)
        n = self.num_envs
        self.pos = torch.zeros((n, 2), device=self.device)
        self.vel = torch.zeros((n, 2), device=self.device)
        self.target = torch.zeros((n, 2), device=self.device)
        self.actions = torch.zeros((n, 2), device=self.device)
        self.extras["consecutive_successes"] = torch.zeros((), device=self.device)

    def simulate(self) -> None:
        self.vel.mul_(0.9).add_(self.actions, alpha=self.dt * 4.0)
        self.pos.add_(self.vel, alpha=self.dt)

    def pre_physics_step(self, actions: torch.Tensor) -> None:
        if self.reset_in == "pre_physics_step":
            env_ids = self.reset_buf.nonzero(as_tuple=False).squeeze(-1)
            if len(env_ids) > 0:
                self.reset_idx(env_ids)
        self.actions = actions.clone().to(self.device)

    def post_physics_step(self) -> None:
        self.progress_buf += 1
        if self.reset_in == "post_physics_step":
            env_ids = self.reset_buf.nonzero(as_tuple=False).squeeze(-1)
            if len(env_ids) > 0:
                self.reset_idx(env_ids)
        self.compute_observations()
        self.compute_reward()

    def reset_idx(self, env_ids: torch.Tensor) -> None:
        k = len(env_ids)
        self.pos[env_ids] = (torch.rand((k, 2), device=self.device) * 2 - 1) * 0.5
        self.vel[env_ids] = 0.0
        self.target[env_ids] = torch.rand((k, 2), device=self.device) * 2 - 1
        self.progress_buf[env_ids] = 0
        self.reset_buf[env_ids] = 0

    def compute_observations(self) -> None:
        rel = self.target - self.pos
        self.obs_buf[:, 0:2] = self.pos
        self.obs_buf[:, 2:4] = self.vel
        self.obs_buf[:, 4:6] = rel
        if self.num_states > 0:
            self.states_buf[:, 0:6] = self.obs_buf
            self.states_buf[:, 6:8] = self.target

    def compute_reward(self) -> None:
        dist = torch.linalg.vector_norm(self.target - self.pos, dim=-1)
        self.rew_buf[:] = 1.0 - dist
        out = (self.pos.abs() > 2.0).any(dim=-1)
        terminated = torch.where(out, torch.ones_like(self.reset_buf), torch.zeros_like(self.reset_buf))
        self.reset_buf[:] = torch.where(self.progress_buf >= self.max_episode_length - 1,
                                        torch.ones_like(self.reset_buf), terminated)
        self.extras["true_objective"] = -dist
        self.extras["consecutive_successes"] = (dist < 0.1).float().mean()


def make_cfg(num_envs: int = 16, episode_length: int = 64, reset_in: str = "post_physics_step",
             clip_obs: float = 5.0, clip_actions: float = 1.0, num_states: int = 8,
             **env_overrides: Any) -> Dict[str, Any]:
    """A task config dict in IsaacGymEnvs' layout (``cfg["env"]``, ``cfg["sim"]``)."""
    env = {"numEnvs": num_envs, "episodeLength": episode_length, "resetIn": reset_in,
           "clipObservations": clip_obs, "clipActions": clip_actions, "numStates": num_states,
           "controlFrequencyInv": 1}
    env.update(env_overrides)
    return {"name": "PointReach", "physics_engine": "physx", "env": env,
            "sim": {"dt": 0.05, "use_gpu_pipeline": False}}


# keep the module's public contract explicit for the process-isolated loader
TASK_MAP = {"PointReach": PointReachTask}
