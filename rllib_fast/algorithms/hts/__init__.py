"""HTS-RL (Liu, Yeh & Schwing, NeurIPS 2020): HTSPPO and HTSA2C.

Executors step groups of env slots and sample actions with their own RNG
streams, actors run batched inference on whatever observations are ready,
and the learner consumes one rollout storage while executors fill the other;
batch synchronisation every ``sync_interval`` (alpha) steps keeps the policy
lag at exactly one. See ``docs/hts.md``.
"""
from .algorithm import HTSA2C, HTSPPO
from .config import HTSA2CConfig, HTSPPOConfig

__all__ = ["HTSPPO", "HTSA2C", "HTSPPOConfig", "HTSA2CConfig"]

ALGORITHMS = {"HTSPPO": HTSPPO, "HTSA2C": HTSA2C}
CONFIGS = {"HTSPPO": HTSPPOConfig, "HTSA2C": HTSA2CConfig}
