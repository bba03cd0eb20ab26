"""The synchronous batched on-policy loop (FastPPO, FastA2C and the
algorithms built over them).

Stooke & Abbeel's batched sampler: every step one forward for all N envs,
written into preallocated ``[T, N]`` storage; then targets from one batched
critic pass and GAE (``_targets``). ``training_step`` reads rollout ->
targets -> update. The update is an object composed in
(:class:`.update.UpdateRule`: PPO's minibatch epochs, A2C's one step), so the
other iteration shapes (HTS-RL's overlapped rounds, the asynchronous learners'
driver) are written once over both updates by plain subclassing of
:class:`OnPolicyAlgorithm`.
"""
from __future__ import annotations

import math
from typing import Any, Dict, Optional

import ray
import torch

from ...core.algorithm import FastAlgorithm
from ...core.compile import compiled
from ...core.multi_learner import episode_report, log_learner_episodes
from ...core.rollout import RolloutStorage, compute_gae
from ...core.threads import torch_threads
from ...envs.base import Step
from ..asymmetric import current_states, final_states, state_dim, step_states
from ..recurrent_module import actor_critic_class, recurrent_model_config
from .batch import OnPolicyBatch, Targets
from .collectives import LOCAL_PARAMETERS, LearnerCollectives, ParamSync
from .config import decorrelation_horizon, resolve_acting_threads, resolve_normalize_obs
from .update import UpdateRule


class OnPolicyAlgorithm(FastAlgorithm):
    """The synchronous batched on-policy loop around a composed update rule
    (``UPDATE``, built in :meth:`build` as ``self.update_rule``)."""

    SUPPORTS_DATA_PARALLEL = True
    UPDATE: type = UpdateRule
    # -- construction ------------------------------------------------------------
    def build(self) -> None:
        cfg, env = self.config, self.env
        self.normalize_obs = resolve_normalize_obs(cfg.normalize_obs, env)
        #: torch threads the rollout acts with (None: unchanged)
        self.acting_threads = resolve_acting_threads(cfg.acting_threads, env, self.learns_while_acting())
        # asymmetric actor-critic: the critic (and its input normaliser) read the source's states
        self.state_dim = state_dim(cfg, env, type(self).__name__)
        self.critic_key, self.final_critic_key = (("states", "final_states") if self.state_dim is not None
                                                  else ("obs", "final_obs"))
        self.module = actor_critic_class(cfg)(
            observation_space=env.single_observation_space, action_space=env.single_action_space,
            inference_only=False,
            model_config={"hidden_sizes": list(cfg.hidden_sizes), "activation": cfg.activation,
                          "critic_hidden_sizes": (None if cfg.critic_hidden_sizes is None
                                                  else list(cfg.critic_hidden_sizes)),
                          "init": cfg.init, "std_mode": cfg.std_mode, "init_log_std": cfg.init_log_std,
                          "std_param": cfg.std_param, "clip_actions": cfg.clip_actions,
                          "normalize_obs": self.normalize_obs, "state_dim": self.state_dim,
                          "shared_trunk": bool(getattr(cfg, "shared_trunk", False)),
                          **recurrent_model_config(cfg)},
        ).to(self.device)
        self.params = list(self.module.parameters())
        #: the minibatch shuffles' generator (None: torch's default generator, the algorithm's stream)
        self.shuffle_generator = self.make_shuffle_generator()
        self.optimizer = self.UPDATE.make_optimizer(self.params, self.configured_lr(), cfg)
        self.param_sync = LOCAL_PARAMETERS  # asynchronous learners swap in their central-store sync
        self.update_rule = self.make_update_rule()
        self.horizon = cfg.resolved_horizon()
        # The MLP policy sees flattened observations (`_normalize_obs`), so storage
        # holds them flat too (image sources such as MinAtar included).
        obs_shape, act_shape = (math.prod(env.obs_shape),), env.action_shape
        act_dtype = torch.int64 if env.is_discrete else torch.float32
        self.storage = RolloutStorage(self.horizon, env.num_envs, {
            "obs": (obs_shape, torch.float32), "final_obs": (obs_shape, torch.float32),
            "actions": (act_shape, act_dtype), "logp": ((), torch.float32),
            "rewards": ((), torch.float32), "terminated": ((), torch.bool), "done": ((), torch.bool),
            "valid": ((), torch.bool),
            **({"raw_obs": (obs_shape, torch.float32)} if self.normalize_obs else {}),
            # raw states; `_prepare_critic_inputs` normalises them in place once per batch
            **({k: ((self.state_dim,), torch.float32) for k in ("states", "final_states")}
               if self.state_dim is not None else {}),
        }, self.device)
        self.states = current_states(env) if self.state_dim is not None else None
        self.any_invalid = False  # flips to True the first time a source reports valid=False masks
        # the act step's tensor function, compiled when `compile` is set (the same function eager)
        self._act_fn = compiled(self._act_step, cfg.compile, self.device)
        self._decorrelate()

    def make_shuffle_generator(self) -> Optional[torch.Generator]:
        """The generator of the minibatch shuffles: None, torch's default one
        (the algorithm's own stream). HTS gives its learner thread its own."""
        return None

    def make_update_rule(self) -> UpdateRule:
        """The rule (``UPDATE``) built with what it uses: module, optimizer,
        settings, the learner group's collectives, the parameter sync."""
        cfg = self.config
        return self.UPDATE(self.module, self.optimizer, self.UPDATE.settings_from(cfg), self.collectives,
                           after_step=self.param_sync.after_update, shuffle_generator=self.shuffle_generator,
                           compile=cfg.compile)

    @property
    def collectives(self) -> LearnerCollectives:
        """This learner's collectives with the other data-parallel learners."""
        if "_collectives" not in self.__dict__:
            self._collectives = LearnerCollectives()
        return self._collectives

    @property
    def dist(self):
        """The ``DistributedContext`` when this is one of several data-parallel
        learners (set by ``core.multi_learner.join_group``), else None."""
        return self.collectives.dist

    @dist.setter
    def dist(self, value) -> None:
        self.collectives.dist = value

    def _normalize_obs(self, obs: torch.Tensor, update: bool) -> torch.Tensor:
        if update and self.normalize_obs:
            self.module.obs_norm.update(obs.float().reshape(obs.shape[0], -1), reduce=self.reduce_over_learners)
        return self.module.policy_input(obs)

    @torch.no_grad()
    def _decorrelate(self) -> None:
        """Start-state decorrelation, so the N envs do not move in lock-step.

        A source with episode clocks (``randomize_episode_progress``: mjlab,
        Isaac Lab, Isaac Gym, the built-in tasks) gets its clocks randomised
        (rsl_rl's ``init_at_random_ep_len``), at no env-step cost. Then Stooke &
        Abbeel §5.3: env i takes k_i ~ U[0, K] uniform-random actions, then the
        initial policy until K. By default K is the time limit (or 100) but at
        most ``DECORRELATION_BUDGET / N``: on small tasks that is the whole time
        limit, while on a slow simulator with long episodes the budget keeps
        the phase from taking a large share of a run. The first, partial
        episode of each env is not counted in the episode statistics."""
        k_max = decorrelation_horizon(self.config.decorrelate_steps, self.env)
        if k_max == 0:
            return
        n = self.env.num_envs
        if hasattr(self.env, "randomize_episode_progress"):
            self.env.randomize_episode_progress()
        k = torch.randint(0, k_max + 1, (n,), device=self.device)
        for t in range(k_max):
            policy_a = self._exploration_action(self._normalize_obs(self.obs, update=True))
            random_a = self.env.sample_actions()
            use_random = (t < k).view(-1, *([1] * (random_a.dim() - 1)))
            step = self.env.step(torch.where(use_random, random_a, self.module.to_env_action(policy_a)))
            self._after_env_step(step)
            self.obs = step.obs
            if self.states is not None:
                self.states = step_states(step)
        self.log_env_steps(k_max * n * self.world_size)  # every learner decorrelates its envs
        self.tracker.skip_current_episodes()

    def _exploration_action(self, obs_n: torch.Tensor) -> torch.Tensor:
        """A sampled action (policy units) for the current normalised observations of
        the training envs (a recurrent policy also advances its memory)."""
        return self.module.sample(obs_n)[0]

    def _after_env_step(self, step: Step) -> None:
        """After every env step of the training envs (a recurrent policy forgets the
        episodes that ended)."""

    def pool_over_learners(self, reduce) -> None:
        # start-state decorrelation updated each learner's observation statistics alone
        # (at build, before the group existed): without this, the join's broadcast kept
        # learner 0's and dropped the others' observations
        if self.normalize_obs:
            self.module.obs_norm.pool(reduce)

    @property
    def reduce_over_learners(self):
        """In-place sum over data-parallel learners, or None for one learner."""
        return self.collectives.sum_

    def apply_live_hyperparameters(self) -> None:
        super().apply_live_hyperparameters()
        self.update_rule.settings = self.UPDATE.settings_from(self.config)

    def use_optimizer(self, optimizer: torch.optim.Optimizer, param_sync: Optional[ParamSync] = None) -> None:
        """Replace the optimizer (and how parameters are synchronised with
        other learners): how an asynchronous learner (FastAPPO/FastA3C) makes a
        plain FastPPO/FastA2C step against the central store. The rule is
        built again around them."""
        self.optimizer = optimizer
        self.param_sync = param_sync if param_sync is not None else LOCAL_PARAMETERS
        self.update_rule = self.make_update_rule()

    def training_intensity(self) -> float:
        """Average number of gradient uses of each sample."""
        return self.update_rule.training_intensity()

    def _learn(self, targets: Targets) -> None:
        """The update: the rule learns from the rollout's batch, the algorithm logs its statistics."""
        for key, value in self.update_rule.learn(self._batch(targets)).items():
            self.log_learner(key, value)

    def _batch(self, targets: Targets) -> OnPolicyBatch:
        """The rollout in storage and its targets as the batch an update rule learns from."""
        st = self.storage
        return OnPolicyBatch(st.flat("obs"), st.flat("actions"), st.flat("logp"), st.flat(self.critic_key),
                             *targets)

    def optimizers(self) -> list:
        return [self.optimizer]

    def stateful_components(self) -> Dict[str, Any]:
        return {**super().stateful_components(), "module": self.module, "optimizer": self.optimizer}

    # -- acting --------------------------------------------------------------------
    @torch.no_grad()
    def compute_actions(self, obs: torch.Tensor, explore: bool = True) -> torch.Tensor:
        a, _ = self.module.sample(self._normalize_obs(obs, update=False), deterministic=not explore)
        return self.module.to_env_action(a)

    # -- one iteration: rollout, targets, update -----------------------------------------
    def training_step(self) -> None:
        """Rollout and learn; with data-parallel learners the remote ones run
        the same step concurrently (their collectives pair with ours)."""
        remote = self._dp_group.start_step() if self._dp_group is not None else []
        with self.metrics.log_time(("timers", "rollout")):
            self._rollout()
        with self.metrics.log_time(("timers", "learn")):
            batch = self._targets()
            self._learn(batch)
            self.param_sync.after_learn()
        if self.dist is None:
            self.tracker.log_to(self.metrics)
        elif self._dp_group is not None:  # learner 0 reports all learners' episodes as one population
            log_learner_episodes(self.metrics, [episode_report(self.tracker), *ray.get(remote)])
        n = self.horizon * self.env.num_envs * self.world_size
        self.log_env_steps(n)
        self.log_trained_steps(n)
        self.log_learner("training_intensity", self.training_intensity())
        self.log_learner("num_learners", self.world_size)

    @torch.no_grad()
    def _rollout(self) -> None:
        """T batched steps. Observation statistics stay frozen during the
        rollout (stored normalised obs are exactly what the policy saw) and
        absorb the whole rollout once at the end; episode accounting is also
        one batched update per rollout."""
        with torch_threads(self.acting_threads):
            self._rollout_steps()
        st = self.storage
        valid = st["valid"] if self.any_invalid else None
        self.tracker.update_batch(st["rewards"], st["done"], valid)
        if self.normalize_obs:
            self.module.obs_norm.update(st["raw_obs"], mask=valid, reduce=self.reduce_over_learners)

    def learns_while_acting(self) -> bool:
        """Whether the update runs while the policy acts, in this process (FastPPO with
        ``learn_while_stepping``, HTS-RL): then acting keeps torch's threads."""
        return False

    def _rollout_steps(self) -> None:
        """The rollout's T act-and-step iterations, into the storage."""
        st = self.storage
        for t in range(self.horizon):
            if self.normalize_obs:
                st["raw_obs"][t].copy_(self.obs.reshape(self.obs.shape[0], -1))
            if self.states is not None:   # before the step: a source may reuse its states buffer
                st["states"][t].copy_(self.states)
            obs_n, action, logp, env_action = self._act_fn(self.obs)
            step = self._step_env(env_action)
            self._after_env_step(step)
            if step.valid is not None:
                self.any_invalid = True
                st["valid"][t].copy_(step.valid)
            else:
                st["valid"][t].fill_(True)
            st.insert(t, obs=obs_n, final_obs=self._normalize_obs(step.final_obs, update=False),
                      actions=action, logp=logp, rewards=step.reward, terminated=step.terminated,
                      done=step.terminated | step.truncated)
            self._record_step(t, step)
            self.obs = step.obs
            if self.states is not None:
                st["final_states"][t].copy_(final_states(step))
                self.states = step_states(step)
            self.param_sync.after_sampling_step(t)

    def _record_step(self, t: int, step: Step) -> None:
        """After env step ``t`` of a rollout, before the next observation replaces
        the current one: where an algorithm's extensions read the step (FastPPO's
        curiosity keeps the next observations). Nothing by default."""

    def _step_env(self, actions: torch.Tensor) -> Step:
        """One batched env step of a rollout (FastPPO's learn_while_stepping learns
        while the simulator computes it: ``ppo.overlap``)."""
        return self.env.step(actions)

    def _act_step(self, obs: torch.Tensor):
        """The act step's tensor work (what ``compile`` compiles): normalised
        observations, sampled actions, their log-probabilities, env actions."""
        obs_n = self.module.policy_input(obs)
        action, logp = self.module.sample(obs_n)
        return obs_n, action, logp, self.module.to_env_action(action)

    @torch.no_grad()
    def _prepare_critic_inputs(self, valid) -> None:
        """Asymmetric critic: the batch's raw states absorb into the state
        statistics, then ``states``/``final_states`` are normalised in place
        (once per batch, so the critic sees one normalisation in targets and
        loss). Nothing to do when the critic reads the (already normalised)
        observations."""
        if self.state_dim is None:
            return
        st, module = self.storage, self.module
        if self.normalize_obs:
            module.state_norm.update(st["states"], mask=valid, reduce=self.reduce_over_learners)
        for key in ("states", "final_states"):
            st[key].copy_(module.critic_input(st.flat(key)).view_as(st[key]))

    def _target_values(self, critic_in: torch.Tensor) -> torch.Tensor:
        """State values (return units) of prepared critic inputs, for GAE and
        value targets: the current critic's. HTS may use the critic that
        acted instead (its ``value_targets`` key)."""
        v_n = self.module.value(critic_in)
        return self.module.value_norm.denormalize(v_n) if self.config.normalize_values else v_n

    def _rollout_values(self):
        """``V(s_t)`` and ``V(final_obs_t)`` ``[T, N]`` (return units) of the rollout's
        prepared critic inputs, in one batched critic pass."""
        st = self.storage
        both = torch.cat([st.flat(self.critic_key), st.flat(self.final_critic_key)])
        return self._target_values(both).view(2, self.horizon, self.env.num_envs)

    def _targets(self) -> Targets:
        """Values of the critic's inputs (normalised observations, or states)
        and of ``final_obs`` (``final_states``) in one batched critic
        pass, GAE with time-out bootstrapping, value-normaliser update."""
        cfg, st, module = self.config, self.storage, self.module
        T, N = self.horizon, self.env.num_envs
        B = T * N
        valid = st["valid"] if self.any_invalid else None
        self._prepare_critic_inputs(valid)
        with torch.no_grad():
            values, next_values = self._rollout_values()
            vnorm = module.value_norm
            adv, ret = compute_gae(st["rewards"], values, next_values, st["terminated"], st["done"],
                                   cfg.gamma, cfg.lambda_, valid)
            if cfg.normalize_values:
                vnorm.update(ret, mask=valid, reduce=self.reduce_over_learners)
                targets = vnorm.normalize(ret).reshape(B)
                old_v = vnorm.normalize(values).reshape(B)
            else:
                targets, old_v = ret.reshape(B), values.reshape(B)
        w = valid.reshape(B).float() if valid is not None else None
        return Targets(adv.reshape(B), targets, old_v, w)

