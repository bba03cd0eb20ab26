"""Built-in batched torch versions of gymnasium's classic-control tasks.

``CartPoleEnv`` (CartPole-v1), ``AcrobotEnv`` (Acrobot-v1), ``PendulumEnv``
(Pendulum-v1) and ``MountainCarContinuousEnv`` (MountainCarContinuous-v0) follow
gymnasium 1.2.2's dynamics, rewards, initial-state distributions, spaces and
time limits, but step ``num_envs`` copies at once. State is one float32 tensor
``[N, state_dim]`` on ``device`` (gymnasium integrates in float64; float32 is
what GPUs are fast at and agrees to ~1e-5 per step), so a rollout is a handful
of batched tensor ops with no host synchronisation: no Python loop over envs,
no ``.item()``, and ended envs are reset with ``torch.where``.

Randomness comes from a per-env-object ``torch.Generator`` on ``device``. Fresh
initial states are drawn for *all* rows on every step and selected only where an
episode ended; this costs a few random numbers but needs no data-dependent
control flow, and makes the generator's consumption independent of which envs
ended (so trajectories are reproducible and restorable bit-exactly).

Partially observed variants: ``mask_velocity=True`` (``env_config={"mask_velocity":
True}``) removes the velocity entries from CartPole's and Pendulum's observation,
so a policy must infer them from the history (a task that needs memory: FastPPO's
``rnn_type``); ``observed_terms=[...]`` keeps any chosen entries of the full
observation (e.g. CartPole ``[0, 2, 3]`` hides the cart's velocity). The full observation is then the source's privileged ``states``
(``single_state_space``, ``env.states``, ``Step.extras["states"]`` /
``["final_states"]``: docs/sources.md), what an asymmetric critic or a teacher
reads.

Discrete actions must be integer tensors (a float tensor is a TypeError) and
index a small table with ``index_select``, which rejects out-of-range and
negative indices (an error on CPU, a device-side assert on CUDA: no host sync
on the hot path); continuous actions are clipped as gymnasium clips them.
"""
from __future__ import annotations

import math
from typing import Any, Dict, Optional, Sequence, Tuple

import numpy as np
import torch
from gymnasium import spaces

from .base import Step, TensorVecEnv, canonical_device, check_num_envs
from .registry import register

__all__ = ["CartPoleEnv", "AcrobotEnv", "PendulumEnv", "MountainCarContinuousEnv"]


def _wrap_angle(x: torch.Tensor) -> torch.Tensor:
    """Map angles to [-pi, pi) (gymnasium's ``wrap``/``angle_normalize``)."""
    return torch.remainder(x + math.pi, 2 * math.pi) - math.pi


class _ClassicControlEnv(TensorVecEnv):
    """Shared batching, time limit, auto-reset, seeding and checkpointing.

    Subclasses define spaces, ``state_dim``, the uniform initial-state box
    (``init_low``/``init_high``), ``_dynamics`` and ``_observe`` (the full
    observation), and ``velocity_entries`` where ``mask_velocity`` applies.
    """

    state_dim: int
    init_low: Sequence[float]
    init_high: Sequence[float]
    #: the full observation's velocity entries (removed by ``mask_velocity``)
    velocity_entries: Tuple[int, ...] = ()
    #: the privileged states' space (the full observation) when velocities are masked, else None
    single_state_space = None

    def __init__(self, num_envs: int, device: Any, seed: Optional[int],
                 max_episode_steps: Optional[int], autoreset: bool, mask_velocity: bool = False,
                 observed_terms: Optional[Sequence[int]] = None):
        if max_episode_steps is not None and int(max_episode_steps) < 1:
            raise ValueError(f"max_episode_steps must be >= 1 or None, got {max_episode_steps}")
        self.num_envs = check_num_envs(num_envs)
        self.device = canonical_device(device)
        self.max_episode_steps = None if max_episode_steps is None else int(max_episode_steps)
        self.autoreset = bool(autoreset)
        self._discrete = isinstance(self.single_action_space, spaces.Discrete)
        self._init_low = torch.tensor(self.init_low, dtype=torch.float32, device=self.device)
        self._init_span = torch.tensor(self.init_high, dtype=torch.float32,
                                       device=self.device) - self._init_low
        self._gen = torch.Generator(device=self.device)
        if seed is None:  # still reproducible under torch.manual_seed
            seed = int(torch.randint(2**62, ()).item())
        self._gen.manual_seed(int(seed))
        # public so tests/tools can inspect or overwrite rows; replaced (never
        # mutated in place) by step/reset, so returned tensors never alias it
        self.state = torch.zeros(self.num_envs, self.state_dim, device=self.device)
        self.elapsed_steps = torch.zeros(self.num_envs, dtype=torch.int32, device=self.device)
        self._needs_reset = True
        self._transition_fn = self._transition   # compile_step may replace it
        full = self.single_observation_space
        name = type(self).__name__
        if mask_velocity and observed_terms is not None:
            raise ValueError(f"{name}: give mask_velocity or observed_terms, not both")
        if mask_velocity:
            if not self.velocity_entries:
                raise ValueError(f"{name}: mask_velocity = True is not offered by this task; "
                                 "allowed: False (CartPole and Pendulum offer it)")
            observed_terms = [i for i in range(full.shape[0]) if i not in self.velocity_entries]
        kept = None
        if observed_terms is not None:
            kept = [int(i) for i in observed_terms]
            if not kept or len(set(kept)) != len(kept) or not all(0 <= i < full.shape[0] for i in kept):
                raise ValueError(f"{name}: observed_terms = {list(observed_terms)}; allowed: distinct indices "
                                 f"of the full observation (0..{full.shape[0] - 1})")
        #: the observed entries of the full observation (None: all of it)
        self.observed_terms = None if kept is None else tuple(kept)
        #: the policy sees part of the observation; the full one is the privileged ``states``
        self.mask_velocity = kept is not None
        self._kept = None
        if kept is not None:
            self._kept = torch.tensor(kept, device=self.device)
            self.single_state_space = full
            self.single_observation_space = spaces.Box(full.low[kept], full.high[kept], dtype=np.float32)

    # -- task-specific ------------------------------------------------------
    def _dynamics(self, state: torch.Tensor, action: torch.Tensor
                  ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(next_state, reward float32 [N], terminated bool [N])."""
        raise NotImplementedError("abstract: subclasses define the dynamics")

    def _observe(self, state: torch.Tensor) -> torch.Tensor:
        """Observation of ``state``; always a new tensor."""
        raise NotImplementedError("abstract: subclasses define the observation")

    def _observed(self, full_obs: torch.Tensor) -> torch.Tensor:
        """The policy's observation from the full one (velocities removed under ``mask_velocity``)."""
        return full_obs if self._kept is None else full_obs.index_select(1, self._kept)

    @property
    def states(self) -> Optional[torch.Tensor]:
        """The full observations (``mask_velocity``; None otherwise): the privileged states."""
        return self._observe(self.state) if self.mask_velocity else None

    # -- helpers ------------------------------------------------------------
    def _sample_init(self) -> torch.Tensor:
        u = torch.rand(self.num_envs, self.state_dim, generator=self._gen, device=self.device)
        return self._init_low + self._init_span * u

    def _as_action(self, actions: Any) -> torch.Tensor:
        a = torch.as_tensor(actions, device=self.device)
        if self._discrete:  # [N] or [N, 1]
            if a.is_floating_point() or a.is_complex():
                raise TypeError(f"{type(self).__name__}.step: discrete actions must be integers, got {a.dtype}")
            return a.reshape(self.num_envs).long()
        return a.to(torch.float32).reshape(self.num_envs, *self.single_action_space.shape)

    # -- contract -----------------------------------------------------------
    def reset(self, seed: Optional[int] = None) -> torch.Tensor:
        """Reset every env (re-seeding the generator first if ``seed`` is given)."""
        if seed is not None:
            self._gen.manual_seed(int(seed))
        self.state = self._sample_init()
        self.elapsed_steps = torch.zeros_like(self.elapsed_steps)
        self._needs_reset = False
        return self._observed(self._observe(self.state))

    def reset_idx(self, mask: torch.Tensor) -> torch.Tensor:
        """Reset the envs where ``mask`` (bool ``[N]``) is set; returns the full obs."""
        mask = torch.as_tensor(mask, device=self.device).reshape(self.num_envs).bool()
        self.state = torch.where(mask[:, None], self._sample_init(), self.state)
        self.elapsed_steps = self.elapsed_steps.masked_fill(mask, 0)
        return self._observed(self._observe(self.state))

    def randomize_episode_progress(self) -> None:
        """Set each env's episode clock to a uniform-random point of its time
        limit, so time-outs of N envs started together do not coincide
        (start-state decorrelation; a no-op without a time limit)."""
        if self.max_episode_steps is not None:
            self.elapsed_steps = torch.randint(0, self.max_episode_steps, (self.num_envs,), generator=self._gen,
                                               device=self.device, dtype=torch.int32)

    def step(self, actions: torch.Tensor) -> Step:
        if self._needs_reset:
            raise RuntimeError(f"{type(self).__name__}: call reset() before step()")
        action = self._as_action(actions)
        # the reset states are drawn every step (outside the pure transition, which
        # compile_step may compile: inductor takes no torch.Generator)
        init = self._sample_init() if self.autoreset else None
        state, elapsed, obs, reward, terminated, truncated, final_obs = self._transition_fn(
            self.state, self.elapsed_steps, action, init)
        self.state, self.elapsed_steps = state, elapsed
        if not self.mask_velocity:
            return Step(obs, reward, terminated, truncated, final_obs)
        return Step(self._observed(obs), reward, terminated, truncated, self._observed(final_obs),
                    extras={"states": obs, "final_states": final_obs})

    def _transition(self, state, elapsed, action, init):
        """One step's tensor work, a pure function of its arguments: dynamics,
        time limit, auto-reset of the ended envs to ``init`` (fresh tensors
        out, so nothing returned aliases the env's state)."""
        state, reward, terminated = self._dynamics(state, action)
        elapsed = elapsed + 1
        if self.max_episode_steps is None:
            truncated = torch.zeros_like(terminated)
        else:  # hitting the limit on a terminal step is a termination
            truncated = (elapsed >= self.max_episode_steps) & ~terminated
        final_obs = self._observe(state)
        if self.autoreset:
            done = terminated | truncated
            state = torch.where(done[:, None], init, state)
            elapsed = elapsed.masked_fill(done, 0)
            obs = torch.where(done[:, None], self._observe(state), final_obs)
        else:
            obs = final_obs.clone()
        return state, elapsed, obs, reward, terminated, truncated, final_obs

    def compile_step(self, setting: Any, backend: Optional[str] = None) -> bool:
        """Run :meth:`_transition` under ``torch.compile`` (the algorithms'
        ``compile`` setting): the task's few dozen elementwise ops become one
        fused kernel. Out-of-range discrete actions still fail (inductor checks
        indirect indices), but as an assertion rather than ``index_select``'s
        message; ``step`` keeps checking dtypes."""
        from ..core.compile import compile_mode, compiled

        self._transition_fn = compiled(self._transition, setting, self.device, backend)
        return compile_mode(setting) is not None

    def get_state(self) -> Dict[str, Any]:
        """CPU copies of state, step counters and generator state."""
        return {"state": self.state.detach().to("cpu", copy=True),
                "elapsed_steps": self.elapsed_steps.to("cpu", copy=True),
                "rng": self._gen.get_state().clone(),
                "needs_reset": self._needs_reset}

    def set_state(self, state: Dict[str, Any]) -> None:
        s = torch.as_tensor(state["state"])
        if tuple(s.shape) != (self.num_envs, self.state_dim):
            raise ValueError(f"{type(self).__name__}.set_state: state has shape {tuple(s.shape)}, "
                             f"expected {(self.num_envs, self.state_dim)}")
        self.state = s.to(self.device, torch.float32, copy=True)
        self.elapsed_steps = torch.as_tensor(state["elapsed_steps"]).to(
            self.device, torch.int32, copy=True)
        self._gen.set_state(torch.as_tensor(state["rng"]).cpu())
        self._needs_reset = bool(state.get("needs_reset", False))


class CartPoleEnv(_ClassicControlEnv):
    """CartPole-v1: balance a pole on a cart; reward 1 per step (terminal step
    included), terminates when ``|x| > 2.4`` or ``|theta| > 12 deg``, 500-step
    limit. State ``[x, x_dot, theta, theta_dot]`` is also the observation.
    Explicit Euler integration, as gymnasium's default."""

    state_dim = 4
    init_low, init_high = (-0.05,) * 4, (0.05,) * 4
    gravity, mass_cart, mass_pole, half_length = 9.8, 1.0, 0.1, 0.5
    force_mag, tau = 10.0, 0.02
    theta_threshold = 12 * 2 * math.pi / 360
    x_threshold = 2.4
    velocity_entries = (1, 3)

    def __init__(self, num_envs: int = 1, device: Any = "cpu", seed: Optional[int] = None,
                 max_episode_steps: Optional[int] = 500, autoreset: bool = True, mask_velocity: bool = False,
                 observed_terms: Optional[Sequence[int]] = None):
        high = np.array([self.x_threshold * 2, np.inf, self.theta_threshold * 2, np.inf],
                        dtype=np.float32)
        self.single_observation_space = spaces.Box(-high, high, dtype=np.float32)
        self.single_action_space = spaces.Discrete(2)
        super().__init__(num_envs, device, seed, max_episode_steps, autoreset, mask_velocity, observed_terms)
        self._force = torch.tensor([-self.force_mag, self.force_mag], device=self.device)

    def _dynamics(self, state, action):
        x, x_dot, theta, theta_dot = state.unbind(1)
        force = self._force.index_select(0, action)  # rejects out-of-range and negative actions
        cos, sin = torch.cos(theta), torch.sin(theta)
        total_mass = self.mass_cart + self.mass_pole
        pole_ml = self.mass_pole * self.half_length
        temp = (force + pole_ml * theta_dot.square() * sin) / total_mass
        theta_acc = (self.gravity * sin - cos * temp) / (
            self.half_length * (4.0 / 3.0 - self.mass_pole * cos.square() / total_mass))
        x_acc = temp - pole_ml * theta_acc * cos / total_mass
        x = x + self.tau * x_dot  # explicit Euler: positions use the old velocities
        theta = theta + self.tau * theta_dot
        nxt = torch.stack((x, x_dot + self.tau * x_acc, theta, theta_dot + self.tau * theta_acc), 1)
        terminated = (x.abs() > self.x_threshold) | (theta.abs() > self.theta_threshold)
        return nxt, torch.ones_like(x), terminated

    def _observe(self, state):
        return state.clone()


class AcrobotEnv(_ClassicControlEnv):
    """Acrobot-v1: swing a two-link chain's tip above the bar by torquing the
    middle joint (actions 0/1/2 -> torque -1/0/+1). "Book" dynamics integrated
    with one classic RK4 step of 0.2 s (torque held constant), angles wrapped to
    [-pi, pi), velocities clipped to (4 pi, 9 pi). Reward -1 per step, 0 on the
    terminal step; 500-step limit. State ``[theta1, theta2, dtheta1, dtheta2]``,
    observation ``[cos1, sin1, cos2, sin2, dtheta1, dtheta2]``. No torque noise
    (gymnasium's default ``torque_noise_max = 0``)."""

    state_dim = 4
    init_low, init_high = (-0.1,) * 4, (0.1,) * 4
    dt = 0.2
    link_length_1 = 1.0
    link_mass_1 = link_mass_2 = 1.0
    link_com_1 = link_com_2 = 0.5
    link_moi = 1.0
    gravity = 9.8
    max_vel_1, max_vel_2 = 4 * math.pi, 9 * math.pi

    def __init__(self, num_envs: int = 1, device: Any = "cpu", seed: Optional[int] = None,
                 max_episode_steps: Optional[int] = 500, autoreset: bool = True):
        high = np.array([1.0, 1.0, 1.0, 1.0, self.max_vel_1, self.max_vel_2], dtype=np.float32)
        self.single_observation_space = spaces.Box(low=-high, high=high, dtype=np.float32)
        self.single_action_space = spaces.Discrete(3)
        super().__init__(num_envs, device, seed, max_episode_steps, autoreset)
        self._torque = torch.tensor([-1.0, 0.0, 1.0], device=self.device)

    def _derivatives(self, s: torch.Tensor, torque: torch.Tensor) -> torch.Tensor:
        """d/dt of the state for the equations of motion in Sutton & Barto's book."""
        m1, m2, l1 = self.link_mass_1, self.link_mass_2, self.link_length_1
        lc1, lc2, i1, i2, g = self.link_com_1, self.link_com_2, self.link_moi, self.link_moi, self.gravity
        th1, th2, dth1, dth2 = s.unbind(1)
        cos2, sin2 = torch.cos(th2), torch.sin(th2)
        d1 = m1 * lc1 ** 2 + m2 * (l1 ** 2 + lc2 ** 2 + 2 * l1 * lc2 * cos2) + i1 + i2
        d2 = m2 * (lc2 ** 2 + l1 * lc2 * cos2) + i2
        phi2 = m2 * lc2 * g * torch.sin(th1 + th2)  # = cos(th1 + th2 - pi/2)
        phi1 = (-m2 * l1 * lc2 * sin2 * (dth2.square() + 2 * dth2 * dth1)
                + (m1 * lc1 + m2 * l1) * g * torch.sin(th1) + phi2)
        ddth2 = ((torque + d2 / d1 * phi1 - m2 * l1 * lc2 * dth1.square() * sin2 - phi2)
                 / (m2 * lc2 ** 2 + i2 - d2.square() / d1))
        ddth1 = -(d2 * ddth2 + phi1) / d1
        return torch.stack((dth1, dth2, ddth1, ddth2), 1)

    def _dynamics(self, state, action):
        torque, h = self._torque.index_select(0, action), self.dt  # rejects out-of-range/negative actions
        k1 = self._derivatives(state, torque)
        k2 = self._derivatives(state + 0.5 * h * k1, torque)
        k3 = self._derivatives(state + 0.5 * h * k2, torque)
        k4 = self._derivatives(state + h * k3, torque)
        th1, th2, dth1, dth2 = (state + h / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)).unbind(1)
        th1, th2 = _wrap_angle(th1), _wrap_angle(th2)
        nxt = torch.stack((th1, th2, dth1.clamp(-self.max_vel_1, self.max_vel_1),
                           dth2.clamp(-self.max_vel_2, self.max_vel_2)), 1)
        terminated = -torch.cos(th1) - torch.cos(th1 + th2) > 1.0  # tip above the bar
        return nxt, terminated.float() - 1.0, terminated

    def _observe(self, state):
        th1, th2, dth1, dth2 = state.unbind(1)
        return torch.stack((torch.cos(th1), torch.sin(th1), torch.cos(th2), torch.sin(th2),
                            dth1, dth2), 1)


class PendulumEnv(_ClassicControlEnv):
    """Pendulum-v1: swing up and hold an inverted pendulum with torque in
    [-2, 2] (clipped). Reward ``-(angle^2 + 0.1 thdot^2 + 0.001 u^2)`` computed
    from the pre-step state; semi-implicit Euler, speed clipped to 8; never
    terminates, 200-step limit. State ``[theta, thdot]``, observation
    ``[cos, sin, thdot]``.

    Deviation: the stored angle is wrapped to [-pi, pi) after each step
    (gymnasium lets it grow). Observation and reward depend only on the angle
    mod 2 pi, so they are unchanged, and float32 stays accurate on long
    episodes."""

    state_dim = 2
    init_low, init_high = (-math.pi, -1.0), (math.pi, 1.0)
    max_speed, max_torque, dt, mass, length = 8.0, 2.0, 0.05, 1.0, 1.0
    velocity_entries = (2,)

    def __init__(self, num_envs: int = 1, device: Any = "cpu", seed: Optional[int] = None,
                 max_episode_steps: Optional[int] = 200, autoreset: bool = True, g: float = 10.0,
                 mask_velocity: bool = False, observed_terms: Optional[Sequence[int]] = None):
        self.g = float(g)
        high = np.array([1.0, 1.0, self.max_speed], dtype=np.float32)
        self.single_action_space = spaces.Box(low=-self.max_torque, high=self.max_torque,
                                              shape=(1,), dtype=np.float32)
        self.single_observation_space = spaces.Box(low=-high, high=high, dtype=np.float32)
        super().__init__(num_envs, device, seed, max_episode_steps, autoreset, mask_velocity, observed_terms)

    def _dynamics(self, state, action):
        th, thdot = state.unbind(1)
        u = action[:, 0].clamp(-self.max_torque, self.max_torque)
        cost = _wrap_angle(th).square() + 0.1 * thdot.square() + 0.001 * u.square()
        m, l = self.mass, self.length
        thdot = thdot + (3 * self.g / (2 * l) * torch.sin(th) + 3.0 / (m * l ** 2) * u) * self.dt
        thdot = thdot.clamp(-self.max_speed, self.max_speed)
        nxt = torch.stack((_wrap_angle(th + thdot * self.dt), thdot), 1)
        return nxt, -cost, torch.zeros_like(th, dtype=torch.bool)

    def _observe(self, state):
        th, thdot = state.unbind(1)
        return torch.stack((torch.cos(th), torch.sin(th), thdot), 1)


class MountainCarContinuousEnv(_ClassicControlEnv):
    """MountainCarContinuous-v0: drive an underpowered car up the right hill
    with force in [-1, 1] (clipped). Reward ``-0.1 a^2`` per step plus 100 on
    reaching ``position >= 0.45`` with ``velocity >= goal_velocity``
    (terminates); 999-step limit. Velocity is clipped to 0.07, position to
    [-1.2, 0.6], and the car stops at the left wall. State = observation =
    ``[position, velocity]``.

    As in gymnasium, the action penalty uses the *unclipped* action, so policies
    are charged for out-of-range actions they emit."""

    state_dim = 2
    init_low, init_high = (-0.6, 0.0), (-0.4, 0.0)
    min_action, max_action = -1.0, 1.0
    min_position, max_position, max_speed = -1.2, 0.6, 0.07
    goal_position, power = 0.45, 0.0015

    def __init__(self, num_envs: int = 1, device: Any = "cpu", seed: Optional[int] = None,
                 max_episode_steps: Optional[int] = 999, autoreset: bool = True,
                 goal_velocity: float = 0.0):
        self.goal_velocity = float(goal_velocity)
        self.single_action_space = spaces.Box(low=self.min_action, high=self.max_action,
                                              shape=(1,), dtype=np.float32)
        self.single_observation_space = spaces.Box(
            low=np.array([self.min_position, -self.max_speed], dtype=np.float32),
            high=np.array([self.max_position, self.max_speed], dtype=np.float32), dtype=np.float32)
        super().__init__(num_envs, device, seed, max_episode_steps, autoreset)

    def _dynamics(self, state, action):
        pos, vel = state.unbind(1)
        a = action[:, 0]
        force = a.clamp(self.min_action, self.max_action)
        vel = (vel + force * self.power - 0.0025 * torch.cos(3 * pos)).clamp(
            -self.max_speed, self.max_speed)
        pos = (pos + vel).clamp(self.min_position, self.max_position)
        vel = vel.masked_fill((pos <= self.min_position) & (vel < 0), 0.0)  # inelastic left wall
        terminated = (pos >= self.goal_position) & (vel >= self.goal_velocity)
        reward = 100.0 * terminated.float() - 0.1 * a.square()
        return torch.stack((pos, vel), 1), reward, terminated

    def _observe(self, state):
        return state.clone()


register("CartPole", CartPoleEnv)
register("Acrobot", AcrobotEnv)
register("Pendulum", PendulumEnv)
register("MountainCarContinuous", MountainCarContinuousEnv)
