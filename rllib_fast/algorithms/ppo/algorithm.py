"""FastPPO: synchronous batched-inference PPO on a tensor vector env.

Reads top to bottom like a single-file PPO: rollout (one batched forward for
all N envs per step, written into preallocated ``[T, N]`` storage), targets
(one batched critic pass over observations and ``final_obs``, then GAE with
time-out bootstrapping), and minibatch epochs of the clipped surrogate with
value clipping. Everything stays on the env's device; the only host syncs are
the adaptive-KL lr step (once per epoch, when enabled) and RLlib's metric
reduction at the end of an iteration.
"""
from __future__ import annotations

from typing import Any, Dict

import torch
from ray.rllib.utils.metrics import (ALL_MODULES, LEARNER_RESULTS, NUM_ENV_STEPS_TRAINED,
                                     NUM_ENV_STEPS_TRAINED_LIFETIME)

from ...core.algorithm import FastAlgorithm
from ...core.rollout import RolloutStorage, compute_gae
from .config import FastPPOConfig
from .module import FastPPOModule

POLICY = "default_policy"


def _masked_mean(x: torch.Tensor, w: torch.Tensor | None, denom: torch.Tensor | None) -> torch.Tensor:
    return x.mean() if w is None else (x * w).sum() / denom


class FastPPO(FastAlgorithm):
    @classmethod
    def get_default_config(cls) -> FastPPOConfig:
        return FastPPOConfig()

    # -- construction ------------------------------------------------------------
    def build(self) -> None:
        cfg, env = self.config, self.env
        self.module = FastPPOModule(
            observation_space=env.single_observation_space, action_space=env.single_action_space,
            inference_only=False,
            model_config={"hidden_sizes": list(cfg.hidden_sizes), "activation": cfg.activation,
                          "std_mode": cfg.std_mode, "init_log_std": cfg.init_log_std},
        ).to(self.device)
        self.params = list(self.module.parameters())
        # fused Adam: one kernel for all parameters instead of ~12 per tensor
        self.optimizer = torch.optim.Adam(self.params, lr=cfg.lr, eps=1e-5, fused=True)
        self.horizon = cfg.horizon()
        obs_shape, act_shape = env.obs_shape, env.action_shape
        act_dtype = torch.int64 if env.is_discrete else torch.float32
        self.storage = RolloutStorage(self.horizon, env.num_envs, {
            "obs": (obs_shape, torch.float32), "final_obs": (obs_shape, torch.float32),
            "actions": (act_shape, act_dtype), "logp": ((), torch.float32),
            "rewards": ((), torch.float32), "terminated": ((), torch.bool), "done": ((), torch.bool),
            "valid": ((), torch.bool),
            **({"raw_obs": (obs_shape, torch.float32)} if cfg.normalize_obs else {}),
        }, self.device)
        self.any_invalid = False  # flips to True the first time a source reports valid=False masks
        self._decorrelate()

    def _normalize_obs(self, obs: torch.Tensor, update: bool) -> torch.Tensor:
        obs = obs.float().reshape(obs.shape[0], -1)
        if not self.config.normalize_obs:
            return obs
        if update:
            self.module.obs_norm.update(obs)
        return self.module.obs_norm.normalize(obs)

    @torch.no_grad()
    def _decorrelate(self) -> None:
        """Stooke & Abbeel §5.3: env i first takes k_i ~ U[0, K] uniform-random
        actions (then the initial policy until K), so envs do not move in
        lock-step. Sources that can also randomise their episode clocks (so
        time limits do not align) are asked to."""
        k_max = self.config.decorrelate_steps
        if k_max is None:
            k_max = self.env.max_episode_steps or 100
        if k_max <= 0:
            return
        if hasattr(self.env, "randomize_episode_progress"):
            self.env.randomize_episode_progress()
        n = self.env.num_envs
        k = torch.randint(0, k_max + 1, (n,), device=self.device)
        for t in range(k_max):
            policy_a, _ = self.module.sample(self._normalize_obs(self.obs, update=True))
            random_a = self.env.sample_actions()
            use_random = (t < k).view(-1, *([1] * (random_a.dim() - 1)))
            self.obs = self.env.step(torch.where(use_random, random_a, self.module.to_env_action(policy_a))).obs
        self.log_env_steps(k_max * n)
        self.tracker.skip_current_episodes()

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
        cfg, st = self.config, self.storage
        with self.metrics.log_time(("timers", "rollout")):
            self._rollout()
        with self.metrics.log_time(("timers", "learn")):
            self._learn()
        self.tracker.log_to(self.metrics)
        n = self.horizon * self.env.num_envs
        self.log_env_steps(n)
        self.metrics.log_value((LEARNER_RESULTS, ALL_MODULES, NUM_ENV_STEPS_TRAINED_LIFETIME), n,
                               reduce="lifetime_sum")
        self.metrics.log_value((LEARNER_RESULTS, ALL_MODULES, NUM_ENV_STEPS_TRAINED), n, reduce="sum")
        self.metrics.log_value(NUM_ENV_STEPS_TRAINED_LIFETIME, n, reduce="lifetime_sum")
        self.metrics.log_value((LEARNER_RESULTS, POLICY, "training_intensity"), cfg.num_epochs, window=1)

    @torch.no_grad()
    def _rollout(self) -> None:
        """T batched steps. Observation statistics stay frozen during the
        rollout (stored normalised obs are exactly what the policy saw) and
        absorb the whole rollout once at the end; episode accounting is also
        one batched update per rollout."""
        env, st, module, cfg = self.env, self.storage, self.module, self.config
        for t in range(self.horizon):
            if cfg.normalize_obs:
                st["raw_obs"][t].copy_(self.obs.reshape(self.obs.shape[0], -1))
            obs_n = self._normalize_obs(self.obs, update=False)
            action, logp = module.sample(obs_n)
            step = env.step(module.to_env_action(action))
            if step.valid is not None:
                self.any_invalid = True
                st["valid"][t].copy_(step.valid)
            else:
                st["valid"][t].fill_(True)
            st.insert(t, obs=obs_n, final_obs=self._normalize_obs(step.final_obs, update=False),
                      actions=action, logp=logp, rewards=step.reward, terminated=step.terminated,
                      done=step.terminated | step.truncated)
            self.obs = step.obs
        valid = st["valid"] if self.any_invalid else None
        self.tracker.update_batch(st["rewards"], st["done"], valid)
        if cfg.normalize_obs:
            module.obs_norm.update(st["raw_obs"], mask=valid)

    def _learn(self) -> None:
        cfg, st, module = self.config, self.storage, self.module
        T, N = self.horizon, self.env.num_envs
        B = T * N
        valid = st["valid"] if self.any_invalid else None
        with torch.no_grad():
            both = torch.cat([st.flat("obs"), st.flat("final_obs")])
            v_n = module.value(both).view(2, T, N)
            vnorm = module.value_norm
            values = vnorm.denormalize(v_n[0]) if cfg.normalize_values else v_n[0]
            next_values = vnorm.denormalize(v_n[1]) if cfg.normalize_values else v_n[1]
            adv, ret = compute_gae(st["rewards"], values, next_values, st["terminated"], st["done"],
                                   cfg.gamma, cfg.lambda_, valid)
            if cfg.normalize_values:
                vnorm.update(ret, mask=valid)
                targets = vnorm.normalize(ret).reshape(B)
                old_v = vnorm.normalize(values).reshape(B)
            else:
                targets, old_v = ret.reshape(B), values.reshape(B)
        obs, actions, old_logp = st.flat("obs"), st.flat("actions"), st.flat("logp")
        adv = adv.reshape(B)
        w = valid.reshape(B).float() if valid is not None else None
        mb = B // cfg.num_minibatches
        stats = torch.zeros(6, device=self.device)  # pg, vf, ent, kl, clipfrac, count
        for _ in range(cfg.num_epochs):
            perm = torch.randperm(B, device=self.device)
            epoch_kl = torch.zeros((), device=self.device)
            for i in range(cfg.num_minibatches):
                idx = perm[i * mb:(i + 1) * mb]
                wi = w[idx] if w is not None else None
                denom = wi.sum().clamp_min(1.0) if wi is not None else None
                logp, entropy = module.evaluate_actions(obs[idx], actions[idx])
                log_ratio = logp - old_logp[idx]
                ratio = log_ratio.exp()
                a = adv[idx]
                if cfg.normalize_advantages:
                    mean = _masked_mean(a, wi, denom)
                    std = _masked_mean((a - mean) ** 2, wi, denom).sqrt()
                    a = (a - mean) / (std + 1e-8)
                surr = torch.min(ratio * a, ratio.clamp(1 - cfg.clip_param, 1 + cfg.clip_param) * a)
                pg_loss = -_masked_mean(surr, wi, denom)
                v = module.value(obs[idx])
                vf = (v - targets[idx]) ** 2
                if cfg.vf_clip_param is not None:
                    v_clip = old_v[idx] + (v - old_v[idx]).clamp(-cfg.vf_clip_param, cfg.vf_clip_param)
                    vf = torch.max(vf, (v_clip - targets[idx]) ** 2)
                vf_loss = 0.5 * _masked_mean(vf, wi, denom)
                ent = _masked_mean(entropy, wi, denom)
                loss = pg_loss + cfg.vf_loss_coeff * vf_loss - cfg.entropy_coeff * ent
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                if cfg.grad_clip is not None:
                    torch.nn.utils.clip_grad_norm_(self.params, cfg.grad_clip, foreach=True)
                self.optimizer.step()
                with torch.no_grad():
                    kl = _masked_mean((ratio - 1) - log_ratio, wi, denom)
                    clipfrac = _masked_mean(((ratio - 1).abs() > cfg.clip_param).float(), wi, denom)
                    stats += torch.stack([pg_loss.detach(), vf_loss.detach(), ent.detach(), kl, clipfrac,
                                          torch.ones((), device=self.device)])
                    epoch_kl += kl
            if cfg.adaptive_lr_kl_target is not None:
                self._adapt_lr(float(epoch_kl) / cfg.num_minibatches)
        count = stats[5]
        for i, key in enumerate(("policy_loss", "vf_loss", "entropy", "mean_kl_loss", "clip_fraction")):
            self.metrics.log_value((LEARNER_RESULTS, POLICY, key), stats[i] / count, window=1)
        with torch.no_grad():
            var_t = targets.var()
            ev = 1 - (targets - old_v).var() / var_t.clamp_min(1e-8)
        self.metrics.log_value((LEARNER_RESULTS, POLICY, "vf_explained_var"), ev, window=1)
        self.metrics.log_value((LEARNER_RESULTS, POLICY, "curr_lr"), self.optimizer.param_groups[0]["lr"],
                               window=1)

    def _adapt_lr(self, kl: float) -> None:
        """KL-adaptive learning rate (as in rl_games/rsl_rl): shrink when the
        epoch's KL overshoots twice the target, grow when under half."""
        target = self.config.adaptive_lr_kl_target
        lo, hi = self.config.adaptive_lr_bounds
        for group in self.optimizer.param_groups:
            if kl > 2.0 * target:
                group["lr"] = max(lo, group["lr"] / 1.5)
            elif kl < 0.5 * target:
                group["lr"] = min(hi, group["lr"] * 1.5)
