"""The three roles of PQL as plain objects, used by every back-end.

* :class:`ActorRole` — acting: local policy, per-env exploration noise (it
  owns the σ per env: the 'mixed' table, or the 'mixed_random' draws), the
  running observation statistics (it owns them) and n-step aggregation on its
  device. It produces ready transitions for the learners.
* :class:`CriticLearner` (V-learner) — transition replay, twin critics and
  their targets, a local copy of the policy π_v for the target action, the
  clipped double-Q n-step target with target-policy smoothing.
* :class:`PolicyLearner` (P-learner) — states-only replay, the policy, and a
  (frozen) copy of the critic; maximises min(Q1, Q2)(s, π(s)) (or SAC's
  objective).

Asymmetric actor-critic (``Dims.state_dim`` set, see
:mod:`rllib_fast.algorithms.asymmetric`): the critics read the source's
privileged states ``x`` while the policy reads the observation ``o``, so the
V-learner's target is ``Q'(x', π(o'))`` and the P-learner maximises
``Q(x, π(o))``. The Actor aggregates states with the same n-step windows as
observations and keeps their running statistics too; the moments shipped
to learners are then ``(obs mean, obs var, states mean, states var)``.

The sequential baselines (DDPGN/SACN) pass the *same* policy, critic, replay
and statistics objects to all three, so they need no synchronisation; PQL
gives each role its own copies and moves snapshots between them (threads:
shared memory; Ray: the object store). Learners read live hyperparameters
(lr, tau, grad clip) from a shared :class:`LiveParams`, so PBT can change them
without a rebuild.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Callable, Dict, Optional, Tuple

import torch
from torch.nn import functional as F

from ...core.compile import compiled
from ...core.normalize import RunningMeanStd
from ...core.precision import autocast_dtype, training_precision
from .nstep import NStepAggregator
from ...core.state import load_optimizer_state
from .transition_replay import TransitionReplay
from .nets import DoubleQ, build_policy
from .targets import (clipped_double_q_target, decayed_sigma, distributional_double_q_target, mixed_sigma,
                      redrawn_sigma, smoothed_target_action)

Moments = Tuple[torch.Tensor, torch.Tensor]

#: offset of the 'mixed_random' sigma generator's seed from the run's seed (any constant that
#: keeps it off the seeds the run's other generators use)
_SIGMA_SEED_SALT = 0x5EED_5167


@dataclass
class LiveParams:
    lr: float
    actor_lr: float
    tau: float
    grad_clip: Optional[float]

    @classmethod
    def from_config(cls, cfg, lr: Optional[float] = None) -> "LiveParams":
        """``lr``: the critic lr in effect (the algorithm's ``configured_lr()``;
        default ``cfg.lr``); ``actor_lr`` None follows it."""
        lr = cfg.lr if lr is None else lr
        return cls(lr, cfg.actor_lr or lr, cfg.tau, cfg.grad_clip)

    def update_from(self, cfg) -> None:
        """Keys read from the config as they are (the lr is the algorithm's: see ``set_lr``)."""
        self.actor_lr, self.tau, self.grad_clip = cfg.actor_lr or self.lr, cfg.tau, cfg.grad_clip

    def set_lr(self, cfg, lr: float) -> None:
        self.lr, self.actor_lr = lr, cfg.actor_lr or lr


@dataclass(frozen=True)
class Dims:
    obs_dim: int
    act_dim: int
    state_dim: Optional[int] = None   # the critic's states (asymmetric actor-critic), or None

    @property
    def critic_dim(self) -> int:
        """Width of the critic's observation input (states when asymmetric)."""
        return self.obs_dim if self.state_dim is None else self.state_dim


def normalize_obs(obs: torch.Tensor, moments: Optional[Moments], clip: float) -> torch.Tensor:
    """Normalise with the given (mean, var), clamped to ±clip; identity when
    normalisation is off (``moments`` None)."""
    if moments is None:
        return obs
    mean, var = moments
    return ((obs - mean.to(obs.dtype)) / torch.sqrt(var.to(obs.dtype) + 1e-8)).clamp(-clip, clip)


def obs_moments(moments: Optional[Tuple[torch.Tensor, ...]]) -> Optional[Moments]:
    """The observation part of shipped moments (the policy's input)."""
    return None if moments is None else (moments[0], moments[1])


def critic_moments(moments: Optional[Tuple[torch.Tensor, ...]]) -> Optional[Moments]:
    """The moments of the critic's input: the states' when shipped, else the observations'."""
    if moments is None:
        return None
    return (moments[2], moments[3]) if len(moments) == 4 else (moments[0], moments[1])


def make_policy(cfg, dims: Dims):
    return build_policy(cfg.policy_learner, dims.obs_dim, dims.act_dim, cfg.resolved_hidden(dims.obs_dim),
                        cfg.activation, cfg.sac_log_std_bounds, cfg.sac_init_alpha, cfg.layer_norm)


def make_critic(cfg, dims: Dims) -> DoubleQ:
    atoms = cfg.num_atoms if cfg.distributional else 1
    return DoubleQ(dims.critic_dim, dims.act_dim, cfg.resolved_critic_hidden(dims.obs_dim), cfg.activation, atoms,
                   cfg.v_min, cfg.v_max, cfg.layer_norm)


def update_autocast(cfg, device: torch.device) -> Optional[torch.dtype]:
    """A learner's autocast dtype from ``update_dtype`` (None: float32). Why
    only the learners: a critic update (twin C51 heads on a batch of thousands,
    plus the target pass) is what bounds PQL's V-learner and SAC(n)'s loop on a
    CPU, while the Actor's forward is one small batch per env step. The
    networks hand float32 outputs on (:mod:`.nets`), so the targets, the C51
    projection and the losses are float32 arithmetic either way."""
    return autocast_dtype(cfg.update_dtype, device, reachable=not cfg.compile)


def _adamw(params, lr, wd):
    """AdamW with the fused kernel where torch has one (CPU and CUDA): one call
    for all parameters instead of ~10 small ops per parameter: much less
    optimizer time on a CPU and, for PQL's threads, far less GIL held."""
    params = list(params)
    fused = all(p.device.type in ("cpu", "cuda") and p.is_floating_point() for p in params)
    return torch.optim.AdamW(params, lr=lr, weight_decay=wd, fused=fused or None)


# ---------------------------------------------------------------------------
# Actor
# ---------------------------------------------------------------------------
class ActorRole:
    def __init__(self, cfg, dims: Dims, num_envs: int, device: torch.device, act_low, act_high, policy=None,
                 env_offset: int = 0, total_envs: Optional[int] = None, seed: int = 0):
        self.cfg, self.dims, self.device, self.N = cfg, dims, device, num_envs
        self.policy = policy if policy is not None else make_policy(cfg, dims).to(device)
        self.rms = RunningMeanStd((dims.obs_dim,), clip=cfg.obs_clip).to(device)
        self.act_low = torch.as_tensor(act_low, dtype=torch.float32, device=device).reshape(-1)
        self.act_high = torch.as_tensor(act_high, dtype=torch.float32, device=device).reshape(-1)
        self.aggregator = NStepAggregator(num_envs, cfg.n_step, cfg.gamma, (dims.obs_dim,), (dims.act_dim,), device)
        self.state_rms = self.state_aggregator = None
        if dims.state_dim is not None:
            # the same windows over the states (no actions: those come from `aggregator`)
            self.state_rms = RunningMeanStd((dims.state_dim,), clip=cfg.obs_clip).to(device)
            self.state_aggregator = NStepAggregator(num_envs, cfg.n_step, cfg.gamma, (dims.state_dim,), (0,),
                                                    device)
        # σ per env slot: 'mixed' spreads it over the global env index (fixed across resets);
        # 'mixed_random' draws it per env and redraws it at that env's episode end, from the
        # Actor's own generator (so the draws neither consume nor depend on anyone else's
        # stream). Its seed is derived from the run's seed, not equal to it: a generator seeded
        # like the global one would repeat the global stream's numbers (the env's start states)
        self.noise_generator = None
        if cfg.noise_type == "mixed_random":
            self.noise_generator = torch.Generator(device=device)
            self.noise_generator.manual_seed(_SIGMA_SEED_SALT + int(seed) * 65_537 + int(env_offset))
            self.sigma_table = redrawn_sigma(torch.zeros(num_envs, device=device),
                                             torch.ones(num_envs, dtype=torch.bool, device=device),
                                             cfg.noise_std_min, cfg.noise_std_max, self.noise_generator)
        else:
            self.sigma_table = mixed_sigma(num_envs, cfg.noise_std_min, cfg.noise_std_max, env_offset,
                                           total_envs or num_envs, device)
        self.steps = 0          # vectorised steps taken (host int)
        self._act_fn = compiled(self._policy_act, cfg.compile, device)
        self.emitted = 0        # transitions emitted to the learners (host int)

    def moments(self) -> Optional[Tuple[torch.Tensor, ...]]:
        """The running normalisers' moments the learners normalise with:
        (obs mean, obs var[, states mean, states var]), or None when ``obs_norm`` is off."""
        if not self.cfg.obs_norm:
            return None
        if self.state_rms is None:
            return (self.rms.mean, self.rms.var)
        return (self.rms.mean, self.rms.var, self.state_rms.mean, self.state_rms.var)

    def sigma(self) -> torch.Tensor:
        """Exploration std per env, ``[N, 1]``."""
        cfg = self.cfg
        if cfg.noise_type in ("mixed", "mixed_random"):
            return self.sigma_table.unsqueeze(1)
        s = decayed_sigma(cfg.noise_std, cfg.noise_decay, self.steps, cfg.noise_decay_rate, cfg.noise_decay_steps,
                          cfg.noise_std_min)
        return torch.full((self.N, 1), s, device=self.device)

    @torch.no_grad()
    def act(self, obs: torch.Tensor, explore: bool = True) -> torch.Tensor:
        """Policy-unit actions in [-1, 1]."""
        if explore and self.steps < self.cfg.warmup_steps:
            return torch.rand((obs.shape[0], self.dims.act_dim), device=self.device) * 2.0 - 1.0
        noise = explore and not getattr(self.policy, "stochastic", False)
        sigma = self.sigma()[:obs.shape[0]] if noise else None
        return self._act_fn(obs, obs_moments(self.moments()), sigma, explore)

    def _policy_act(self, obs: torch.Tensor, moments: Optional[Moments], sigma: Optional[torch.Tensor],
                    explore: bool) -> torch.Tensor:
        """The act step's tensor work (what ``compile`` compiles); the
        exploration sigma comes in as a tensor, so a decaying schedule does
        not recompile."""
        obs_n = normalize_obs(obs.float(), moments, self.cfg.obs_clip)
        if getattr(self.policy, "stochastic", False):
            return self.policy.act(obs_n, deterministic=not explore)
        a = self.policy(obs_n)
        if explore:
            a = (a + torch.randn_like(a) * sigma).clamp(-1.0, 1.0)
        return a

    def to_env(self, a: torch.Tensor) -> torch.Tensor:
        return self.act_low + (a.clamp(-1.0, 1.0) + 1.0) * 0.5 * (self.act_high - self.act_low)

    @torch.no_grad()
    def observe(self, obs: torch.Tensor, action: torch.Tensor, step, states: Optional[torch.Tensor] = None,
                final_states: Optional[torch.Tensor] = None) -> Optional[Dict[str, torch.Tensor]]:
        """Account one env step; returns the finished n-step transitions (or None).
        ``states``/``final_states``: the critic's states before the step and
        those going with ``step.final_obs`` (asymmetric critic only)."""
        if self.cfg.obs_norm:
            self.rms.update(step.final_obs.float(), mask=step.valid)
        reward = step.reward.float() * self.cfg.reward_scale
        out = self.aggregator.push(obs.float(), action, reward,
                                   step.terminated, step.truncated, step.final_obs.float(), step.valid)
        if self.state_aggregator is not None:
            if self.cfg.obs_norm:
                self.state_rms.update(final_states, mask=step.valid)
            s_out = self.state_aggregator.push(states, action[:, :0], reward, step.terminated, step.truncated,
                                               final_states, step.valid)
            if out is not None:
                out["states"], out["next_states"] = s_out["obs"], s_out["next_obs"]
        if self.noise_generator is not None:
            self.sigma_table = redrawn_sigma(self.sigma_table, step.done, self.cfg.noise_std_min,
                                             self.cfg.noise_std_max, self.noise_generator)
        self.steps += 1
        if out is not None:
            self.emitted += self.N
        return out

    def cut_episodes(self) -> None:
        """End the in-flight n-step windows at the last step (see FastAlgorithm.on_source_not_restored)."""
        self.aggregator.cut_episodes()
        if self.state_aggregator is not None:
            self.state_aggregator.cut_episodes()

    def state_dict(self) -> Dict[str, object]:
        s = {"policy": self.policy.state_dict(), "rms": self.rms.state_dict(),
             "aggregator": self.aggregator.state_dict(), "steps": self.steps, "emitted": self.emitted}
        if self.state_aggregator is not None:
            s.update(state_rms=self.state_rms.state_dict(), state_aggregator=self.state_aggregator.state_dict())
        if self.noise_generator is not None:
            s.update(sigma_table=self.sigma_table.clone(), noise_generator=self.noise_generator.get_state())
        return s

    def load_state_dict(self, s: Dict[str, object]) -> None:
        self.policy.load_state_dict(s["policy"])
        self.rms.load_state_dict(s["rms"])
        self.aggregator.load_state_dict(s["aggregator"])
        if self.state_aggregator is not None:
            self.state_rms.load_state_dict(s["state_rms"])
            self.state_aggregator.load_state_dict(s["state_aggregator"])
        if self.noise_generator is not None and "sigma_table" in s:
            self.sigma_table = s["sigma_table"].to(self.device).clone()
            self.noise_generator.set_state(s["noise_generator"])
        self.steps, self.emitted = int(s["steps"]), int(s["emitted"])


# ---------------------------------------------------------------------------
# V-learner
# ---------------------------------------------------------------------------
class CriticLearner:
    def __init__(self, cfg, dims: Dims, device: torch.device, live: LiveParams, rows_per_add: int,
                 capacity: int, policy=None, critic=None, replay: Optional[TransitionReplay] = None,
                 moments_fn: Optional[Callable[[], Optional[Moments]]] = None):
        self.cfg, self.dims, self.device, self.live = cfg, dims, device, live
        self.critic = critic if critic is not None else make_critic(cfg, dims).to(device)
        self.target = copy.deepcopy(self.critic).requires_grad_(False)
        # listed once: module.parameters() walks the module tree on every call, a visible
        # share of a compiled update's time if done per update; restores load into these tensors
        self._critic_params, self._target_params = list(self.critic.parameters()), list(self.target.parameters())
        # π_v: the latest synced policy (no target actor, as the reference code)
        self.policy = policy if policy is not None else make_policy(cfg, dims).to(device).requires_grad_(False)
        if replay is None:
            v_fields, _ = cfg.replay_fields(dims.obs_dim, dims.act_dim, dims.state_dim)
            replay = TransitionReplay(capacity, rows_per_add, v_fields, device)
        self.replay = replay
        self.optimizer = _adamw(self.critic.parameters(), live.lr, cfg.weight_decay)
        self._moments: Optional[Moments] = None
        self.moments_fn = moments_fn or (lambda: self._moments)
        self.batch_size = cfg.resolved_batch_size()
        self.learning_starts = cfg.resolved_learning_starts()
        self.updates = 0
        self.loss_sum = torch.zeros(2, device=device)    # (sum of losses, sum of Q) since last read
        self._loss_fn = compiled(self.loss, cfg.compile, device)
        self.autocast = update_autocast(cfg, device)

    def set_moments(self, moments: Optional[Tuple[torch.Tensor, ...]]) -> None:
        self._moments = None if moments is None else tuple(t.to(self.device) for t in moments)

    def ready(self) -> bool:
        return len(self.replay) >= self.learning_starts

    def add(self, batch: Dict[str, torch.Tensor]) -> None:
        self.replay.add({k: batch[k] for k in self.replay.data})

    def update(self) -> None:
        live = self.live
        b = self.replay.sample(self.batch_size)
        with training_precision(self.device, self.autocast):
            loss, q_mean = self._loss_fn(b, self.moments_fn())
        for g in self.optimizer.param_groups:
            g["lr"] = live.lr
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if live.grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(self._critic_params, live.grad_clip, foreach=True)
        self.optimizer.step()
        with torch.no_grad():
            torch._foreach_lerp_(self._target_params, self._critic_params, live.tau)
            self.loss_sum += torch.stack([loss.detach(), q_mean])
        self.updates += 1

    def loss(self, b: Dict[str, torch.Tensor], moments) -> Tuple[torch.Tensor, torch.Tensor]:
        """The critic update's forward (what ``compile`` compiles, its
        backward with it): the masked double-Q loss and the mean Q."""
        cfg = self.cfg
        clip = cfg.obs_clip
        # the target policy reads next observations; the critics read states when asymmetric
        nxt = normalize_obs(b["next_obs"], obs_moments(moments), clip)
        if self.dims.state_dim is None:
            obs, c_nxt = normalize_obs(b["obs"], moments, clip), nxt
        else:
            cs = critic_moments(moments)
            obs, c_nxt = normalize_obs(b["states"], cs, clip), normalize_obs(b["next_states"], cs, clip)
        w = b["valid"].float()
        with torch.no_grad():
            if getattr(self.policy, "stochastic", False):
                a_next, logp = self.policy.sample(nxt)
                bonus = -self.policy.log_alpha.exp() * logp
            else:
                a_next = smoothed_target_action(self.policy(nxt), cfg.target_noise, cfg.target_noise_clip)
                bonus = None
            if cfg.distributional:
                l1, l2 = self.target.heads(c_nxt, a_next)
                ret = b["reward"] if bonus is None else b["reward"] + b["discount"] * bonus
                target = distributional_double_q_target(ret, b["discount"], l1, l2, self.target.support)
            else:
                t1, t2 = self.target.q(c_nxt, a_next)
                target = clipped_double_q_target(b["reward"], b["discount"], t1, t2, bonus)
        h1, h2 = self.critic.heads(obs, b["action"])
        if cfg.distributional:
            per = -(target * F.log_softmax(h1, -1)).sum(-1) - (target * F.log_softmax(h2, -1)).sum(-1)
            q_mean = (F.softmax(h1.detach(), -1) * self.critic.support).sum(-1)
        else:
            per = (h1 - target).pow(2) + (h2 - target).pow(2)
            q_mean = h1.detach()
        return (w * per).sum() / w.sum().clamp_min(1.0), q_mean.mean()

    def take_metrics(self) -> torch.Tensor:
        out = self.loss_sum.clone()
        self.loss_sum.zero_()
        return out

    def state_dict(self, with_replay: bool = False) -> Dict[str, object]:
        s = {"critic": self.critic.state_dict(), "target": self.target.state_dict(),
             "policy": self.policy.state_dict(), "optimizer": self.optimizer.state_dict(),
             "updates": self.updates, "moments": self._moments}
        if with_replay:
            s["replay"] = self.replay.state_dict()
        return s

    def load_state_dict(self, s: Dict[str, object]) -> None:
        self.critic.load_state_dict(s["critic"])
        self.target.load_state_dict(s["target"])
        self.policy.load_state_dict(s["policy"])
        load_optimizer_state(self.optimizer, s["optimizer"])
        self.updates = int(s["updates"])
        moments = s.get("moments", s.get("stats"))   # "stats": the key of older checkpoints
        if moments is not None:
            self.set_moments(moments)
        if "replay" in s:
            self.replay.load_state_dict(s["replay"])


# ---------------------------------------------------------------------------
# P-learner
# ---------------------------------------------------------------------------
class PolicyLearner:
    def __init__(self, cfg, dims: Dims, device: torch.device, live: LiveParams, rows_per_add: int,
                 capacity: int, policy=None, critic=None, replay: Optional[TransitionReplay] = None,
                 moments_fn: Optional[Callable[[], Optional[Moments]]] = None, shared_critic: bool = False):
        self.cfg, self.dims, self.device, self.live = cfg, dims, device, live
        self.policy = policy if policy is not None else make_policy(cfg, dims).to(device)
        self.critic = critic if critic is not None else make_critic(cfg, dims).to(device)
        self.shared_critic = shared_critic
        if not shared_critic:
            self.critic.requires_grad_(False)
        # a shared critic (sequential DDPG(n)/SAC(n)) is frozen around each policy loss: its
        # parameters listed once, as CriticLearner lists its own (restores load in place)
        self._frozen_params = list(self.critic.parameters()) if shared_critic else []
        if replay is None:
            _, p_fields = cfg.replay_fields(dims.obs_dim, dims.act_dim, dims.state_dim)
            replay = TransitionReplay(capacity, rows_per_add, p_fields, device)
        self.replay = replay
        self.sac = getattr(self.policy, "stochastic", False)
        net_params = [p for n, p in self.policy.named_parameters() if n != "log_alpha"]
        self.optimizer = _adamw(net_params, live.actor_lr, cfg.weight_decay)
        self.net_params = net_params
        if self.sac:
            self.alpha_optimizer = torch.optim.Adam([self.policy.log_alpha], lr=cfg.sac_alpha_lr)
            self.target_entropy = (-float(dims.act_dim) if cfg.sac_target_entropy == "auto"
                                   else float(cfg.sac_target_entropy))
        self._moments: Optional[Moments] = None
        self.moments_fn = moments_fn or (lambda: self._moments)
        self.batch_size = cfg.resolved_batch_size()
        self.learning_starts = cfg.resolved_learning_starts()
        self.updates = 0
        self.loss_sum = torch.zeros(2, device=device)
        self._loss_fn = compiled(self.loss, cfg.compile, device)
        self.autocast = update_autocast(cfg, device)

    set_moments = CriticLearner.set_moments
    ready = CriticLearner.ready
    take_metrics = CriticLearner.take_metrics

    def add(self, batch: Dict[str, torch.Tensor]) -> None:
        self.replay.add({k: batch[k] for k in self.replay.data})

    def update(self) -> None:
        live = self.live
        asym = self.dims.state_dim is not None
        b = self.replay.sample(self.batch_size, keys=("obs", "states", "valid") if asym else ("obs", "valid"))
        w = b["valid"].float()
        wsum = w.sum().clamp_min(1.0)
        frozen = self._frozen_params
        for p in frozen:
            p.requires_grad_(False)
        try:
            with training_precision(self.device, self.autocast):
                loss, a, logp = self._loss_fn(b, self.moments_fn())
        finally:
            for p in frozen:
                p.requires_grad_(True)
        for g in self.optimizer.param_groups:
            g["lr"] = live.actor_lr
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if live.grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(self.net_params, live.grad_clip, foreach=True)
        self.optimizer.step()
        if self.sac:
            alpha_loss = -(self.policy.log_alpha * (w * (logp.detach() + self.target_entropy)).sum() / wsum)
            self.alpha_optimizer.zero_grad(set_to_none=True)
            alpha_loss.backward()
            self.alpha_optimizer.step()
        with torch.no_grad():
            ent = -logp.detach().mean() if self.sac else a.detach().abs().mean()
            self.loss_sum += torch.stack([loss.detach(), ent])
        self.updates += 1

    def loss(self, b: Dict[str, torch.Tensor], moments):
        """The policy update's forward (what ``compile`` compiles, its
        backward with it): the masked policy loss, the actions and (SAC) their
        log-probabilities. Critic parameters are frozen around the call."""
        cfg, asym = self.cfg, self.dims.state_dim is not None
        obs = normalize_obs(b["obs"], obs_moments(moments), cfg.obs_clip)
        c_obs = normalize_obs(b["states"], critic_moments(moments), cfg.obs_clip) if asym else obs
        w = b["valid"].float()
        wsum = w.sum().clamp_min(1.0)
        if self.sac:
            a, logp = self.policy.sample(obs)
            q1, q2 = self.critic.q(c_obs, a)
            alpha = self.policy.log_alpha.exp().detach()
            return (w * (alpha * logp - torch.minimum(q1, q2))).sum() / wsum, a, logp
        a = self.policy(obs)
        q1, q2 = self.critic.q(c_obs, a)
        return -(w * torch.minimum(q1, q2)).sum() / wsum, a, None

    def state_dict(self, with_replay: bool = False) -> Dict[str, object]:
        s = {"policy": self.policy.state_dict(), "critic": self.critic.state_dict(),
             "optimizer": self.optimizer.state_dict(), "updates": self.updates, "moments": self._moments}
        if self.sac:
            s["alpha_optimizer"] = self.alpha_optimizer.state_dict()
        if with_replay:
            s["replay"] = self.replay.state_dict()
        return s

    def load_state_dict(self, s: Dict[str, object]) -> None:
        self.policy.load_state_dict(s["policy"])
        self.critic.load_state_dict(s["critic"])
        load_optimizer_state(self.optimizer, s["optimizer"])
        if self.sac and "alpha_optimizer" in s:
            load_optimizer_state(self.alpha_optimizer, s["alpha_optimizer"])
        self.updates = int(s["updates"])
        moments = s.get("moments", s.get("stats"))   # "stats": the key of older checkpoints
        if moments is not None:
            self.set_moments(moments)
        if "replay" in s:
            self.replay.load_state_dict(s["replay"])
