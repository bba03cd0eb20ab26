"""FastPPO: synchronous batched-inference PPO on a tensor vector env.

Reads top to bottom like a single-file PPO: rollout (one batched forward for
all N envs per step, written into preallocated ``[T, N]`` storage), targets
(one batched critic pass over observations and ``final_obs``, then GAE with
time-out bootstrapping), and minibatch epochs of the clipped surrogate with
value clipping. Rollout and targets are the on-policy loop
(``OnPolicyAlgorithm.training_step`` in :mod:`..onpolicy.algorithm`); this
file is the update, :class:`PPOUpdate`, which HTSPPO and every FastAPPO
learner compose in too; its loss terms are the plain functions of
:mod:`.loss`. Everything stays on the env's device; the only host syncs are
the adaptive-KL lr step (once per epoch, when enabled) and RLlib's metric
reduction at the end of an iteration.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, fields
from typing import Any, Dict, Generator, Optional, Tuple

import torch

from ...core.precision import autocast_dtype, training_precision
from ...core.rollout import RolloutStorage
from ...core.start_method import resolve_start_method
from ...envs import registry as env_registry
from ...envs.base import Step, TensorVecEnv
from ...envs.parallel import ParallelVecEnv
from ..extensions.rnd import make_rnd
from ..extensions.symmetry import make_symmetry
from ..onpolicy.algorithm import OnPolicyAlgorithm
from ..onpolicy.batch import OnPolicyBatch, Targets
from ..onpolicy.reductions import masked_mean, standardize
from ..onpolicy.update import UpdateRule
from .config import FastPPOConfig
from .loss import analytic_kl, approx_kl, bounds_loss, kl_adapted_lr, ppo_loss
from .overlap import OverlapSchedule, ShadowMeter
from .recurrent import RecurrentActing, SequenceMinibatches
from .symmetric import symmetric_ppo_loss



@dataclass(frozen=True)
class PPOSettings:
    """The config keys PPO's update reads (rebuilt when live keys change)."""

    num_epochs: int
    num_minibatches: int
    clip_param: float
    vf_clip_param: Optional[float]
    vf_loss_coeff: float
    entropy_coeff: float
    normalize_advantages: bool
    grad_clip: Optional[float]
    adaptive_lr_kl_target: Optional[float]
    adaptive_lr_bounds: Tuple[float, float]
    adaptive_lr_every: str
    kl_estimator: str
    normalize_advantages_over: str
    grad_clip_scope: str
    shuffle: str
    kl_reference: str   # resolved: 'behaviour', 'update_start' or 'previous_epoch'
    surrogate_clip: str
    bounds_loss_coeff: float
    update_dtype: str

    @classmethod
    def from_config(cls, config) -> "PPOSettings":
        values = {f.name: getattr(config, f.name) for f in fields(cls)}
        if values["kl_reference"] == "auto":
            lws = bool(getattr(config, "learn_while_stepping", False))
            values["kl_reference"] = "update_start" if lws else "behaviour"
        return cls(**values)


class PPOUpdate(UpdateRule):
    """PPO's learning phase: ``num_epochs`` passes of ``num_minibatches``
    clipped-surrogate steps (value loss optionally clipped), the lr adapted
    to the epoch's KL when ``adaptive_lr_kl_target`` is set. Composed into
    FastPPO, HTSPPO and every FastAPPO learner."""

    STATS = ("policy_loss", "vf_loss", "entropy", "mean_kl_loss", "clip_fraction")
    settings_from = staticmethod(PPOSettings.from_config)
    #: FastPPO's symmetry extension (``extensions.symmetry.Symmetry``), set by the algorithm; None: off
    symmetry = None

    @staticmethod
    def make_optimizer(params, lr: float, config) -> torch.optim.Optimizer:
        # fused Adam: one kernel for all parameters instead of ~12 per tensor
        return torch.optim.Adam(params, lr=lr, eps=config.adam_eps, fused=True)

    def training_intensity(self) -> float:
        return float(self.settings.num_epochs)

    def learn(self, batch: OnPolicyBatch) -> Dict[str, Any]:
        steps = self.learn_steps(batch)
        while True:
            try:
                next(steps)
            except StopIteration as done:
                return done.value

    def learn_steps(self, batch: OnPolicyBatch) -> Generator[None, None, Dict[str, Any]]:
        """:meth:`learn` one minibatch step at a time: a generator that yields after
        each gradient step and returns the statistics. How FastPPO's
        ``learn_while_stepping`` spreads an update over the next rollout's env steps
        (``ppo.overlap``); ``learn`` runs it to the end."""
        s, device = self.settings, self.device
        w = batch.weights
        stats = torch.zeros(6, device=device)  # pg, vf, ent, kl, clipfrac, count
        adapt = s.adaptive_lr_kl_target is not None
        per_minibatch = adapt and s.adaptive_lr_every == "minibatch"
        # analytic KL: the policy at the update's start is the "old" one
        start = self._start_policy(batch) if adapt and s.kl_estimator == "analytic" else None
        lr_t = self._tensor_lr() if per_minibatch else None
        if adapt and s.kl_estimator == "k3" and s.kl_reference == "update_start":
            batch = batch._replace(kl_logp=self._start_logp(batch))
        if s.normalize_advantages and s.normalize_advantages_over == "batch":   # once, rsl_rl's unbiased std
            batch = batch._replace(advantages=standardize(batch.advantages, w, self.learners.sum_, unbiased=True))
        measure_kl = per_minibatch or start is not None
        # the KL read off the minibatch's own training forward (its parameters are the ones a separate
        # no-grad pass would see): one actor forward fewer per minibatch
        self._fused_kl = ({"batch": batch, "start": start, "lr_t": lr_t}
                          if measure_kl and self.can_fuse_forward(batch) else None)
        perm = None
        for _ in range(s.num_epochs):
            if perm is None or s.shuffle == "epoch":   # 'once': every epoch reuses the first order
                perm = self.minibatch_order(batch)
            epoch_kl = torch.zeros((), device=device)
            for i in range(s.num_minibatches):
                idx = self.minibatch_rows(batch, perm, i)
                # global masked means across data-parallel learners (one all-reduce, outside the step)
                denom = self.learners.mean_denominator(w[idx] if w is not None else None, idx.shape[0], device)
                if self._fused_kl is not None:   # measured (and the lr adapted) inside the step, before it applies
                    self._fused_kl.update(idx=idx, denom=denom)
                    mstats = self.gradient_step(batch, idx, denom)
                    kl = self._fused_kl.pop("kl")
                else:
                    kl = self._minibatch_kl(batch, idx, denom, start) if measure_kl else None
                    if per_minibatch:   # rsl_rl: adapt before the step, and the step uses the new lr
                        self._adapt_lr_tensor(lr_t, kl)
                    mstats = self.gradient_step(batch, idx, denom)
                self.after_step()
                with torch.no_grad():
                    stats[:5] += mstats
                    stats[5] += 1
                    epoch_kl += mstats[3] if kl is None else kl
                yield
            if adapt and not per_minibatch:
                self.learners.mean_(epoch_kl)  # every learner adapts lr from the same KL
                self._adapt_lr(float(epoch_kl) / s.num_minibatches)
        self._fused_kl = None
        out: Dict[str, Any] = {key: stats[i] / stats[5] for i, key in enumerate(self.STATS)}
        with torch.no_grad():
            targets = batch.value_targets
            out["vf_explained_var"] = 1 - (targets - batch.old_values).var() / targets.var().clamp_min(1e-8)
        if lr_t is not None:   # a float lr between updates again: one host sync per update
            for group in self.optimizer.param_groups:
                group["lr"] = float(lr_t)
        out["curr_lr"] = self.optimizer.param_groups[0]["lr"]
        return out

    def minibatch_order(self, batch: OnPolicyBatch) -> torch.Tensor:
        """The order the batch's rows are dealt into minibatches: a random permutation
        (``shuffle`` 'epoch'/'once'), or storage order (``shuffle='none'``)."""
        B = batch.advantages.shape[0]
        if self.settings.shuffle == "none":
            return torch.arange(B, device=self.device)
        return torch.randperm(B, device=self.device, generator=self.shuffle_generator)

    def minibatch_rows(self, batch: OnPolicyBatch, order: torch.Tensor, i: int) -> torch.Tensor:
        """The rows of minibatch ``i`` (of ``num_minibatches``) under ``order``."""
        mb = batch.advantages.shape[0] // self.settings.num_minibatches
        return order[i * mb:(i + 1) * mb]

    def actor_features(self, batch: OnPolicyBatch, idx: Optional[torch.Tensor]) -> torch.Tensor:
        """What the actor's MLP reads for rows ``idx`` (None: all): the stored normalised
        observations (a recurrent actor replays them through its memory)."""
        return batch.obs if idx is None else batch.obs[idx]

    def critic_features(self, batch: OnPolicyBatch, idx: Optional[torch.Tensor]) -> torch.Tensor:
        """What the critic's MLP reads for rows ``idx`` (None: all): the prepared critic inputs."""
        return batch.critic_in if idx is None else batch.critic_in[idx]

    def loss(self, batch: OnPolicyBatch, idx: Optional[torch.Tensor], denom: Optional[torch.Tensor]):
        """One minibatch's clipped-surrogate loss and its ``STATS`` (with rl_games'
        bound loss on the action means when ``bounds_loss_coeff`` > 0); the part of
        the step ``compile`` compiles (minibatch shapes are fixed)."""
        s, module = self.settings, self.module
        if self.symmetry is not None and batch.mirrored is not None:
            terms = symmetric_ppo_loss(self, batch, idx, denom)
            if s.bounds_loss_coeff > 0:   # on the originals' means (one more actor forward)
                wi = batch.weights[idx] if batch.weights is not None else None
                mean, _ = module.dist_params(self.actor_features(batch, idx))
                terms = terms._replace(loss=terms.loss + s.bounds_loss_coeff * bounds_loss(mean, wi, denom))
            return terms
        return self.surrogate_loss(batch, idx, denom)

    def surrogate_loss(self, batch: OnPolicyBatch, idx: Optional[torch.Tensor], denom: Optional[torch.Tensor]):
        """The clipped-surrogate PPO loss of one minibatch from one forward of
        each head (the shared trunk once for both): the surrogate, the value loss,
        the entropy and the bound loss all read it, and so does the adaptive lr's
        KL when it is fused (``_fused_kl``)."""
        s, module = self.settings, self.module
        w = batch.weights
        wi = w[idx] if w is not None else None
        actor_in = self.actor_features(batch, idx)
        # with a shared trunk the critic reads the observation (validated), so its input is actor_in
        critic_in = actor_in if module.shared_trunk else self.critic_features(batch, idx)
        dtype = self.autocast_dtype
        with self.training_precision(dtype):
            p, log_std, v = module.dist_params_and_value(actor_in, critic_in)
        if dtype is not None:   # the distribution and the loss in float32 (autocast's outputs are not)
            p, v = p.float(), v.float()
            log_std = None if log_std is None else log_std.float()
        logp, entropy = module.logp_entropy(p, log_std, batch.actions[idx])
        if self._fused_kl is not None:
            self._fused_kl["forward"] = (p.detach(), None if log_std is None else log_std.detach(), logp.detach())
        adv = batch.advantages[idx]
        if s.normalize_advantages and s.normalize_advantages_over == "minibatch":
            adv = standardize(adv, wi, self.learners.sum_)
        kl_old = None if batch.kl_logp is None else batch.kl_logp[idx]
        terms = ppo_loss(logp, entropy, batch.logp[idx], adv, v, batch.value_targets[idx], batch.old_values[idx],
                         clip_param=s.clip_param, vf_clip_param=s.vf_clip_param, vf_loss_coeff=s.vf_loss_coeff,
                         entropy_coeff=s.entropy_coeff, w=wi, denom=denom, kl_old_logp=kl_old,
                         smooth_clip=s.surrogate_clip == "smooth")
        if s.bounds_loss_coeff > 0:   # rl_games' bound loss on the action means, beside either clip
            terms = terms._replace(loss=terms.loss + s.bounds_loss_coeff * bounds_loss(p, wi, denom))
        return terms

    def training_precision(self, dtype: Optional[torch.dtype]):
        """The context of the training forward (and so of its backward): autocast to
        ``dtype`` (:attr:`autocast_dtype`), or nothing for None. Why only there: on
        a CPU that multiplies bfloat16 natively the update's matrix products are
        most of an iteration on a real simulator (Go1: 53%), while the acting
        forward is small and its log-probabilities are what the ratio divides by,
        so it stays float32."""
        return training_precision(self.device, dtype)

    @property
    def autocast_dtype(self) -> Optional[torch.dtype]:
        """The training forward's autocast dtype (None: float32 throughout).
        'auto' is bfloat16 where the device multiplies it natively and nothing the
        key does not reach is on (a recurrent module, the symmetry loss, compile)."""
        return autocast_dtype(self.settings.update_dtype, self.device, self.bfloat16_reaches_the_loss())

    def bfloat16_reaches_the_loss(self) -> bool:
        """Whether the training forward is the plain feed-forward surrogate's
        (what ``update_dtype`` covers)."""
        return (self.symmetry is None and self.whole_step is None and self.loss_fn == self.loss
                and not hasattr(self.module, "pi_memory"))

    #: read the adaptive lr's KL off the training forward where that is exact (tests switch it off
    #: to compare against the separate no-grad pass)
    fuse_kl_forward = True
    #: the fused KL's context during one update (None: a separate no-grad forward measures the KL)
    _fused_kl: Optional[Dict[str, Any]] = None

    def can_fuse_forward(self, batch: OnPolicyBatch) -> bool:
        """Whether the adaptive lr's KL can be read off the minibatch's training
        forward: the loss runs eagerly (a compiled loss or whole-step graph cannot
        hand its forward out) and is the plain surrogate (the symmetric loss's
        forward covers the mirrors too)."""
        return (self.fuse_kl_forward and self.whole_step is None and self.loss_fn == self.loss
                and not (self.symmetry is not None and batch.mirrored is not None))

    def after_forward(self) -> None:
        """With the KL fused: measure it from the forward the loss just ran (the
        minibatch's parameters before its step), and adapt the lr per minibatch
        before the step applies, as the separate pass did (rsl_rl's order)."""
        ctx = self._fused_kl
        if ctx is None:
            return
        p, log_std, logp = ctx.pop("forward")
        kl = self._kl_of(ctx["batch"], ctx["idx"], ctx["denom"], ctx["start"], p, log_std, logp)
        if self.settings.adaptive_lr_every == "minibatch":
            self._adapt_lr_tensor(ctx["lr_t"], kl)
        ctx["kl"] = kl

    def clip_groups(self) -> list:
        """``grad_clip_scope='per_network'``: the actor (policy network and its std)
        and the critic clipped each on its own (rsl_rl's), else all together."""
        if self.settings.grad_clip_scope == "global":
            return [self.params]
        named = list(self.module.named_parameters())
        critic = self.module.critic_parameter_names()
        return [[p for n, p in named if not n.startswith(critic)], [p for n, p in named if n.startswith(critic)]]

    def _start_logp(self, batch: OnPolicyBatch) -> torch.Tensor:
        """``kl_reference='update_start'``: the batch's actions' log-probabilities
        under the policy at the update's start (one batched no-grad pass), what the
        k3 KL of the adaptive lr is then measured from. Why: with
        ``learn_while_stepping`` a rollout's first env steps act with the policy
        one update behind, so the KL from the stored (behaviour) log-probabilities
        starts the update already at that lag; the lr rule then reads the lag as
        movement and shrinks the lr, which costs env steps (docs/design-notes.md)."""
        with torch.no_grad():
            logp, _ = self.module.evaluate_actions(self.actor_features(batch, None), batch.actions)
        return logp

    def _start_policy(self, batch: OnPolicyBatch):
        """The policy's distribution parameters on the whole batch at the update's
        start (one batched no-grad actor forward): the "old" policy of the analytic
        KL. In synchronous FastPPO these are the parameters that acted, i.e. the
        means and stds rsl_rl stores during the rollout (the actor reads the
        stored, already normalised observations)."""
        with torch.no_grad():
            p, log_std = self.module.dist_params(self.actor_features(batch, None))
            if log_std is not None:   # 'previous_epoch' writes per-sample stds into it: no broadcast view then
                log_std = log_std.expand_as(p)
                log_std = log_std.clone() if self.settings.kl_reference == "previous_epoch" else log_std
            return p, log_std

    def _minibatch_kl(self, batch: OnPolicyBatch, idx: torch.Tensor, denom, start) -> torch.Tensor:
        """KL(old || current) on minibatch ``idx`` before its step (a no-grad
        actor forward; a 0-d device tensor, no host sync): the k3 estimate from the
        rollout's log-probabilities, or with ``start`` the analytic KL from the
        policy at the update's start. Averaged over data-parallel learners when the
        lr adapts per minibatch (per epoch, the epoch's sum is averaged once)."""
        with torch.no_grad():
            p, log_std = self.module.dist_params(self.actor_features(batch, idx))
            logp = None if start is not None else self.module.logp_entropy(p, log_std, batch.actions[idx])[0]
        return self._kl_of(batch, idx, denom, start, p, log_std, logp)

    def _kl_of(self, batch: OnPolicyBatch, idx: torch.Tensor, denom, start, p, log_std, logp) -> torch.Tensor:
        """:meth:`_minibatch_kl` from the current policy's (detached) distribution
        ``p, log_std`` on minibatch ``idx`` and its actions' log-probabilities ``logp``."""
        w = batch.weights
        wi = w[idx] if w is not None else None
        with torch.no_grad():
            if start is None:
                log_ratio = logp - (batch.logp if batch.kl_logp is None else batch.kl_logp)[idx]
                kl = approx_kl(log_ratio.exp(), log_ratio, wi, denom)
            else:
                old_log_std = None if start[1] is None else start[1][idx]
                kl = masked_mean(analytic_kl(start[0][idx], old_log_std, p, log_std), wi, denom)
                if self.settings.kl_reference == "previous_epoch":   # rl_games: the next epoch measures from here
                    start[0][idx] = p
                    if start[1] is not None:
                        start[1][idx] = log_std.expand_as(p)
            if self.settings.adaptive_lr_every == "minibatch":
                self.learners.mean_(kl)
        return kl

    def _tensor_lr(self) -> Optional[torch.Tensor]:
        """For ``adaptive_lr_every='minibatch'``: the lr as a 0-d device tensor that
        every param group holds during the update (fused Adam and the compiled whole
        step read it as is), adapted in place, so a minibatch's adaptation needs no
        host sync. None for an optimizer that takes no tensor lr (foreach Adam):
        then each minibatch's adaptation reads the KL on the host."""
        group = self.optimizer.param_groups[0]
        if not group.get("fused"):
            return None
        lr = torch.tensor(float(group["lr"]), dtype=torch.float32, device=self.device)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        return lr

    def _adapt_lr_tensor(self, lr_t: Optional[torch.Tensor], kl: torch.Tensor) -> None:
        """rsl_rl's per-minibatch rule: the adaptive-KL step, growing only when the
        KL is positive (so never on an update's first minibatch, where old = new)."""
        s = self.settings
        lo, hi = s.adaptive_lr_bounds
        if lr_t is None:   # host fallback (one sync per minibatch)
            kl_host = float(kl)
            for group in self.optimizer.param_groups:
                group["lr"] = kl_adapted_lr(group["lr"], kl_host, s.adaptive_lr_kl_target, lo, hi, grow_at_zero=False)
            return
        lr_t.copy_(kl_adapted_lr(lr_t, kl, s.adaptive_lr_kl_target, lo, hi, grow_at_zero=False))

    def _adapt_lr(self, kl: float) -> None:
        """KL-adaptive learning rate (:func:`.loss.kl_adapted_lr`), once per epoch."""
        s = self.settings
        lo, hi = s.adaptive_lr_bounds
        for group in self.optimizer.param_groups:
            group["lr"] = kl_adapted_lr(group["lr"], kl, s.adaptive_lr_kl_target, lo, hi)


class RecurrentPPOUpdate(SequenceMinibatches, PPOUpdate):
    """PPO's update over whole env sequences (FastPPO with ``rnn_type``: :mod:`.recurrent`)."""


class FastPPO(RecurrentActing, OnPolicyAlgorithm):
    """Synchronous batched PPO: the on-policy loop with PPO's update; with
    ``learn_while_stepping`` each update runs during the next rollout, in the
    simulator's shadow (:mod:`.overlap`); with ``rnn_type`` a recurrent
    actor-critic (:mod:`.recurrent`)."""

    UPDATE = PPOUpdate
    RECURRENT_UPDATE = RecurrentPPOUpdate
    LEARNS_WHILE_STEPPING = True
    #: the optional extension keys this algorithm implements (:mod:`..extensions`)
    EXTENSIONS = ("symmetry", "rnd")
    symmetry = None
    rnd = None
    #: with symmetry and an asymmetric critic: this rollout's mirrored raw states
    _mirrored_states = None

    # -- learn_while_stepping -------------------------------------------------------
    def learns_while_acting(self) -> bool:
        return bool(self.config.learn_while_stepping)   # the update runs in the next rollout

    def make_env(self, num_envs: int, seed: int, config=None) -> TensorVecEnv:
        """The training env; with ``learn_while_stepping`` it must step in another
        process (``step_async``/``step_wait``): a registered name is put in one
        simulator process (forked by default, after the source was built here
        once: the fork inherits its imports), other sources must come as such
        an env already."""
        env = super().make_env(num_envs, seed, config)
        if config is not None or not self.config.learn_while_stepping or _steps_elsewhere(env):
            return env
        name = self.config.env
        env.close()
        if not (isinstance(name, str) and env_registry.is_known(name)):
            raise ValueError(f"FastPPO: `learn_while_stepping` = True needs the simulator in its own process; "
                             f"env {name!r} steps in this one; allowed: a registered env name (run in a "
                             "simulator process automatically) or an env with step_async/step_wait "
                             "(rllib_fast.envs.ParallelEnvCreator)")
        # 'auto' forks: the source was just built (and so imported) here, the copy needs no re-import
        context = resolve_start_method(self.config.simulator_start_method)
        return ParallelVecEnv.from_name(name, num_envs, 1, device=str(self.device), seed=seed,
                                        env_kwargs=dict(self.config.env_config), context=context)

    def build(self) -> None:
        # the optional extensions, held as components (None: off); built before the
        # update rule, which the base build makes and which holds the symmetry
        if self.config.bounds_loss_coeff > 0 and self.env.is_discrete:
            raise ValueError(f"{type(self).__name__}: `bounds_loss_coeff` = {self.config.bounds_loss_coeff} bounds "
                             f"Gaussian action means; {self.config.env!r} has discrete actions; allowed: 0.0")
        self.symmetry = make_symmetry(self.config.symmetry, self.env)
        self.rnd = make_rnd(self.config.rnd, self.config, self.env, self.device)
        super().build()
        #: the batch whose update the next rollout carries (learn_while_stepping), else None
        self.pending: Optional[OnPolicyBatch] = None
        if self.config.learn_while_stepping:
            st = self.storage
            # the next rollout fills one storage while the pending batch reads the other
            self._spare = RolloutStorage(st.horizon, st.num_envs,
                                         {k: (tuple(v.shape[2:]), v.dtype) for k, v in st.data.items()}, self.device)
            self._schedule = OverlapSchedule(self.horizon, self.config.learn_steps_per_env_step)
            self._env_step_index = 0
            self._meter = ShadowMeter(self.env)

    def make_update_rule(self) -> UpdateRule:
        rule = super().make_update_rule()
        rule.symmetry = self.symmetry
        return rule

    # -- the extensions' hooks into the on-policy loop ---------------------------------
    def _rollout(self) -> None:
        if self.symmetry is not None:   # the statistics this rollout's observations are normalised with
            self.symmetry.freeze_obs_norm(self.module.obs_norm)
        super()._rollout()

    def _record_step(self, t: int, step: Step) -> None:
        if self.rnd is not None:
            self.rnd.record(t, step)

    def _targets(self) -> Targets:
        if self.rnd is not None:   # curiosity: the intrinsic reward joins the extrinsic one before GAE
            for key, value in self.rnd.add_intrinsic_rewards(self.storage["rewards"]).items():
                self.log_learner(key, value)
        if self.symmetry is not None and self.state_dim is not None:
            # the raw states' mirrors, before the base normalises the states in place
            _, _, self._mirrored_states = self.symmetry.mirror(states=self.storage.flat("states"))
        return super()._targets()

    def _batch(self, targets: Targets) -> OnPolicyBatch:
        batch = super()._batch(targets)
        if self.symmetry is None:
            return batch
        st = self.storage
        critic_in = None
        if self.state_dim is not None:
            critic_in = self.module.critic_input(self._mirrored_states)
        raw = st.flat("raw_obs") if self.normalize_obs else st.flat("obs")
        return batch._replace(mirrored=self.symmetry.mirror_batch(raw, st.flat("actions"), self.normalize_obs,
                                                                  critic_in))

    def _learn(self, targets: Targets) -> None:
        super()._learn(targets)
        if self.symmetry is not None:
            self.log_learner("symmetry_loss", self.symmetry.take_loss_report())
        if self.rnd is not None:
            for key, value in self.rnd.learn(self.update_rule.settings, self.update_rule.shuffle_generator).items():
                self.log_learner(key, value)

    def stateful_components(self) -> Dict[str, Any]:
        out = super().stateful_components()
        if self.rnd is not None:
            out["rnd"] = self.rnd
            out["rnd_optimizer"] = self.rnd.optimizer
        return out

    def training_step(self) -> None:
        if not self.config.learn_while_stepping:
            return super().training_step()
        s = self.update_rule.settings
        trained = 0
        if self.pending is not None:
            self._schedule.begin(self.update_rule, self.pending, s.num_epochs * s.num_minibatches)
            trained = self.pending.advantages.shape[0]
        self._env_step_index = 0
        self._meter.start()
        with self.metrics.log_time(("timers", "rollout")):   # the pending update runs inside it
            self._rollout()
        with self.metrics.log_time(("timers", "learn")):
            stats = self._schedule.finish()
            batch = self._batch(self._targets())
            self.storage, self._spare = self._spare, self.storage
            self.pending = batch
        for key, value in (stats or {}).items():
            self.log_learner(key, value)
        for key, value in self._meter.stop().items():
            self.metrics.log_value(("timers", "overlap", key), value, window=20)
        self.tracker.log_to(self.metrics)
        self.log_env_steps(self.horizon * self.env.num_envs)
        if trained:
            self.log_trained_steps(trained)
        self.log_learner("training_intensity", self.training_intensity())
        self.log_learner("num_learners", self.world_size)

    def _step_env(self, actions: torch.Tensor) -> Step:
        if not self._schedule_active():
            return self.env.step(actions)
        meter, clock = self._meter, time.perf_counter
        self.env.step_async(actions)
        started = clock()
        self._schedule.work(self._env_step_index)   # while the simulator computes the step
        learned = clock()
        self._env_step_index += 1
        step = self.env.step_wait()
        meter.update_s += learned - started
        meter.wait_s += clock() - learned
        return step

    def _schedule_active(self) -> bool:
        return self.config.learn_while_stepping and self._schedule.active

    def extra_state(self) -> Dict[str, Any]:
        out = super().extra_state()
        if self.config.learn_while_stepping:
            out["pending"] = None if self.pending is None else self.pending._asdict()
        return out

    def set_extra_state(self, state: Dict[str, Any]) -> None:
        super().set_extra_state(state)
        if self.config.learn_while_stepping:
            pending = state.get("pending")
            self.pending = None if pending is None else OnPolicyBatch(
                **{k: None if v is None else v.to(self.device) for k, v in pending.items()})

    @classmethod
    def get_default_config(cls) -> FastPPOConfig:
        return FastPPOConfig()


def _steps_elsewhere(env: TensorVecEnv) -> bool:
    """Whether ``env`` can start a step and return before it is done."""
    return callable(getattr(env, "step_async", None)) and callable(getattr(env, "step_wait", None))
