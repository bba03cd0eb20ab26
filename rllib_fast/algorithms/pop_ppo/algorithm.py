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
   members' PPO losses (each with its own clip, value and entropy weights, so
   a member's gradient reaches only its own slice), gradients are clipped per
   member and one :class:`~rllib_fast.core.stacked.VectorAdam` step moves
   everyone with its own lr. The adaptive-KL lr is a ``[K]`` tensor adapted
   on the device after each epoch (no host sync). A population of one steps
   with FastPPO's own optimizer instead (``optim.py`` says why), so it is
   the FastPPO run of its seed, bit for bit;
4. **PBT** every ``pbt_interval`` iterations (``population/base.py``'s round:
   truncation selection on each member's recent returns, exploit = copy the
   donor's slices of weights, normalisers, Adam moments and adaptive lr,
   explore = Tune's rule on the member hyperparameter tensors). The
   simulator is not reset: the replaced members' running episodes go on, but
   do not count towards their fitness;
5. **report**: the population's metrics (``population/member_i/...``,
   ``env_runners/episode_return_mean`` = the best member's fitness).
"""
from __future__ import annotations

import math
from typing import Any, Dict, Optional

import numpy as np
import torch
from ray.rllib.core import DEFAULT_MODULE_ID

from ...core.algorithm import FastAlgorithm
from ...core.compile import compiled
from ...core.rollout import RolloutStorage
from ...core.seeding import PBT_HOST, derive_seed
from ...core.stacked import copy_members
from ...core.state import StateAdapter
from ..asymmetric import current_states, final_states, state_dim, step_states
from ..onpolicy import DECORRELATION_BUDGET, resolve_normalize_obs
from ..population import mutations as M
from ..population.base import HyperparameterTensors, PopulationAlgorithm
from ..population.rng import MemberRNG
from ..population.tracking import MemberReturns
from .config import PopA2CConfig, PopPPOConfig
from .module import StackedActorCritic, pop_ppo_policy_module, to_env_action
from ...core.rollout import compute_gae
from .optim import SingleAdam, StackedAdam


def member_gae(rewards, values, next_values, terminated, done, gamma, lam, valid=None):
    """GAE over ``[T, K, n]`` with per-member ``gamma``/``lam`` (``[K, 1]`` tensors):
    ``core.rollout.compute_gae``, whose arithmetic broadcasts over the member axis."""
    return compute_gae(rewards, values, next_values, terminated, done, gamma, lam, valid)


def member_mean(x: torch.Tensor, w: Optional[torch.Tensor]) -> torch.Tensor:
    """``[K, B] -> [K]``: each member's (masked) mean."""
    if w is None:
        return x.mean(1)
    return (x * w).sum(1) / w.sum(1).clamp_min(1.0)


def member_standardize(a: torch.Tensor, w: Optional[torch.Tensor]) -> torch.Tensor:
    """Standardise ``[K, B]`` advantages with each member's own (masked) moments."""
    w = torch.ones_like(a) if w is None else w
    n = w.sum(1).clamp_min(1.0)
    mean = (a * w).sum(1) / n
    std = ((a * a * w).sum(1) / n - mean ** 2).clamp_min(0.0).sqrt()
    return (a - mean.unsqueeze(1)) / (std.unsqueeze(1) + 1e-8)


class PopPPO(PopulationAlgorithm):
    """K PPO agents sharing one batched simulator, per-member hyperparameters, in-trial PBT."""

    LOSS_STATS = ("policy_loss", "vf_loss", "entropy", "mean_kl_loss", "clip_fraction")

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
        self.returns = MemberReturns(self.K, self.n, self.device, cfg.fitness_window)
        # the populations' member streams (checkpointed with the algorithm); PPO's own draws
        # (action noise, shuffles) come from the algorithm's torch stream as FastPPO's do
        self.rng = MemberRNG.from_seed(self.seed, self.K, self.device)
        self.host_rng = np.random.default_rng(derive_seed(self.seed, PBT_HOST))
        self.mutations = cfg.resolved_mutations()
        self.hp = HyperparameterTensors(cfg.member_hparams(), self.K, self.device)
        for k in self.hp.names:
            self.hp[k].fill_(float(getattr(cfg, k)))
            self.hp.applied[k] = getattr(cfg, k)
        if cfg.pbt_init == "sample" and self.K > 1:   # one member is plain FastPPO: the config's values
            for k, dist in self.mutations.items():
                for m in range(self.K):
                    self.hp[k][m] = float(M.sample(dist, self.host_rng))
        self.env_steps = self.num_updates = self.last_pbt = self.pbt_rounds = self.episodes_logged = 0
        self.update_credit = 0.0
        self.pbt_interval = cfg.resolved_pbt_interval()
        self.last_pbt_info: Dict[str, Any] = {}
        self.build_learner()

    def build_learner(self) -> None:
        cfg, env, K = self.config, self.env, self.K
        self.ac = StackedActorCritic(K, self.obs_dim, env.single_action_space, self.hidden_sizes, cfg.activation,
                                     cfg.init_log_std, cfg.std_mode == "state_dependent", self.state_dim,
                                     self.normalize_obs).to(self.device)
        space = env.single_action_space
        if not self.ac.discrete:
            self.act_low = torch.as_tensor(space.low, dtype=torch.float32, device=self.device)
            self.act_high = torch.as_tensor(space.high, dtype=torch.float32, device=self.device)
        self.params = list(self.ac.parameters())
        # the lr in effect is the optimizer's (adapted to each member's epoch KL); `lr_applied` is
        # the member lr hyperparameter it was last set from (PBT or a config change moves it)
        self.lr_applied = self.hp["lr"].clone()
        self.optimizer = (StackedAdam(self.params, K, self.hp["lr"], cfg.grad_clip, cfg.adaptive_lr_bounds)
                          if K > 1 else SingleAdam(self.params, cfg.lr, cfg.grad_clip, cfg.adaptive_lr_bounds))
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
        self.loss_fn = compiled(self._loss, cfg.compile, self.device)   # the loss (PopulationAlgorithm.update_step is a whole update)
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
        return a if self.ac.discrete else to_env_action(a, self.act_low, self.act_high)

    # -- acting ----------------------------------------------------------------------------------------
    def _act_step(self, obs: torch.Tensor):
        """One stacked forward for all K x n envs: normalised observations,
        actions, log-probabilities and env actions, flat in env order."""
        obs_n = self.ac.policy_input(self.members(obs))
        action, logp = self.ac.sample(obs_n)
        flat = lambda x: x.reshape(self.K * self.n, *x.shape[2:])  # noqa: E731
        return flat(obs_n), flat(action), flat(logp), flat(self.env_action(action))

    def policy_actions(self, obs: torch.Tensor, explore: bool) -> torch.Tensor:
        """``[K, B, ...]`` raw observations -> ``[K, B, ...]`` env actions (each member its own)."""
        a, _ = self.ac.sample(self.ac.policy_input(obs), deterministic=not explore)
        return self.env_action(a)

    def get_module(self, module_id: str = DEFAULT_MODULE_ID, member: Optional[int] = None):
        """One member's greedy policy: the best by fitness, or ``member``."""
        return pop_ppo_policy_module(self, member)

    @torch.no_grad()
    def _decorrelate(self) -> None:
        """FastPPO's start-state decorrelation over the whole shared env (its
        episode clocks randomised, then env i takes k_i ~ U[0, k_max] random
        actions before the members' initial policies act); the partial first
        episodes count towards nobody's fitness."""
        k_max = self.config.decorrelate_steps
        N = self.env.num_envs
        if k_max is None:
            k_max = min(self.env.max_episode_steps or 100, max(1, DECORRELATION_BUDGET // N))
        elif k_max <= 0:
            return
        if hasattr(self.env, "randomize_episode_progress"):
            self.env.randomize_episode_progress()
        k = torch.randint(0, k_max + 1, (N,), device=self.device)
        for t in range(k_max):
            obs = self.members(self.obs)
            if self.normalize_obs:
                self.ac.obs_norm.update(obs.float().reshape(self.K, self.n, -1))
            policy_a, _ = self.ac.sample(self.ac.policy_input(obs))
            policy_a = policy_a.reshape(N, *policy_a.shape[2:])
            random_a = self.env.sample_actions()
            use_random = (t < k).view(-1, *([1] * (random_a.dim() - 1)))
            step = self.env.step(torch.where(use_random, random_a, self.env_action(policy_a)))
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
        pbt_info = None
        if self.pbt_interval is not None and self.num_updates - self.last_pbt >= self.pbt_interval:
            pbt_info = self.pbt_round()
        self._report(1, pbt_info)
        self.log_learner("training_intensity", float(self.config.num_epochs))

    def trained_env_steps(self, n_updates: int) -> int:
        return n_updates * self.horizon * self.env.num_envs

    @torch.no_grad()
    def _rollout(self) -> None:
        """T batched steps of the shared env; observation statistics frozen during
        the rollout and updated once at its end, per member."""
        env, st = self.env, self.storage
        for t in range(self.horizon):
            if self.normalize_obs:
                st["raw_obs"][t].copy_(self.obs.reshape(self.obs.shape[0], -1))
            if self.states is not None:
                st["states"][t].copy_(self.states)
            obs_n, action, logp, env_action = self._act_fn(self.obs)
            step = env.step(env_action)
            if step.valid is not None:
                self.any_invalid = True
                st["valid"][t].copy_(step.valid)
            else:
                st["valid"][t].fill_(True)
            final_n = self.ac.policy_input(self.members(step.final_obs)).reshape(env.num_envs, -1)
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
            self.ac.obs_norm.update(self.by_member("raw_obs"), mask=None if valid is None else self.by_member("valid"))

    @torch.no_grad()
    def _targets(self):
        """Member-major learning targets ``[K, T*n]`` (critic units) and weights."""
        st, ac, K = self.storage, self.ac, self.K
        T, n = self.horizon, self.n
        valid = self.by_member("valid") if self.any_invalid else None
        if self.state_dim is not None:   # asymmetric critic: its own per-member input statistics
            if self.normalize_obs:
                ac.state_norm.update(self.by_member("states"), mask=valid)
            for key in ("states", "final_states"):
                x = ac.critic_input(self.by_member(key))       # [K, T*n, S]
                st[key].copy_(x.reshape(K, T, n, -1).transpose(0, 1).reshape_as(st[key]))
        both = torch.cat([self.by_member(self.critic_key), self.by_member(self.final_critic_key)], 1)
        v_n = ac.value(both)                                       # [K, 2*T*n]
        v = ac.value_norm.denormalize(v_n) if self.config.normalize_values else v_n
        # to [T, K, n] for the recursion over time
        values, next_values = (x.reshape(K, T, n).transpose(0, 1) for x in v.split(T * n, 1))
        tk = lambda name: st[name].view(T, K, n)  # noqa: E731
        valid_t = tk("valid") if self.any_invalid else None
        adv, ret = member_gae(tk("rewards"), values, next_values, tk("terminated"), tk("done"),
                              self.hp["gamma"].unsqueeze(1), self.hp["lambda_"].unsqueeze(1), valid_t)
        km = lambda x: x.transpose(0, 1).reshape(K, T * n)  # noqa: E731
        adv, ret, values = km(adv), km(ret), km(values)
        if self.config.normalize_values:
            ac.value_norm.update(ret, mask=valid)
            targets, old_v = ac.value_norm.normalize(ret), ac.value_norm.normalize(values)
        else:
            targets, old_v = ret, values
        w = valid.float() if valid is not None else None
        return adv, targets, old_v, w

    def _loss(self, idx, obs, actions, old_logp, adv, targets, old_v, critic_in, w):
        """The members' losses summed (member k's parameters get only member
        k's gradient) and ``[5, K]`` statistics: the update step's forward
        (what ``compile`` compiles)."""
        losses, stats = self.member_losses(idx, obs, actions, old_logp, adv, targets, old_v, critic_in, w)
        return losses.sum(), stats

    def member_losses(self, idx, obs, actions, old_logp, adv, targets, old_v, critic_in, w):
        """Each member's clipped-surrogate PPO loss ``[K]`` on its own minibatch
        (positions ``idx`` of its own ``[K, T*n]`` data), with its own clip,
        value and entropy weights, and the ``[5, K]`` statistics."""
        cfg, ac, hp = self.config, self.ac, self.hp
        wi = w[:, idx] if w is not None else None
        logp, entropy = ac.evaluate_actions(obs[:, idx], actions[:, idx])
        log_ratio = logp - old_logp[:, idx]
        ratio = log_ratio.exp()
        a = adv[:, idx]
        if cfg.normalize_advantages:
            a = member_standardize(a, wi)
        clip = hp["clip_param"].unsqueeze(1)
        surr = torch.min(ratio * a, ratio.clamp(1 - clip, 1 + clip) * a)
        pg_loss = -member_mean(surr, wi)
        v = ac.value(critic_in[:, idx])
        tgt = targets[:, idx]
        vf = (v - tgt) ** 2
        if cfg.vf_clip_param is not None:
            ov = old_v[:, idx]
            v_clip = ov + (v - ov).clamp(-cfg.vf_clip_param, cfg.vf_clip_param)
            vf = torch.max(vf, (v_clip - tgt) ** 2)
        vf_loss = 0.5 * member_mean(vf, wi)
        ent = member_mean(entropy, wi)
        loss = pg_loss + hp["vf_loss_coeff"] * vf_loss - hp["entropy_coeff"] * ent
        ratio_d, log_ratio_d = ratio.detach(), log_ratio.detach()
        kl = member_mean((ratio_d - 1) - log_ratio_d, wi)
        clipfrac = member_mean(((ratio_d - 1).abs() > clip).float(), wi)
        return loss, torch.stack([pg_loss.detach(), vf_loss.detach(), ent.detach(), kl, clipfrac])

    def learn(self, batch) -> None:
        """``num_epochs`` x ``num_minibatches`` steps of every member at once."""
        cfg, device, K = self.config, self.device, self.K
        adv, targets, old_v, w = batch
        obs, actions, old_logp = self.by_member("obs"), self.by_member("actions"), self.by_member("logp")
        critic_in = self.by_member(self.critic_key)
        B = self.horizon * self.n
        mb = B // cfg.num_minibatches
        stats = torch.zeros(5, K, device=device)
        for _ in range(cfg.num_epochs):
            perm = torch.randperm(B, device=device)
            epoch_kl = torch.zeros(K, device=device)
            for i in range(cfg.num_minibatches):
                idx = perm[i * mb:(i + 1) * mb]
                loss, mstats = self.loss_fn(idx, obs, actions, old_logp, adv, targets, old_v, critic_in, w)
                self.optimizer.step(torch.autograd.grad(loss, self.params))
                with torch.no_grad():
                    stats += mstats
                    epoch_kl += mstats[3]
            if cfg.adaptive_lr_kl_target is not None:
                self.optimizer.adapt(epoch_kl, cfg.num_minibatches, self.hp["adaptive_lr_kl_target"],
                                     self.hp.applied.get("adaptive_lr_kl_target"))
        stats /= cfg.num_epochs * cfg.num_minibatches
        for i, key in enumerate(self.LOSS_STATS):
            self.log_learner(key, stats[i].mean())
        self.last_loss_stats = stats
        self.log_learner("curr_lr", self.optimizer.lr.mean())

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
        copy_members(self.ac, src, dst)
        lr = self.optimizer.lr
        if self.config.pbt_exploit_optimizer == "copy":
            self.optimizer.copy_members(src, dst)
            lr[dst] = lr[src].clone()
        else:
            self.optimizer.reset_members(dst)
            lr[dst] = self.hp["lr"][src].clone()
        self.lr_applied[dst] = self.hp["lr"][src].clone()

    # -- state ----------------------------------------------------------------------------------------------
    def stateful_components(self) -> Dict[str, Any]:
        return {**FastAlgorithm.stateful_components(self), "returns": self.returns, "rng": self.rng,
                "host_rng": StateAdapter.numpy_generator(self.host_rng), "hp": self.hp, "module": self.ac,
                "optimizer": self.optimizer, "lr_applied": StateAdapter.tensor(self.lr_applied)}

    def extra_state(self) -> Dict[str, Any]:
        return {**super().extra_state(), "any_invalid": self.any_invalid}

    def set_extra_state(self, state: Dict[str, Any]) -> None:
        FastAlgorithm.set_extra_state(self, state)
        for k in ("env_steps", "num_updates", "update_credit", "last_pbt", "pbt_rounds", "episodes_logged",
                  "any_invalid"):
            setattr(self, k, state[k])

    def on_source_not_restored(self) -> None:
        """On-policy: nothing is stored across iterations, so nothing to cut."""


class PopA2C(PopPPO):
    """K A2C agents sharing one batched simulator: PopPPO with one full-batch step per iteration."""

    @classmethod
    def get_default_config(cls) -> PopA2CConfig:
        return PopA2CConfig()
