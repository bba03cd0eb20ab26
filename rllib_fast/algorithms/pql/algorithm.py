"""PQL (concurrent Actor / V-learner / P-learner) and its sequential
baselines DDPGN and SACN, as registered RLlib algorithms.

All three share the roles of ``components.py``. DDPGN/SACN run them in one
loop: per vectorised env step exactly ``beta_av`` critic updates and one
policy update per ``beta_pv`` critic updates (the paper's ``update_times``),
sharing networks, replay and statistics; they are deterministic and resume
bit-exactly. PQL runs the learners concurrently (``backend``: threads or Ray
actors), keeps each role's own copies and holds the speed ratios with a
:class:`~rllib_fast.algorithms.pql.ratio.RatioController`; the interleaving depends on
the OS scheduler, so a resumed run continues from the saved state but not
bit-identically (``RESUME_EXACT = False``).
"""
from __future__ import annotations

import time
from typing import Any, Dict

import numpy as np
import torch
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.tune.execution.placement_groups import PlacementGroupFactory

from ...core.algorithm import FastAlgorithm
from .ratio import RatioController
from ...core.state import StateAdapter
from ..asymmetric import current_states, final_states, state_dim, step_states
from .backend import backend_class
from .components import ActorRole, CriticLearner, Dims, LiveParams, PolicyLearner
from .config import DDPGNConfig, PQLConfig, SACNConfig


class PQLFamily(FastAlgorithm):
    """What PQL and its sequential baselines share: the Actor role, the env step,
    live hyperparameters and the logged metrics. Not registered itself."""
    ACTION_SPACE = "bounded continuous"
    RESUME_EXACT = True

    # -- construction ----------------------------------------------------------------
    def build(self) -> None:
        cfg, env = self.config, self.env
        space = env.single_action_space
        # asymmetric actor-critic: the critics read the source's states, the policy the observation
        self.dims = Dims(int(np.prod(env.obs_shape)), int(np.prod(space.shape)),
                         state_dim(cfg, env, type(self).__name__))
        self.states = current_states(env) if self.dims.state_dim is not None else None
        self.live = LiveParams.from_config(cfg, self.configured_lr())
        err = cfg.replay_bytes_error(self.dims.obs_dim, self.dims.act_dim, self.dims.state_dim)
        if err:   # validation checks this only where the env's spaces were cheap to know
            raise ValueError(err)
        self.capacity = cfg.resolved_buffer_size(self.dims.obs_dim, self.dims.act_dim, self.dims.state_dim)
        self.learning_starts = cfg.resolved_learning_starts()
        self.actor = ActorRole(cfg, self.dims, env.num_envs, self.device, space.low, space.high, seed=self.seed)
        self.build_roles()
        if cfg.randomize_episode_clocks:
            self._spread_episode_clocks()

    def _spread_episode_clocks(self) -> None:
        """Why: with every env started on the same step, a source with a time limit
        (mjlab Cartpole: 200 steps, no early termination once balanced) ends all N
        episodes on the same step, so the last-100 training return moves only once
        per time limit and the replay fills with lock-stepped episode phases. Spreading
        the clocks (no env-step cost; the time-outs come early and are bootstrapped as
        truncations) makes episodes end every step. A source without episode clocks
        is left as it is."""
        spread = getattr(self.env, "randomize_episode_progress", None)
        if spread is None:
            return
        spread()
        self.tracker.skip_current_episodes()   # the shortened first episodes would bias the mean

    def build_roles(self) -> None:
        raise NotImplementedError("abstract: PQLFamily.build_roles")

    def get_module(self, module_id: str = DEFAULT_MODULE_ID):
        """The Actor's deterministic policy as an RLModule (shares its networks)."""
        from .module import pql_policy_module

        return pql_policy_module(self)

    def compute_actions(self, obs: torch.Tensor, explore: bool = True) -> torch.Tensor:
        obs = obs.reshape(obs.shape[0], -1)
        return self.actor.to_env(self.actor.act(obs, explore))

    def set_lr(self, lr: float) -> None:
        # the learners put the live lr into their optimizers at every update
        self.live.set_lr(self.config, lr)

    def apply_live_hyperparameters(self) -> None:
        self.live.update_from(self.config)
        super().apply_live_hyperparameters()

    def _close_data_parallel(self) -> None:
        # FastAlgorithm calls this before a PBT rebuild and at cleanup: stop our workers too
        super()._close_data_parallel()
        backend = getattr(self, "backend", None)
        if backend is not None:
            backend.close()
            self.backend = None

    @torch.no_grad()
    def _env_step(self):
        """One vectorised env step by the Actor (act, step the env, aggregate);
        returns the finished n-step transitions (or None)."""
        obs = self.obs.reshape(self.obs.shape[0], -1)
        a = self.actor.act(obs)
        step = self.env.step(self.actor.to_env(a).reshape(-1, *self.env.action_shape))
        step = step._replace(final_obs=step.final_obs.reshape(obs.shape[0], -1))
        if self.states is None:
            batch = self.actor.observe(obs, a, step)
        else:
            batch = self.actor.observe(obs, a, step, self.states, final_states(step))
            self.states = step_states(step).clone()   # a source may reuse its states buffer
        self.tracker.update(step.reward, step.done, step.valid)
        self.obs = step.obs
        return batch

    def on_source_not_restored(self) -> None:
        self.actor.cut_episodes()

    def _log(self, env_steps: int, n_critic: float, n_policy: float, critic_m: torch.Tensor,
             policy_m: torch.Tensor) -> None:
        cfg = self.config
        self.log_env_steps(env_steps * self.env.num_envs)
        self.tracker.log_to(self.metrics)
        trained = int(n_critic) * cfg.resolved_batch_size()
        self.log_trained_steps(trained)
        if n_critic:
            self.log_learner("critic_loss", float(critic_m[0]) / n_critic)
            self.log_learner("q_mean", float(critic_m[1]) / n_critic)
        if n_policy:
            self.log_learner("policy_loss", float(policy_m[0]) / n_policy)
            self.log_learner("entropy" if cfg.policy_learner == "sac" else "abs_action_mean",
                             float(policy_m[1]) / n_policy)
        self.log_learner("num_critic_updates", n_critic)
        self.log_learner("num_policy_updates", n_policy)
        self.log_learner("beta_av_achieved", n_critic / max(1, env_steps))
        self.log_learner("beta_pv_achieved", n_critic / n_policy if n_policy else float("nan"))
        self.log_learner("replay_bytes", self.replay_bytes)
        self.log_learner("curr_lr", self.live.lr)



class SequentialPQLFamily(PQLFamily):
    """DDPG(n)/SAC(n): the same roles, one loop, shared networks."""

    RESUME_EXACT = True

    def build_roles(self) -> None:
        cfg, dev, N = self.config, self.device, self.env.num_envs
        policy = self.actor.policy
        self.v = CriticLearner(cfg, self.dims, dev, self.live, N, self.capacity, policy=policy,
                               moments_fn=self.actor.moments)
        self.p = PolicyLearner(cfg, self.dims, dev, self.live, N, self.capacity, policy=policy,
                               critic=self.v.critic, replay=self.v.replay, moments_fn=self.actor.moments,
                               shared_critic=True)
        self.replay_bytes = self.v.replay.nbytes
        self.update_credit = 0.0
        self.policy_credit = 0.0

    def stateful_components(self) -> Dict[str, Any]:
        v, p, with_replay = self.v, self.p, self.config.checkpoint_replay
        return {**super().stateful_components(), "actor": self.actor,
                "v": StateAdapter(lambda: v.state_dict(with_replay), v.load_state_dict),
                "p": StateAdapter(lambda: p.state_dict(False), p.load_state_dict),   # its replay is v's
                # the learners' networks as modules too (generic tools inspect nn.Module components;
                # loading them again after the role states is idempotent)
                "policy_net": p.policy, "critic_net": v.critic, "critic_target_net": v.target}

    def extra_state(self) -> Dict[str, Any]:
        return {**super().extra_state(), "update_credit": self.update_credit, "policy_credit": self.policy_credit}

    def set_extra_state(self, state: Dict[str, Any]) -> None:
        super().set_extra_state(state)
        self.update_credit, self.policy_credit = state["update_credit"], state["policy_credit"]
        if not self.config.checkpoint_replay:
            self.v.replay.clear()   # saved without its replay (shared by both roles): restored, it holds none

    def training_step(self) -> None:
        cfg = self.config
        n_crit = n_pol = 0
        for _ in range(cfg.steps_per_iteration):
            batch = self._env_step()
            if batch is not None:
                self.v.add(batch)
            if self.v.ready():
                self.update_credit += cfg.beta_av
                k = int(self.update_credit)
                self.update_credit -= k
                for _ in range(k):
                    self.v.update()
                    n_crit += 1
                    self.policy_credit += 1.0 / cfg.beta_pv
                    if self.policy_credit >= 1.0 - 1e-9:
                        self.policy_credit -= 1.0
                        self.p.update()
                        n_pol += 1
        self._log(cfg.steps_per_iteration, n_crit, n_pol, self.v.take_metrics(), self.p.take_metrics())


class DDPGN(SequentialPQLFamily):
    @classmethod
    def get_default_config(cls) -> DDPGNConfig:
        return DDPGNConfig()


class SACN(SequentialPQLFamily):
    @classmethod
    def get_default_config(cls) -> SACNConfig:
        return SACNConfig()


class PQL(PQLFamily):
    """Parallel Q-Learning. ``backend='thread'``: learners are threads of this
    process sharing tensors; ``backend='process'``: each learner is a process
    of its own, sharing CPU memory; ``backend='ray'``: learners are Ray actors
    placed by resource bundles."""

    RESUME_EXACT = False   # concurrent interleaving is not reproducible bit for bit

    @classmethod
    def get_default_config(cls) -> PQLConfig:
        return PQLConfig()

    @classmethod
    def default_resource_request(cls, config):
        pgf = super().default_resource_request(config)
        cfg = cls.get_default_config().update_from_dict(config if isinstance(config, dict) else config.to_dict())
        extra = backend_class(cfg.resolved_backend()).resource_bundles(cfg)
        if not extra:
            return pgf
        return PlacementGroupFactory(bundles=list(pgf.bundles) + extra, strategy=cfg.placement_strategy)

    def build_roles(self) -> None:
        cfg = self.config
        self.arm_at = self.learning_starts   # Actor transitions after which the ratios are enforced
        self.controller = RatioController(
            ("actor", "critic", "policy"),
            [("actor", "critic", 1.0 / cfg.beta_av), ("policy", "critic", 1.0 / cfg.beta_pv)],
            slack=cfg.resolved_slack(), depth=cfg.resolved_depth(), window_s=cfg.ratio_window_s,
            max_wait_s=cfg.max_wait_s)
        self.backend = backend_class(cfg.resolved_backend())(
            cfg, self.dims, self.actor, self.controller, self.live,
            num_envs=self.env.num_envs, capacity=self.capacity, device=self.device)
        # in-process learners (thread back-end) are reachable for inspection; remote ones are not
        self.v, self.p = self.backend.local_learners()
        self.replay_bytes = self.backend.replay_bytes

    # -- checkpoints -----------------------------------------------------------------
    def stateful_components(self) -> Dict[str, Any]:
        return {**super().stateful_components(), "actor": self.actor, "controller": self.controller,
                **self.backend.state_components()}

    def set_state(self, state: Dict[str, Any]) -> None:
        super().set_state(state)
        # Restored without replays: the learners are not ready until the Actor has refilled
        # learning_starts transitions. An armed controller would hold the Actor at its gate
        # for max_wait_s on almost every step meanwhile (nobody ticks to release it).
        self.arm_at = self.learning_starts
        if not self.config.checkpoint_replay:
            self.controller.arm(False)
            self.arm_at = self.actor.emitted + self.learning_starts
        self.backend.after_restore()
        if not self.config.checkpoint_replay:
            self.backend.clear_replays()   # saved without them: restored, the learners hold none

    def apply_live_hyperparameters(self) -> None:
        super().apply_live_hyperparameters()
        if getattr(self, "backend", None) is not None:
            self.backend.set_live(self.live)

    # -- one iteration -----------------------------------------------------------------
    def training_step(self) -> None:
        cfg, ctl, be = self.config, self.controller, self.backend
        c0, w0, t0 = ctl.counters()["counts"], be.waited_s(), time.perf_counter()
        be.resume()
        try:
            for _ in range(cfg.steps_per_iteration):
                if ctl.armed:
                    be.gate_actor()
                be.sync_actor()
                batch = self._env_step()
                if batch is not None:
                    be.push(batch, self._moments_copy())
                ctl.tick("actor")
                if not ctl.armed and self.actor.emitted >= self.arm_at and be.learners_ready():
                    ctl.arm()
            # end balanced: the learners finish the work this iteration's env steps owe
            be.wait_caught_up()
        finally:
            be.pause()
        elapsed = max(1e-9, time.perf_counter() - t0)
        c1 = ctl.counters()["counts"]
        d = {k: c1[k] - c0[k] for k in c0}
        self._log(int(d["actor"]), d["critic"], d["policy"], be.take_metrics("critic"), be.take_metrics("policy"))
        w1 = be.waited_s()
        for k, w in w1.items():
            self.log_learner(f"{k}_wait_fraction", (w - w0.get(k, 0.0)) / elapsed)
        self.log_learner("wait_overrides", float(sum(be.overrides().values())), window=1)
        self.log_learner("ratio_control_armed", float(ctl.armed))
        rates = ctl.window_rates()
        for k, v in rates.items():
            self.log_learner(f"{k}_rate_per_s", v)
        if rates["actor"] > 0 and rates["policy"] > 0:
            self.log_learner("beta_av_window", rates["critic"] / rates["actor"])
            self.log_learner("beta_pv_window", rates["critic"] / rates["policy"])

    def _moments_copy(self):
        s = self.actor.moments()
        return None if s is None else tuple(t.clone() for t in s)

