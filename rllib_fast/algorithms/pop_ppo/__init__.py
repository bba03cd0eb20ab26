"""PopPPO (and PopA2C): a PBT population of K PPO agents that share one batched
simulator — stacked actor-critics (``core/stacked.py``), per-member
hyperparameter tensors and in-trial PBT (``algorithms/population``), FastPPO's
semantics per member. See ``docs/population.md``."""
from .algorithm import PopA2C, PopPPO
from .config import PopA2CConfig, PopPPOConfig

__all__ = ["PopPPO", "PopPPOConfig", "PopA2C", "PopA2CConfig"]

ALGORITHMS = {"PopPPO": PopPPO, "PopA2C": PopA2C}
CONFIGS = {"PopPPO": PopPPOConfig, "PopA2C": PopA2CConfig}
