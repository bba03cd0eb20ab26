"""FastA2C: batched synchronous A2C (Stooke & Abbeel)."""
from .algorithm import FastA2C
from .config import FastA2CConfig

__all__ = ["FastA2C", "FastA2CConfig"]

ALGORITHMS = {"FastA2C": FastA2C}
CONFIGS = {"FastA2C": FastA2CConfig}
