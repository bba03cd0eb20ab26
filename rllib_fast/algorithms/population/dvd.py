"""DvD-TD3: a TD3 population with a shared critic and a joint diversity loss.

Diversity via Determinants (Parker-Holder et al. 2020) as used by Flajolet et
al. §5.3: the embedding of member m is its actions on one shared batch of
observations; the population's diversity is the log-determinant of the RBF
kernel matrix ``K_ij = exp(-|e_i - e_j|^2 / (2 * scale))`` of these
embeddings. The policy loss is ``sum_m L_m(theta_m) - w_t * log det(K)``: the
second term depends on *all* policies, so gradients couple members (a
per-member vmapped loss would be wrong). The weight ``w_t``
follows a schedule over total env steps instead of the original bandit.

Numerical stability (the authors' code "sometimes crashes early on due to
NaNs"): a jitter is added to the diagonal and the log-det is computed from a
Cholesky factor (``2 * sum log diag L``), which is finite for any set of
embeddings because ``K + jitter*I`` is positive definite.
"""
from __future__ import annotations

import bisect
from typing import Optional

import torch

from .config import DvDConfig
from .td3 import PopTD3


def rbf_logdet(emb: torch.Tensor, scale: float, jitter: float) -> torch.Tensor:
    """log det(exp(-D / (2 scale)) + jitter I) for ``[K, E]`` embeddings."""
    sq = emb.square().sum(1)
    d = (sq.unsqueeze(1) + sq.unsqueeze(0) - 2 * emb @ emb.t()).clamp_min(0.0)
    kmat = torch.exp(-d / (2 * scale)) + jitter * torch.eye(emb.shape[0], device=emb.device, dtype=emb.dtype)
    chol = torch.linalg.cholesky(kmat)
    return 2 * torch.log(torch.diagonal(chol)).sum()


class DvD(PopTD3):
    shared_critic = True

    @classmethod
    def get_default_config(cls) -> DvDConfig:
        return DvDConfig()

    def build_learner(self) -> None:
        super().build_learner()
        self.div_weight = torch.zeros((), device=self.device)   # a tensor: schedule changes never recompile
        self.last_logdet: Optional[torch.Tensor] = None          # the last update's diversity, for the report

    def diversity_weight(self) -> float:
        sched = sorted((float(s), float(w)) for s, w in self.config.dvd_weight_schedule)
        i = bisect.bisect_right([s for s, _ in sched], self.env_steps) - 1
        return sched[i][1] if i >= 0 else 0.0

    def run_updates(self, n_updates: int) -> None:
        self.div_weight.fill_(self.diversity_weight())
        super().run_updates(n_updates)

    def update_step(self) -> None:
        """TD3's update with the population's diversity as an extra policy loss term."""
        batch, noise = self.sample_batch()
        self.td3_step(batch, noise, extra_policy_loss=-self.div_weight * self.diversity_logdet())

    def diversity_logdet(self) -> torch.Tensor:
        """log det of the RBF kernel of the members' actions on shared states
        (DvD's population diversity; kept as ``last_logdet`` for the report)."""
        cfg = self.config
        obs = self.replay.sample_obs(cfg.dvd_embedding_batch, self.rng)
        emb = self.pi(self.actor, obs.unsqueeze(0).expand(self.K, *obs.shape)).reshape(self.K, -1)
        self.last_logdet = rbf_logdet(emb, cfg.dvd_rbf_scale, cfg.dvd_jitter)
        return self.last_logdet

    def _report(self, n_updates) -> None:
        super()._report(n_updates)
        self.metrics.log_value(("population", "diversity_weight"), self.diversity_weight(), window=1)
        if self.last_logdet is not None:
            self.metrics.log_value(("population", "diversity_logdet"), self.last_logdet.detach(), window=1)
