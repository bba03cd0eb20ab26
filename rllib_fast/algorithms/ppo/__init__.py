"""FastPPO: synchronous batched-inference PPO (Stooke & Abbeel)."""
from .algorithm import FastPPO
from .config import FastPPOConfig
from .module import FastPPOModule

__all__ = ["FastPPO", "FastPPOConfig", "FastPPOModule"]
