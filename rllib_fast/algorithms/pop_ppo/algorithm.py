"""PopPPO: a PBT population of K PPO agents sharing one batched simulator.

One ``training_step`` reads top to bottom like FastPPO's, with a member axis:

1. **rollout**: ONE env of ``K * n`` envs; member k acts on envs
   ``k*n .. k*n+n-1``. Each step is one stacked forward for all ``K x n``
   envs (observations viewed ``[K, n, ...]``, each member's own observation
   normaliser), written into ``[T, K, n]`` storage;
2. **targets**: one stacked critic pass over observations and ``final_obs``
   (or the source's critic states), GAE with each member's ``gamma`` and
   ``lambda_`` (``[K, 1]`` tensors broadcast over ``[T, K, n]``), each
   member's value normaliser;
3. **update**: one minibatch loop for all members: every minibatch takes the
   same positions of each member's own ``[T*n]`` data (one ``randperm``, so a
   population of one shuffles exactly as FastPPO), the loss is the sum of the
   members' PPO losses (``ppo.loss.ppo_loss`` over the member axis, each member
   with its own clip, value and entropy weights, so a member's gradient
   reaches only its own slice), gradients are clipped per member
   (``core.stacked.clip_grads_per_member``) and one
   :class:`~rllib_fast.core.stacked.VectorAdam` step moves everyone with its
   own lr. The adaptive-KL lr (``ppo.loss.kl_adapted_lr``) is a ``[K]`` tensor
   adapted on the device after each epoch (no host sync). A population of one
   steps with FastPPO's own optimizer instead (``optim.py`` says why), so it is
   the FastPPO run of its seed, bit for bit;
4. **PBT** every ``pbt_interval`` iterations: the PBT component
   (``population/pbt.py``, ``self.pbt``) the other populations hold too:
   truncation selection on each member's recent returns, exploit = copy the
   donor's slices of weights, normalisers, Adam moments and adaptive lr
   (:meth:`PopPPO.exploit_members`), explore = Tune's rule on the member
   hyperparameter tensors. The simulator is not reset: the replaced members'
   running episodes go on, but do not count towards their fitness;
5. **report**: the component's population metrics (``population/member_i/...``,
   ``env_runners/episode_return_mean`` = the best member's fitness).
"""
from __future__ import annotations

import math
from typing import Any, Dict, Optional

import torch
from ray.rllib.core import DEFAULT_MODULE_ID

from ...core.algorithm import FastAlgorithm
from ...core.compile import compiled
from ...core.rollout import RolloutStorage, compute_gae
from ...core.stacked import copy_members
from .stacked_memory import StackedRecurrentMemory
from ...core.state import StateAdapter
from ..asymmetric import current_states, final_states, state_dim, step_states
from ..extensions.symmetry import make_symmetry
from ..onpolicy.config import decorrelation_horizon, resolve_normalize_obs
from ..onpolicy.reductions import standardize
from ..population.pbt import InTrialPBT
from ..ppo.algorithm import PPOUpdate
from ..ppo.loss import PPOLossTerms, ppo_loss
from ..ppo.recurrent import episode_ended, memories_on
from ..recurrent_module import Memories, recurrent_model_config
from .config import PopA2CConfig, PopPPOConfig
from .module import StackedActorCritic, pop_ppo_policy_module, to_env_action
from .optim import SingleAdam, StackedAdam
from .symmetric import mirror_member_batch, mirror_members, symmetric_member_loss


class PopPPO(FastAlgorithm):
    """K PPO agents sharing one batched simulator, per-member hyperparameters, in-trial PBT
    (the :class:`~..population.pbt.InTrialPBT` component, ``self.pbt``)."""

    #: the loss statistics, FastPPO's (each reported as the members' mean)
    LOSS_STATS = PPOUpdate.STATS
    #: FastPPO's extensions this algorithm implements (``symmetry``: ``.symmetric``, per member)
    EXTENSIONS = ("symmetry",)
    #: recurrent members (``rnn_type``): each member's own LSTM/GRU, PPO over whole sequences
    SUPPORTS_RECURRENT = True

    @classmethod
    def get_default_config(cls) -> PopPPOConfig:
        return PopPPOConfig()

    # -- construction ------------------------------------------------------------------------
    def build(self) -> None:
        cfg, env = self.config, self.env
        self.K, self.n = cfg.population_size, cfg.num_envs_per_member
        if env.num_envs != self.K * self.n:
            raise ValueError(f"{type(self).__name__}: env has {env.num_envs} envs; expected population_size * "
                             f"num_envs_per_member = {self.K * self.n}")
        self.hidden_sizes = tuple(cfg.hidden_sizes)
        self.obs_dim = int(math.prod(env.obs_shape))
        self.normalize_obs = resolve_normalize_obs(cfg.normalize_obs, env)
        self.state_dim = state_dim(cfg, env, type(self).__name__)
        # PBT (its hyperparameter tensors, fitness, rounds, report); a population of one is plain
        # FastPPO: the config's values. PPO's own draws (action noise, shuffles) come from the
        # algorithm's torch stream as FastPPO's do.
        self.pbt = InTrialPBT(cfg, self.K, self.n, self.device, self.seed, cfg.member_hparams(),
                                exploit=self.exploit_members,
                                hyperparameters_changed=self.optimizer_hparams,
                                sample_initial=cfg.pbt_init == "sample" and self.K > 1)
        #: the member hyperparameters (``[K]`` tensors the update reads) and fitness: the PBT component's
        self.hp, self.returns = self.pbt.hp, self.pbt.returns
        self.env_steps = 0      # total env steps (all members): host count of our own calls
        self.num_updates = 0    # iterations (one update of every member each)
        #: FastPPO's symmetry extension with a member axis (``.symmetric``); None: off
        self.symmetry = make_symmetry(cfg.symmetry, env)
        #: with symmetry and an asymmetric critic: this rollout's mirrored raw states ``[K, k*T*n, S]``
        self._mirrored_states = None
        self.build_learner()

    def build_learner(self) -> None:
        cfg, env, K = self.config, self.env, self.K
        self.module = StackedActorCritic(K, self.obs_dim, env.single_action_space, self.hidden_sizes,
                                         cfg.activation, cfg.init_log_std, cfg.std_mode == "state_dependent",
                                         self.state_dim, self.normalize_obs,
                                         recurrent_model_config(cfg)).to(self.device)
        space = env.single_action_space
        if not self.module.discrete:
            self.act_low = torch.as_tensor(space.low, dtype=torch.float32, device=self.device)
            self.act_high = torch.as_tensor(space.high, dtype=torch.float32, device=self.device)
        self.params = list(self.module.parameters())
        # the lr in effect is the optimizer's (adapted to each member's epoch KL); `lr_applied` is
        # the member lr hyperparameter it was last set from (PBT or a config change moves it)
        self.lr_applied = self.hp["lr"].clone()
        self.optimizer = (StackedAdam(self.params, K, self.hp["lr"], cfg.grad_clip, cfg.adaptive_lr_bounds)
                          if K > 1 else SingleAdam(self.params, cfg.lr, cfg.grad_clip, cfg.adaptive_lr_bounds,
                                                   self.module.transposed_parameters()))
        self.horizon = cfg.resolved_horizon()
        T, N = self.horizon, env.num_envs
        obs_shape, act_shape = (self.obs_dim,), env.action_shape
        act_dtype = torch.int64 if env.is_discrete else torch.float32
        # [T, K*n] rows are [T, K, n] in memory: member k's slice is columns k*n .. k*n+n-1
        self.storage = RolloutStorage(T, N, {
            "obs": (obs_shape, torch.float32), "final_obs": (obs_shape, torch.float32),
            "actions": (act_shape, act_dtype), "logp": ((), torch.float32),
            "rewards": ((), torch.float32), "terminated": ((), torch.bool), "done": ((), torch.bool),
            "valid": ((), torch.bool),
            **({"raw_obs": (obs_shape, torch.float32)} if self.normalize_obs else {}),
            **({k: ((self.state_dim,), torch.float32) for k in ("states", "final_states")}
               if self.state_dim is not None else {}),
        }, self.device)
        self.critic_key, self.final_critic_key = (("states", "final_states") if self.state_dim is not None
                                                  else ("obs", "final_obs"))
        self.states = current_states(env) if self.state_dim is not None else None
        self.any_invalid = False
        self._act_fn = compiled(self._act_step, cfg.compile, self.device)
        self.loss_fn = compiled(self._summed_loss, cfg.compile, self.device)   # what ``compile`` compiles
        if self.module.recurrent:   # every member's memory of each of its envs, carried across rollouts
            self.memories = self.module.initial_memories(self.n, self.device)
            self.rollout_start = self.memories
        self._decorrelate()

    # -- member views ----------------------------------------------------------------------------
    def members(self, x: torch.Tensor) -> torch.Tensor:
        """``[K*n, ...]`` (env order) -> ``[K, n, ...]``."""
        return x.reshape(self.K, self.n, *x.shape[1:])

    def by_member(self, name: str) -> torch.Tensor:
        """A storage field ``[T, K*n, ...]`` as member-major ``[K, T*n, ...]``
        (member k's own transitions, time-major inside)."""
        x = self.storage[name]
        T = x.shape[0]
        x = x.reshape(T, self.K, self.n, *x.shape[2:]).transpose(0, 1)
        return x.reshape(self.K, T * self.n, *x.shape[3:])

    def env_action(self, a: torch.Tensor) -> torch.Tensor:
        return a if self.module.discrete else to_env_action(a, self.act_low, self.act_high)

    # -- acting ----------------------------------------------------------------------------------------
    def _act_step(self, obs: torch.Tensor):
        """One stacked forward for all K x n envs: normalised observations,
        actions, log-probabilities and env actions, flat in env order."""
        obs_n = self.module.policy_input(self.members(obs))
        action, logp = self.module.sample(self._actor_latent(obs_n))
        flat = lambda x: x.reshape(self.K * self.n, *x.shape[2:])  # noqa: E731
        return flat(obs_n), flat(action), flat(logp), flat(self.env_action(action))

    def _actor_latent(self, obs_n: torch.Tensor) -> torch.Tensor:
        """What the actors' MLPs read for normalised ``[K, n, D]`` observations of the
        training envs: the observations, or (recurrent actors) their memories'
        outputs, the memories advanced by the step."""
        if not self.module.actor_recurrent:
            return obs_n
        latent, actor = self.module.actor_step(obs_n, self.memories.actor)
        self.memories = self.memories._replace(actor=actor)
        return latent

    def _forget_ended(self, step) -> None:
        """Recurrent members: zero the memories of the envs whose episode ended with ``step``."""
        if self.module.recurrent:
            self.memories = forget_members(self.memories, self.members(episode_ended(step)))

    def policy_actions(self, obs: torch.Tensor, explore: bool) -> torch.Tensor:
        """``[K, B, ...]`` raw observations -> ``[K, B, ...]`` env actions (each member its own)."""
        a, _ = self.module.sample(self.module.policy_input(obs), deterministic=not explore)
        return self.env_action(a)

    def get_module(self, module_id: str = DEFAULT_MODULE_ID, member: Optional[int] = None):
        """One member's greedy policy: the best by fitness, or ``member``."""
        return pop_ppo_policy_module(self, member)

    def policy_module(self, member: Optional[int] = None):
        """One member's greedy policy as a module of its own (what export writes):
        the best by fitness, or ``member``."""
        return self.get_module(member=member).select()

    def best_member(self) -> int:
        return self.pbt.best_member()

    def compute_actions(self, obs: torch.Tensor, explore: bool = True) -> torch.Tensor:
        """Actions of the best member (by fitness) for a batch of observations."""
        if self.module.actor_recurrent:
            raise ValueError(f"{type(self).__name__}.compute_actions: the members are recurrent (rnn_type = "
                             f"{self.config.rnn_type!r}) and act from a memory of their episodes; use "
                             "algo.episode_actor(num_envs) (act/forget per step) or get_module().forward_inference "
                             "with Columns.STATE_IN")
        with torch.no_grad():
            x = obs.unsqueeze(0).expand(self.K, *obs.shape)
            return self.policy_actions(x, explore)[self.pbt.best_member()]

    def episode_actor(self, num_envs: int, explore: bool = False):
        """Evaluation's actor; recurrent members: the best member acting from a memory of its own."""
        if not self.module.actor_recurrent:
            return super().episode_actor(num_envs, explore)
        return MemberEpisodeActor(self, num_envs, explore)

    @torch.no_grad()
    def _decorrelate(self) -> None:
        """FastPPO's start-state decorrelation over the whole shared env (its
        episode clocks randomised, then env i takes k_i ~ U[0, k_max] random
        actions before the members' initial policies act); the partial first
        episodes count towards nobody's fitness."""
        k_max = decorrelation_horizon(self.config.decorrelate_steps, self.env)
        if k_max == 0:
            return
        N = self.env.num_envs
        if hasattr(self.env, "randomize_episode_progress"):
            self.env.randomize_episode_progress()
        k = torch.randint(0, k_max + 1, (N,), device=self.device)
        for t in range(k_max):
            obs = self.members(self.obs)
            if self.normalize_obs:
                self.module.obs_norm.update(obs.float().reshape(self.K, self.n, -1))
            policy_a, _ = self.module.sample(self._actor_latent(self.module.policy_input(obs)))
            policy_a = policy_a.reshape(N, *policy_a.shape[2:])
            random_a = self.env.sample_actions()
            use_random = (t < k).view(-1, *([1] * (random_a.dim() - 1)))
            step = self.env.step(torch.where(use_random, random_a, self.env_action(policy_a)))
            self._forget_ended(step)
            self.obs = step.obs
            if self.states is not None:
                self.states = step_states(step)
        self.log_env_steps(k_max * N)
        self.env_steps += k_max * N
        self.tracker.skip_current_episodes()
        self.returns.reset_members(torch.arange(self.K, device=self.device), discard_in_flight=True)

    # -- one iteration ------------------------------------------------------------------------------------
    def training_step(self) -> None:
        with self.metrics.log_time(("timers", "rollout")):
            self._rollout()
        with self.metrics.log_time(("timers", "learn")):
            self.learn(self._targets())
        n = self.horizon * self.env.num_envs
        self.log_env_steps(n)
        self.num_updates += 1
        if self.pbt.due(self.num_updates):
            self.pbt.round(self.num_updates)
        self.pbt.report(self.metrics, self.num_updates)
        self.tracker.log_source_metrics(self.metrics)   # the source's own (e.g. envpool's reward terms)
        self.log_trained_steps(self.trained_env_steps(1))
        self.log_learner("num_updates_lifetime", self.num_updates)
        self.log_learner("training_intensity", float(self.config.num_epochs))

    def trained_env_steps(self, n_updates: int) -> int:
        return n_updates * self.horizon * self.env.num_envs

    @torch.no_grad()
    def _rollout(self) -> None:
        """T batched steps of the shared env; observation statistics frozen during
        the rollout and updated once at its end, per member."""
        env, st = self.env, self.storage
        if self.symmetry is not None:   # the statistics this rollout's observations are normalised with
            self.symmetry.freeze_obs_norm(self.module.obs_norm)
        if self.module.recurrent:       # the states the rollout's sequences replay from
            self.rollout_start = self.memories
        for t in range(self.horizon):
            if self.normalize_obs:
                st["raw_obs"][t].copy_(self.obs.reshape(self.obs.shape[0], -1))
            if self.states is not None:
                st["states"][t].copy_(self.states)
            obs_n, action, logp, env_action = self._act_fn(self.obs)
            step = env.step(env_action)
            self._forget_ended(step)
            if step.valid is not None:
                self.any_invalid = True
                st["valid"][t].copy_(step.valid)
            else:
                st["valid"][t].fill_(True)
            final_n = self.module.policy_input(self.members(step.final_obs)).reshape(env.num_envs, -1)
            done = step.terminated | step.truncated
            st.insert(t, obs=obs_n, final_obs=final_n, actions=action, logp=logp, rewards=step.reward,
                      terminated=step.terminated, done=done)
            self.returns.update(step.reward, done, step.valid)
            self.obs = step.obs
            if self.states is not None:
                st["final_states"][t].copy_(final_states(step))
                self.states = step_states(step)
        self.env_steps += self.horizon * env.num_envs
        valid = st["valid"] if self.any_invalid else None
        self.tracker.update_batch(st["rewards"], st["done"], valid)
        if self.normalize_obs:
            self.module.obs_norm.update(self.by_member("raw_obs"),
                                        mask=None if valid is None else self.by_member("valid"))

    @torch.no_grad()
    def _targets(self):
        """Member-major learning targets ``[K, T*n]`` (critic units) and weights."""
        st, module, K = self.storage, self.module, self.K
        T, n = self.horizon, self.n
        valid = self.by_member("valid") if self.any_invalid else None
        if self.state_dim is not None:   # asymmetric critic: its own per-member input statistics
            if self.symmetry is not None:   # the raw states' mirrors, before they are normalised in place
                self._mirrored_states = mirror_members(self.symmetry, states=self.by_member("states"))["states"]
            if self.normalize_obs:
                module.state_norm.update(self.by_member("states"), mask=valid)
            for key in ("states", "final_states"):
                x = module.critic_input(self.by_member(key))       # [K, T*n, S]
                st[key].copy_(x.reshape(K, T, n, -1).transpose(0, 1).reshape_as(st[key]))
        if module.critic_recurrent:   # the critics' memories replayed over the rollout
            both = self._recurrent_critic_features()
        else:
            both = torch.cat([self.by_member(self.critic_key), self.by_member(self.final_critic_key)], 1)
        v_n = module.value(both)                                       # [K, 2*T*n]
        v = module.value_norm.denormalize(v_n) if self.config.normalize_values else v_n
        # to [T, K, n] for the recursion over time
        values, next_values = (x.reshape(K, T, n).transpose(0, 1) for x in v.split(T * n, 1))
        tk = lambda name: st[name].view(T, K, n)  # noqa: E731
        valid_t = tk("valid") if self.any_invalid else None
        # compute_gae's arithmetic broadcasts over the member axis: each member's gamma and lambda
        adv, ret = compute_gae(tk("rewards"), values, next_values, tk("terminated"), tk("done"),
                               self.hp["gamma"].unsqueeze(1), self.hp["lambda_"].unsqueeze(1), valid_t)
        km = lambda x: x.transpose(0, 1).reshape(K, T * n)  # noqa: E731
        adv, ret, values = km(adv), km(ret), km(values)
        if self.config.normalize_values:
            module.value_norm.update(ret, mask=valid)
            targets, old_v = module.value_norm.normalize(ret), module.value_norm.normalize(values)
        else:
            targets, old_v = ret, values
        w = valid.float() if valid is not None else None
        return adv, targets, old_v, w

    def _starts(self) -> torch.Tensor:
        """bool ``[K, T, n]``: the rollout's steps that begin an episode (after an end
        at t-1); step 0 continues from the rollout's start state."""
        st = self.storage
        ended = st["done"] | ~st["valid"]
        starts = torch.cat([torch.zeros_like(ended[:1]), ended[:-1]])
        return starts.view(self.horizon, self.K, self.n).transpose(0, 1)

    def _recurrent_critic_features(self) -> torch.Tensor:
        """The critics' MLP inputs ``[K, 2*T*n, H]`` for the rollout's steps and their
        ``final_obs`` (each one step on from the pre-reset state: exact time-out
        bootstraps); the memories' end states are the next rollout's start."""
        st, K, T, n = self.storage, self.K, self.horizon, self.n
        seq = lambda key: st[key].view(T, K, n, -1).transpose(0, 1)  # noqa: E731
        out, end, final_out = self.module.vf_memory.unroll(seq(self.critic_key), self.rollout_start.critic,
                                                          self._starts(), seq(self.final_critic_key))
        ended = self.members(st["done"][-1] | ~st["valid"][-1])
        self.memories = self.memories._replace(critic=StackedRecurrentMemory.forget(end, ended))
        return torch.cat([out.reshape(K, T * n, -1), final_out.reshape(K, T * n, -1)], 1)

    def _sequence_features(self, x, idx, memory, starts, unroll):
        """Rows ``idx`` (whole ``T``-step sequences of a set of envs, t-major) of member-major
        ``x [K, T*n, D]`` replayed through ``unroll`` from the envs' start states."""
        T = self.horizon
        xs = x[:, idx].reshape(self.K, T, -1, x.shape[-1])
        envs = idx[:xs.shape[2]]   # the rows of step 0 are the envs themselves
        out = unroll(xs, memory[:, :, :, envs], starts[:, idx].reshape(self.K, T, -1))
        return out.reshape(self.K, -1, out.shape[-1])

    def actor_features(self, obs, idx, sequences=None):
        """What the actors' MLPs read for rows ``idx``: the stored normalised observations,
        or (recurrent actors) their memories replayed over whole sequences."""
        if sequences is None or not self.module.actor_recurrent:
            return obs[:, idx]
        starts, start = sequences
        return self._sequence_features(obs, idx, start.actor, starts, self.module.actor_sequence)

    def critic_features(self, critic_in, idx, sequences=None):
        """What the critics' MLPs read for rows ``idx`` (as :meth:`actor_features`)."""
        if sequences is None or not self.module.critic_recurrent:
            return critic_in[:, idx]
        starts, start = sequences
        return self._sequence_features(critic_in, idx, start.critic, starts, self.module.critic_sequence)

    def loss(self, idx, obs, actions, old_logp, adv, targets, old_v, critic_in, w, mirrored=None,
             sequences=None) -> PPOLossTerms:
        """Each member's PPO loss on its own minibatch (positions ``idx`` of its
        own ``[K, T*n]`` data): FastPPO's ``ppo_loss`` over the member axis, with
        each member's clip, value and entropy weights; ``loss`` ``[K]``, ``stats``
        ``[5, K]``. With ``symmetry`` (``mirrored``: the rollout's mirrors) the
        minibatch is augmented and/or the mirror loss added, per member."""
        cfg, module, hp = self.config, self.module, self.hp
        if mirrored is not None:
            return symmetric_member_loss(self.symmetry, module, hp, cfg, idx, obs, actions, old_logp, adv, targets,
                                         old_v, critic_in, w, mirrored)
        wi = w[:, idx] if w is not None else None
        denom = wi.sum(-1).clamp_min(1.0) if wi is not None else None
        logp, entropy = module.evaluate_actions(self.actor_features(obs, idx, sequences), actions[:, idx])
        a = adv[:, idx]
        if cfg.normalize_advantages:
            a = standardize(a, wi, dim=-1)
        v = module.value(self.critic_features(critic_in, idx, sequences))
        return ppo_loss(logp, entropy, old_logp[:, idx], a, v, targets[:, idx], old_v[:, idx],
                        clip_param=hp["clip_param"].unsqueeze(1), vf_clip_param=cfg.vf_clip_param,
                        vf_loss_coeff=hp["vf_loss_coeff"], entropy_coeff=hp["entropy_coeff"], w=wi, denom=denom,
                        dim=-1)

    def _summed_loss(self, idx, obs, actions, old_logp, adv, targets, old_v, critic_in, w, mirrored=None,
                     sequences=None):
        """The members' losses summed (member k's parameters get only member k's
        gradient) and their ``[5, K]`` statistics: the update step's forward."""
        terms = self.loss(idx, obs, actions, old_logp, adv, targets, old_v, critic_in, w, mirrored, sequences)
        return terms.loss.sum(), terms.stats

    def learn(self, batch) -> None:
        """``num_epochs`` x ``num_minibatches`` steps of every member at once."""
        cfg, device, K = self.config, self.device, self.K
        adv, targets, old_v, w = batch
        obs, actions, old_logp = self.by_member("obs"), self.by_member("actions"), self.by_member("logp")
        critic_in = self.by_member(self.critic_key)
        mirrored = self._mirrored_batch()
        # recurrent members: a minibatch is a set of envs' whole sequences, replayed from the rollout's start
        sequences = (self._starts().reshape(K, -1), self.rollout_start) if self.module.recurrent else None
        B = self.horizon * self.n
        mb = B // cfg.num_minibatches
        loss_stats = torch.zeros(5, K, device=device)
        for _ in range(cfg.num_epochs):
            perm = torch.randperm(B if sequences is None else self.n, device=device)
            epoch_kl = torch.zeros(K, device=device)
            for i in range(cfg.num_minibatches):
                idx = perm[i * mb:(i + 1) * mb] if sequences is None else self._sequence_rows(perm, i)
                loss, minibatch_stats = self.loss_fn(idx, obs, actions, old_logp, adv, targets, old_v, critic_in, w,
                                                     mirrored, sequences)
                self.optimizer.step(torch.autograd.grad(loss, self.params))
                with torch.no_grad():
                    loss_stats += minibatch_stats
                    epoch_kl += minibatch_stats[3]
            if cfg.adaptive_lr_kl_target is not None:
                self.optimizer.adapt(epoch_kl, cfg.num_minibatches, self.hp["adaptive_lr_kl_target"],
                                     self.hp.applied.get("adaptive_lr_kl_target"))
        loss_stats /= cfg.num_epochs * cfg.num_minibatches
        for i, key in enumerate(self.LOSS_STATS):
            self.log_learner(key, loss_stats[i].mean())
        self.last_loss_stats = loss_stats
        self.log_learner("curr_lr", self.optimizer.lr.mean())
        if self.symmetry is not None:
            self.log_learner("symmetry_loss", self.symmetry.take_loss_report())

    def _sequence_rows(self, envs_order: torch.Tensor, i: int) -> torch.Tensor:
        """Rows (``t * n + env``, t-major) of minibatch ``i``: ``n / num_minibatches`` envs
        of ``envs_order`` with their whole ``T``-step sequences (FastPPO's recurrent minibatches)."""
        per = self.n // self.config.num_minibatches
        envs = envs_order[i * per:(i + 1) * per]
        steps = torch.arange(self.horizon, device=envs.device).unsqueeze(1) * self.n
        return (steps + envs.unsqueeze(0)).reshape(-1)

    def _mirrored_batch(self):
        """The rollout's mirrored transitions, member-major (``.symmetric``), or None without symmetry."""
        if self.symmetry is None:
            return None
        raw = self.by_member("raw_obs" if self.normalize_obs else "obs")
        critic_in = None if self._mirrored_states is None else self.module.critic_input(self._mirrored_states)
        return mirror_member_batch(self.symmetry, raw, self.by_member("actions"), self.normalize_obs, critic_in)

    # -- PBT and live hyperparameters ----------------------------------------------------------------------
    @torch.no_grad()
    def optimizer_hparams(self) -> None:
        """A member whose lr hyperparameter changed (PBT explore, a restore, a
        Tune mutation of the trial config) restarts its adaptive lr from it;
        the others keep the lr they adapted to."""
        changed = self.hp["lr"] != self.lr_applied
        if self.K == 1:   # FastPPO's host lr: the config value itself (not its float32 copy)
            if bool(changed[0]):
                self.optimizer.set_lr(self.hp.applied["lr"])
        else:
            self.optimizer.set_lr(torch.where(changed, self.hp["lr"], self.optimizer.lr))
        self.lr_applied.copy_(self.hp["lr"])

    @torch.no_grad()
    def exploit_members(self, src: torch.Tensor, dst: torch.Tensor) -> None:
        """Member slices ``src -> dst``: weights, log-std and the observation,
        state and value normalisers (one stacked module), the Adam moments and
        step counts (or a fresh optimizer, ``pbt_exploit_optimizer='reset'``)
        and the adaptive lr."""
        copy_members(self.module, src, dst)
        if self.module.recurrent:   # the donor's memories belong to its own envs: the replaced start afresh
            self.memories = Memories(*(None if m is None else m.index_fill(0, dst, 0.0) for m in self.memories))
        lr = self.optimizer.lr
        if self.config.pbt_exploit_optimizer == "copy":
            self.optimizer.copy_members(src, dst)
            lr[dst] = lr[src].clone()
        else:
            self.optimizer.reset_members(dst)
            lr[dst] = self.hp["lr"][src].clone()
        self.lr_applied[dst] = self.hp["lr"][src].clone()

    # -- state ----------------------------------------------------------------------------------------------
    def apply_live_hyperparameters(self) -> None:
        """Trial-level config values that changed go to every member (``pbt.apply_config``)."""
        self.pbt.apply_config(self.config)

    def stateful_components(self) -> Dict[str, Any]:
        return {**super().stateful_components(), **self.pbt.stateful_components(), "module": self.module,
                "optimizer": self.optimizer, "lr_applied": StateAdapter.tensor(self.lr_applied)}

    def extra_state(self) -> Dict[str, Any]:
        out = {**super().extra_state(), **self.pbt.extra_state(), "env_steps": self.env_steps,
               "num_updates": self.num_updates, "any_invalid": self.any_invalid}
        if self.module.recurrent:
            out["memories"] = self.memories._asdict()
        return out

    def set_extra_state(self, state: Dict[str, Any]) -> None:
        super().set_extra_state(state)
        self.pbt.set_extra_state(state)
        for k in ("env_steps", "num_updates", "any_invalid"):
            setattr(self, k, state[k])
        if self.module.recurrent:
            self.memories = memories_on(state["memories"], self.device)

    # the members' running returns (and memories) belong to the live episodes too
    def _live_episodes(self) -> Dict[str, Any]:
        out = {**super()._live_episodes(), **self.pbt.live_episodes()}
        if self.module.recurrent:
            out["memories"] = self.memories
        return out

    def _keep_live_episodes(self, live: Dict[str, Any]) -> None:
        super()._keep_live_episodes(live)
        self.pbt.keep_live_episodes(live)
        if self.module.recurrent:
            self.memories = live["memories"]

    def on_source_not_restored(self) -> None:
        """On-policy: nothing is stored across iterations, so nothing to cut."""


class PopA2C(PopPPO):
    """K A2C agents sharing one batched simulator: PopPPO with one full-batch step per iteration."""

    @classmethod
    def get_default_config(cls) -> PopA2CConfig:
        return PopA2CConfig()


def forget_members(memories: Memories, ended: torch.Tensor) -> Memories:
    """Member-stacked memory states with the envs ``ended`` (bool ``[K, n]``) zeroed."""
    return Memories(*(None if m is None else StackedRecurrentMemory.forget(m, ended) for m in memories))


class MemberEpisodeActor:
    """Acts in ``num_envs`` envs of its own (evaluation) as the best member with a
    memory of its own, from zero states: ``act(obs)`` each step, ``forget(ended)`` after it."""

    def __init__(self, algo: PopPPO, num_envs: int, explore: bool) -> None:
        self.algo, self.explore, self.member = algo, explore, algo.best_member()
        self.memory = algo.module.initial_memories(num_envs, algo.device).actor

    @torch.no_grad()
    def act(self, obs: torch.Tensor) -> torch.Tensor:
        module, K = self.algo.module, self.algo.K
        x = module.policy_input(obs.unsqueeze(0).expand(K, *obs.shape))
        latent, self.memory = module.actor_step(x, self.memory)
        a, _ = module.sample(latent, deterministic=not self.explore)
        return self.algo.env_action(a)[self.member]

    def forget(self, ended: torch.Tensor) -> None:
        self.memory = StackedRecurrentMemory.forget(self.memory, ended.unsqueeze(0).expand(self.algo.K, -1))
