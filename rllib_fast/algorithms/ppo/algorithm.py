"""FastPPO: synchronous batched-inference PPO on a tensor vector env.

Reads top to bottom like a single-file PPO: rollout (one batched forward for
all N envs per step, written into preallocated ``[T, N]`` storage), targets
(one batched critic pass over observations and ``final_obs``, then GAE with
time-out bootstrapping), and minibatch epochs of the clipped surrogate with
value clipping. Rollout and targets are the on-policy loop
(``OnPolicyAlgorithm.training_step`` in :mod:`..onpolicy`); this file is the
update, :class:`PPOUpdate`, which HTSPPO and every FastAPPO learner compose in
too. Everything stays on the env's device; the only host syncs are the
adaptive-KL lr step (once per epoch, when enabled) and RLlib's metric
reduction at the end of an iteration.
"""
from __future__ import annotations

import torch

from ..onpolicy import OnPolicyAlgorithm, Targets, UpdateRule, masked_mean, standardize
from .config import FastPPOConfig



class PPOUpdate(UpdateRule):
    """PPO's learning phase: ``num_epochs`` passes of ``num_minibatches``
    clipped-surrogate steps (value loss optionally clipped), the lr adapted
    to the epoch's KL when ``adaptive_lr_kl_target`` is set. Composed into
    FastPPO, HTSPPO and every FastAPPO learner."""

    def make_optimizer(self, params) -> torch.optim.Optimizer:
        # fused Adam: one kernel for all parameters instead of ~12 per tensor
        return torch.optim.Adam(params, lr=self.algo.configured_lr(), eps=1e-5, fused=True)

    def training_intensity(self) -> float:
        return float(self.algo.config.num_epochs)

    def learn(self, batch: Targets) -> None:
        algo = self.algo
        cfg, st, device = algo.config, algo.storage, algo.device
        B = algo.horizon * algo.env.num_envs
        adv, targets, old_v, w = batch
        obs, actions, old_logp = st.flat("obs"), st.flat("actions"), st.flat("logp")
        critic_in = st.flat(algo.critic_key)   # the observations, or the source's states (asymmetric)
        mb = B // cfg.num_minibatches
        stats = torch.zeros(6, device=device)  # pg, vf, ent, kl, clipfrac, count
        for _ in range(cfg.num_epochs):
            perm = torch.randperm(B, device=device, generator=algo.shuffle_generator)
            epoch_kl = torch.zeros((), device=device)
            for i in range(cfg.num_minibatches):
                idx = perm[i * mb:(i + 1) * mb]
                # global masked means across data-parallel learners (one all-reduce, outside the compiled step)
                denom = algo.mean_denominator(w[idx] if w is not None else None, mb)
                loss, mstats = algo.update_step(idx, obs, actions, old_logp, adv, targets, old_v, critic_in, w,
                                               denom)
                algo.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                self.apply_gradients()
                with torch.no_grad():
                    stats[:5] += mstats
                    stats[5] += 1
                    epoch_kl += mstats[3]
            if cfg.adaptive_lr_kl_target is not None:
                if algo.dist is not None:
                    algo.dist.mean_(epoch_kl)  # every learner adapts lr from the same KL
                self._adapt_lr(float(epoch_kl) / cfg.num_minibatches)
        count = stats[5]
        log = algo.log_learner
        for i, key in enumerate(("policy_loss", "vf_loss", "entropy", "mean_kl_loss", "clip_fraction")):
            log(key, stats[i] / count)
        with torch.no_grad():
            var_t = targets.var()
            ev = 1 - (targets - old_v).var() / var_t.clamp_min(1e-8)
        log("vf_explained_var", ev)
        log("curr_lr", algo.optimizer.param_groups[0]["lr"])

    def loss(self, idx, obs, actions, old_logp, adv, targets, old_v, critic_in, w, denom):
        """One minibatch's clipped-surrogate loss and its (policy loss, value
        loss, entropy, KL, clip fraction); the update step's part that
        ``compile`` compiles (minibatch shapes are fixed)."""
        algo = self.algo
        cfg, module = algo.config, algo.module
        wi = w[idx] if w is not None else None
        logp, entropy = module.evaluate_actions(obs[idx], actions[idx])
        log_ratio = logp - old_logp[idx]
        ratio = log_ratio.exp()
        a = adv[idx]
        if cfg.normalize_advantages:
            a = standardize(a, wi, algo.reduce_over_learners)
        surr = torch.min(ratio * a, ratio.clamp(1 - cfg.clip_param, 1 + cfg.clip_param) * a)
        pg_loss = -masked_mean(surr, wi, denom)
        v = module.value(critic_in[idx])
        vf = (v - targets[idx]) ** 2
        if cfg.vf_clip_param is not None:
            v_clip = old_v[idx] + (v - old_v[idx]).clamp(-cfg.vf_clip_param, cfg.vf_clip_param)
            vf = torch.max(vf, (v_clip - targets[idx]) ** 2)
        vf_loss = 0.5 * masked_mean(vf, wi, denom)
        ent = masked_mean(entropy, wi, denom)
        loss = pg_loss + cfg.vf_loss_coeff * vf_loss - cfg.entropy_coeff * ent
        ratio_d, log_ratio_d = ratio.detach(), log_ratio.detach()
        kl = masked_mean((ratio_d - 1) - log_ratio_d, wi, denom)
        clipfrac = masked_mean(((ratio_d - 1).abs() > cfg.clip_param).float(), wi, denom)
        return loss, torch.stack([pg_loss.detach(), vf_loss.detach(), ent.detach(), kl, clipfrac])

    def _adapt_lr(self, kl: float) -> None:
        """KL-adaptive learning rate (as in rl_games/rsl_rl): shrink when the
        epoch's KL overshoots twice the target, grow when under half."""
        cfg = self.algo.config
        target = cfg.adaptive_lr_kl_target
        lo, hi = cfg.adaptive_lr_bounds
        for group in self.algo.optimizer.param_groups:
            if kl > 2.0 * target:
                group["lr"] = max(lo, group["lr"] / 1.5)
            elif kl < 0.5 * target:
                group["lr"] = min(hi, group["lr"] * 1.5)


class FastPPO(OnPolicyAlgorithm):
    """Synchronous batched PPO: the on-policy loop with PPO's update."""

    UPDATE = PPOUpdate

    @classmethod
    def get_default_config(cls) -> FastPPOConfig:
        return FastPPOConfig()
