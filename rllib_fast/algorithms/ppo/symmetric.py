"""PPO's minibatch loss with FastPPO's symmetry extension
(:mod:`..extensions.symmetry`): rsl_rl's augmented minibatch and mirror loss
on top of the plain :func:`.loss.ppo_loss`."""
from __future__ import annotations

from typing import Optional

import torch

from ..onpolicy.batch import OnPolicyBatch
from ..onpolicy.reductions import standardize
from .loss import PPOLossTerms, approx_kl, ppo_loss


def symmetric_ppo_loss(rule, batch: OnPolicyBatch, idx: torch.Tensor, denom: Optional[torch.Tensor]) -> PPOLossTerms:
    """The PPO loss of minibatch ``idx`` with its mirrors (``rule``: the
    ``PPOUpdate`` holding the ``symmetry``).

    With ``use_data_augmentation`` the ``m`` originals are followed by their
    ``k * m`` mirrors; log-probabilities and values are computed on all rows,
    while the behaviour log-probabilities, advantages (standardised over the
    originals first, as rsl_rl does), value targets and old values are the
    originals' repeated. Entropy and the KL statistic (what the adaptive lr
    reads) are the originals'. The mirror loss is added with its coefficient
    when ``use_mirror_loss``, else only logged."""
    s, module, sym = rule.settings, rule.module, rule.symmetry
    mirrored = batch.mirrored
    B, m = batch.advantages.shape[0], idx.shape[0]
    k = sym.copies(mirrored, B)
    rows = sym.mirror_rows(idx, B, k)
    w = batch.weights
    wi = w[idx] if w is not None else None
    adv = batch.advantages[idx]
    if s.normalize_advantages and s.normalize_advantages_over == "minibatch":
        adv = standardize(adv, wi, rule.learners.sum_)
    obs, actions, critic_in = batch.obs[idx], batch.actions[idx], batch.critic_in[idx]
    rep = 1
    if sym.settings.use_data_augmentation:
        obs, actions, critic_in = sym.augment(obs, actions, critic_in, mirrored, rows)
        rep = k + 1

    def repeated(x):
        return None if x is None else x.repeat(rep)

    logp, entropy = module.evaluate_actions(obs, actions)
    v = module.value(critic_in)
    kl_old = None if batch.kl_logp is None else batch.kl_logp[idx]
    terms = ppo_loss(logp, entropy[:m].repeat(rep), repeated(batch.logp[idx]), repeated(adv), v,
                     repeated(batch.value_targets[idx]), repeated(batch.old_values[idx]),
                     clip_param=s.clip_param, vf_clip_param=s.vf_clip_param, vf_loss_coeff=s.vf_loss_coeff,
                     entropy_coeff=s.entropy_coeff, w=repeated(wi), denom=None if denom is None else denom * rep,
                     kl_old_logp=repeated(kl_old), smooth_clip=s.surrogate_clip == "smooth")
    with torch.no_grad():
        log_ratio = logp[:m].detach() - (batch.logp[idx] if kl_old is None else kl_old)
        kl = approx_kl(log_ratio.exp(), log_ratio, wi, denom)
    mirror = sym.mirror_loss(module, batch.obs[idx], mirrored.obs[rows])
    loss = terms.loss + sym.settings.mirror_loss_coeff * mirror if sym.settings.use_mirror_loss else terms.loss
    stats = torch.cat([terms.stats[:3], kl.reshape(1), terms.stats[4:]])
    return PPOLossTerms(loss, stats)
