"""FastPPO's symmetry extension (:mod:`..extensions.symmetry`) for a population:
the same mirrored transitions, augmented minibatches and mirror loss, with the
member axis in front.

PopPPO's data is member-major (``[K, B, ...]``: member k's own transitions).
The user's ``mirror_fn`` sees flat ``[K * B, ...]`` rows, as FastPPO's does;
its ``k`` copies come back copy by copy and are laid out per member here,
``[K, k * B, ...]`` (member j's rows ``c*B .. (c+1)*B-1`` are copy ``c`` of its
own transitions), so :meth:`Symmetry.mirror_rows` picks a minibatch's mirrors
for every member at once. Each member's mirrors are normalised with that
member's frozen rollout statistics, and each member's loss is its own
(``[K]``): summed for the step, member j's parameters get only member j's
augmented PPO loss and mirror loss.
"""
from __future__ import annotations

from typing import Any, Dict, Optional

import torch
from torch.nn import functional as F

from ..extensions.symmetry import MirroredBatch, Symmetry
from ..onpolicy.reductions import standardize
from ..ppo.loss import PPOLossTerms, approx_kl, ppo_loss


def mirror_members(sym: Symmetry, **tensors: Optional[torch.Tensor]) -> Dict[str, torch.Tensor]:
    """Each given member-major tensor ``[K, B, ...]`` (keywords ``obs``, ``actions``,
    ``states``) mirrored by one call of the user's function on its flat rows, back as
    ``[K, k * B, ...]`` (each member's copies, copy by copy)."""
    given = {name: x for name, x in tensors.items() if x is not None}
    K, B = next(iter(given.values())).shape[:2]
    flat = {name: x.reshape(K * B, *x.shape[2:]) for name, x in given.items()}
    out = dict(zip(("obs", "actions", "states"), sym.mirror(**flat)))
    result = {}
    for name, x in given.items():
        m = out[name]
        k = m.shape[0] // (K * B)
        result[name] = m.reshape(k, K, B, *m.shape[1:]).transpose(0, 1).reshape(K, k * B, *m.shape[1:])
    return result


@torch.no_grad()
def mirror_member_batch(sym: Symmetry, raw_obs: torch.Tensor, actions: torch.Tensor, normalize_obs: bool,
                        critic_in: Optional[torch.Tensor] = None) -> MirroredBatch:
    """The population's mirrored rollout, member-major ``[K, k * B, ...]``: raw
    observations ``[K, B, D]`` and ``actions`` mirrored, the observations normalised
    with each member's frozen rollout statistics; ``critic_in``: the mirrored
    critic inputs when the critic reads states (None: the mirrored observations)."""
    m = mirror_members(sym, obs=raw_obs, actions=actions)
    if m["actions"].shape[1] != m["obs"].shape[1]:
        raise ValueError("symmetry.mirror_fn returned a different number of copies for obs and actions")
    obs = m["obs"].float()
    obs_n = sym.normalize_like_rollout(obs) if normalize_obs else obs
    return MirroredBatch(obs_n, m["actions"].to(actions.dtype), obs_n if critic_in is None else critic_in)


def member_mirror_loss(sym: Symmetry, module, obs_n: torch.Tensor, mirrored_obs_n: torch.Tensor) -> torch.Tensor:
    """Each member's ``MSE(pi(mirror(o)), mirror(pi(o)).detach())`` (``[K]``):
    :meth:`Symmetry.mirror_loss` per member, on ``obs_n [K, m, D]`` and their
    mirrors ``[K, k * m, D]``; detached unless ``use_mirror_loss``; recorded
    (the members' mean) for the update's report."""
    K, m = obs_n.shape[:2]
    k = mirrored_obs_n.shape[1] // m
    p_orig, _ = module.dist_params(obs_n)
    p_mirr, _ = module.dist_params(mirrored_obs_n)
    if sym.discrete:
        probs, probs_m = F.softmax(p_orig, -1), F.softmax(p_mirr, -1)
        n = probs.shape[-1]
        perm = sym.action_permutation(p_orig.device, k)          # [k, n]
        target = torch.empty_like(probs_m).view(K, k, m, n)
        target.scatter_(-1, perm[None, :, None, :].expand(K, k, m, n), probs.detach()[:, None].expand(K, k, m, n))
        diff = probs_m - target.view(K, k * m, n)
    else:
        diff = p_mirr - mirror_members(sym, actions=p_orig.detach())["actions"]
    loss = diff.pow(2).mean(dim=(1, 2))
    sym.record_loss(loss)
    return loss if sym.settings.use_mirror_loss else loss.detach()


def symmetric_member_loss(sym: Symmetry, module, hp: Dict[str, torch.Tensor], cfg: Any, idx: torch.Tensor,
                          obs, actions, old_logp, adv, targets, old_v, critic_in, w,
                          mirrored: MirroredBatch):
    """Every member's PPO loss on its minibatch ``idx`` with its mirrors (``[K]``
    losses, ``[5, K]`` statistics): FastPPO's ``symmetric_ppo_loss`` per member.

    With ``use_data_augmentation`` each member's ``m`` originals are followed by
    their ``k * m`` mirrors; log-probabilities and values are computed on all
    rows, the behaviour log-probabilities, advantages (standardised over the
    originals first), value targets, old values and weights are the originals'
    repeated. Entropy and the KL (what the adaptive lr reads) are the
    originals'. The mirror loss joins with its coefficient when
    ``use_mirror_loss``, else it is only logged."""
    B, m = adv.shape[1], idx.shape[0]
    k = mirrored.obs.shape[1] // B
    rows = Symmetry.mirror_rows(idx, B, k)
    wi = w[:, idx] if w is not None else None
    denom = wi.sum(-1).clamp_min(1.0) if wi is not None else None
    a = adv[:, idx]
    if cfg.normalize_advantages:
        a = standardize(a, wi, dim=-1)
    o, act, c = obs[:, idx], actions[:, idx], critic_in[:, idx]
    rep = 1
    if sym.settings.use_data_augmentation:
        o = torch.cat([o, mirrored.obs[:, rows]], 1)
        act = torch.cat([act, mirrored.actions[:, rows]], 1)
        c = torch.cat([c, mirrored.critic_in[:, rows]], 1)
        rep = k + 1

    def repeated(x: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
        return None if x is None else x.repeat(1, rep)

    logp, entropy = module.evaluate_actions(o, act)
    v = module.value(c)
    terms = ppo_loss(logp, entropy[:, :m].repeat(1, rep), repeated(old_logp[:, idx]), repeated(a), v,
                     repeated(targets[:, idx]), repeated(old_v[:, idx]), clip_param=hp["clip_param"].unsqueeze(1),
                     vf_clip_param=cfg.vf_clip_param, vf_loss_coeff=hp["vf_loss_coeff"],
                     entropy_coeff=hp["entropy_coeff"], w=repeated(wi), denom=None if denom is None else denom * rep,
                     dim=-1)
    with torch.no_grad():
        log_ratio = logp[:, :m].detach() - old_logp[:, idx]
        kl = approx_kl(log_ratio.exp(), log_ratio, wi, denom, dim=-1)
    mirror = member_mirror_loss(sym, module, obs[:, idx], mirrored.obs[:, rows])
    loss = terms.loss + sym.settings.mirror_loss_coeff * mirror if sym.settings.use_mirror_loss else terms.loss
    return PPOLossTerms(loss, torch.cat([terms.stats[:3], kl.unsqueeze(0), terms.stats[4:]]))

