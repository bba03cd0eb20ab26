"""PQL (concurrent Actor / V-learner / P-learner) and its sequential
baselines DDPGN and SACN, as registered RLlib algorithms.

All three share the roles of ``components.py``. DDPGN/SACN run them in one
loop: per vectorised env step exactly ``beta_av`` critic updates and one
policy update per ``beta_pv`` critic updates (the paper's ``update_times``),
sharing networks, replay and statistics; they are deterministic and resume
bit-exactly. PQL runs the learners concurrently (``backend``: threads or Ray
actors), keeps each role's own copies and holds the speed ratios with a
:class:`~rllib_fast.core.ratio.RatioController`; the interleaving depends on
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
from ...core.ratio import RatioController
from ...core.state import StateAdapter
from ..asymmetric import current_states, final_states, state_dim, step_states
from .components import ActorRole, CriticLearner, Dims, LiveParams, PolicyLearner, make_critic
from .config import DDPGNConfig, PQLConfig, SACNConfig
from .nets import load_snapshot, snapshot



class _PQLFamily(FastAlgorithm):
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
        self.actor = ActorRole(cfg, self.dims, env.num_envs, self.device, space.low, space.high)
        self.build_roles()

    def build_roles(self) -> None:
        raise NotImplementedError("abstract: _PQLFamily.build_roles")

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
    def _act_step(self):
        """One vectorised Actor step; returns the finished n-step transitions (or None)."""
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

    def _networks(self) -> Dict[str, Any]:
        """The learners' networks as modules too (generic tools inspect nn.Module components;
        loading them again after the role states is idempotent)."""
        return {"policy_net": self.p.policy, "critic_net": self.v.critic, "critic_target_net": self.v.target}

    def _state(self, learner, with_replay_ok: bool = True):
        return StateAdapter(lambda: learner.state_dict(self.config.checkpoint_replay and with_replay_ok),
                            learner.load_state_dict)


class _Sequential(_PQLFamily):
    """DDPG(n)/SAC(n): the same roles, one loop, shared networks."""

    RESUME_EXACT = True

    def build_roles(self) -> None:
        cfg, dev, N = self.config, self.device, self.env.num_envs
        policy = self.actor.policy
        self.v = CriticLearner(cfg, self.dims, dev, self.live, N, self.capacity, policy=policy,
                               stats_fn=self.actor.stats)
        self.p = PolicyLearner(cfg, self.dims, dev, self.live, N, self.capacity, policy=policy,
                               critic=self.v.critic, replay=self.v.replay, stats_fn=self.actor.stats,
                               shared_critic=True)
        self.replay_bytes = self.v.replay.nbytes
        self.update_credit = 0.0
        self.policy_credit = 0.0

    def stateful_components(self) -> Dict[str, Any]:
        return {**super().stateful_components(), "actor": self.actor, "v": self._state(self.v),
                "p": self._state(self.p, with_replay_ok=False), **self._networks()}

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
            batch = self._act_step()
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


class DDPGN(_Sequential):
    @classmethod
    def get_default_config(cls) -> DDPGNConfig:
        return DDPGNConfig()


class SACN(_Sequential):
    @classmethod
    def get_default_config(cls) -> SACNConfig:
        return SACNConfig()


class PQL(_PQLFamily):
    """Parallel Q-Learning. ``backend='thread'``: learners are threads of this
    process sharing tensors; ``backend='ray'``: learners are Ray actors placed
    by resource bundles."""

    RESUME_EXACT = False   # concurrent interleaving is not reproducible bit for bit

    @classmethod
    def get_default_config(cls) -> PQLConfig:
        return PQLConfig()

    @classmethod
    def default_resource_request(cls, config):
        pgf = super().default_resource_request(config)
        cfg = cls.get_default_config().update_from_dict(config if isinstance(config, dict) else config.to_dict())
        if cfg.backend != "ray":
            return pgf
        extra = [{"CPU": cfg.num_cpus_per_pql_learner, "GPU": cfg.num_gpus_per_v_learner},
                 {"CPU": cfg.num_cpus_per_pql_learner, "GPU": cfg.num_gpus_per_p_learner}]
        return PlacementGroupFactory(bundles=list(pgf.bundles) + extra, strategy=cfg.placement_strategy)

    def build_roles(self) -> None:
        cfg, N = self.config, self.env.num_envs
        self.arm_at = self.learning_starts   # Actor transitions after which the ratios are enforced
        self.controller = RatioController(
            ("actor", "critic", "policy"),
            [("actor", "critic", 1.0 / cfg.beta_av), ("policy", "critic", 1.0 / cfg.beta_pv)],
            slack=cfg.resolved_slack(), depth=cfg.resolved_depth(), window_s=cfg.ratio_window_s,
            max_wait_s=cfg.max_wait_s)
        if cfg.backend == "thread":
            from .thread_backend import ThreadBackend

            vdev = self.device if cfg.v_learner_device == "auto" else torch.device(cfg.v_learner_device)
            pdev = self.device if cfg.p_learner_device == "auto" else torch.device(cfg.p_learner_device)
            self.v = CriticLearner(cfg, self.dims, vdev, self.live, N, self.capacity)
            self.p = PolicyLearner(cfg, self.dims, pdev, self.live, N, self.capacity)
            load_snapshot(self.p.policy, snapshot(self.actor.policy))
            load_snapshot(self.v.policy, snapshot(self.actor.policy))
            load_snapshot(self.p.critic, snapshot(self.v.critic))
            self.replay_bytes = self.v.replay.nbytes + self.p.replay.nbytes
            self.backend = ThreadBackend(self)
        else:
            from ...core.transition_replay import replay_bytes
            from .ray_backend import RayBackend

            self.v = self.p = None
            self.initial_critic = make_critic(cfg, self.dims)
            v_fields, p_fields = cfg.replay_fields(self.dims.obs_dim, self.dims.act_dim, self.dims.state_dim)
            cap = (self.capacity // N) * N
            self.replay_bytes = replay_bytes(cap, v_fields) + replay_bytes(cap, p_fields)
            self.backend = RayBackend(self)

    # -- checkpoints -----------------------------------------------------------------
    def stateful_components(self) -> Dict[str, Any]:
        out = {**super().stateful_components(), "actor": self.actor, "controller": self.controller}
        if self.config.backend == "thread":
            out.update(v=self._state(self.v), p=self._state(self.p), **self._networks())
        else:
            be = lambda: self.backend  # noqa: E731 - the backend object changes on rebuild
            for key, role in (("v", "critic"), ("p", "policy")):
                out[key] = StateAdapter(
                    (lambda r: lambda: be().get_state(r, self.config.checkpoint_replay))(role),
                    (lambda r: lambda s: be().set_state(r, s))(role))
        return out

    def set_state(self, state: Dict[str, Any]) -> None:
        super().set_state(state)
        # Restored without replays: the learners are not ready until the Actor has refilled
        # learning_starts transitions. An armed controller would hold the Actor at its gate
        # for max_wait_s on almost every step meanwhile (nobody ticks to release it).
        self.arm_at = self.learning_starts
        if not self.config.checkpoint_replay:
            self.controller.arm(False)
            self.arm_at = self.actor.emitted + self.learning_starts
        if self.config.backend == "thread":
            load_snapshot(self.actor.policy, snapshot(self.p.policy))
            self.backend.policy_box.put(snapshot(self.p.policy))
            self.backend.critic_box.put(snapshot(self.v.critic))
        else:
            self.backend.discard_pending()
            self.backend.pause()
        if not self.config.checkpoint_replay:
            self.backend.clear_replays()   # saved without them: restored, the learners hold none

    def apply_live_hyperparameters(self) -> None:
        super().apply_live_hyperparameters()
        if self.config.backend == "ray" and getattr(self, "backend", None) is not None:
            self.backend.set_live(self.live)

    # -- one iteration -----------------------------------------------------------------
    def training_step(self) -> None:
        cfg, ctl, be = self.config, self.controller, self.backend
        ray_mode = cfg.backend == "ray"
        s0, t0 = ctl.stats(), time.perf_counter()
        be.resume()
        try:
            for _ in range(cfg.steps_per_iteration):
                if ctl.armed:
                    be.gate_actor() if ray_mode else ctl.gate("actor")
                be.sync_actor()
                batch = self._act_step()
                if batch is not None:
                    be.push(batch, self._stats_copy())
                ctl.tick("actor")
                if not ctl.armed and self.actor.emitted >= self.arm_at:
                    ctl.arm()
            # end balanced: the learners finish the work this iteration's env steps owe
            be.wait_caught_up()
        finally:
            be.pause()
        elapsed = max(1e-9, time.perf_counter() - t0)
        s1 = ctl.stats()
        d = {k: s1["counts"][k] - s0["counts"][k] for k in s1["counts"]}
        if ray_mode:
            critic_m, policy_m = be.take_metrics("critic"), be.take_metrics("policy")
            waited = {"actor": s1["waited_s"]["actor"] - s0["waited_s"]["actor"]}
        else:
            critic_m, policy_m = self.v.take_metrics(), self.p.take_metrics()
            waited = {k: s1["waited_s"][k] - s0["waited_s"][k] for k in s1["waited_s"]}
        self._log(int(d["actor"]), d["critic"], d["policy"], critic_m, policy_m)
        for k, w in waited.items():
            self.log_learner(f"{k}_wait_fraction", w / elapsed)
        overrides = be.remote_overrides if ray_mode else s1["overrides"]
        self.log_learner("wait_overrides", float(sum(overrides.values())), window=1)
        self.log_learner("ratio_control_armed", float(ctl.armed))
        rates = ctl.window_rates()
        for k, v in rates.items():
            self.log_learner(f"{k}_rate_per_s", v)
        if rates["actor"] > 0 and rates["policy"] > 0:
            self.log_learner("beta_av_window", rates["critic"] / rates["actor"])
            self.log_learner("beta_pv_window", rates["critic"] / rates["policy"])

    def _stats_copy(self):
        s = self.actor.stats()
        return None if s is None else tuple(t.clone() for t in s)

