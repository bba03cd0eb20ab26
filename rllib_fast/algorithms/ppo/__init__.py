"""FastPPO: synchronous batched-inference PPO (Stooke & Abbeel)."""
from .algorithm import FastPPO
from .config import FastPPOConfig
from ..actor_critic import FastPPOModule

__all__ = ["FastPPO", "FastPPOConfig", "FastPPOModule"]

ALGORITHMS = {"FastPPO": FastPPO}
CONFIGS = {"FastPPO": FastPPOConfig}
