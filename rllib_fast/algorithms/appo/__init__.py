"""Asynchronous learners of Stooke & Abbeel §4.3: FastAPPO and FastA3C."""
from .algorithm import FastA3C, FastAPPO
from .config import FastA3CConfig, FastAPPOConfig

__all__ = ["FastAPPO", "FastAPPOConfig", "FastA3C", "FastA3CConfig"]

ALGORITHMS = {"FastAPPO": FastAPPO, "FastA3C": FastA3C}
CONFIGS = {"FastAPPO": FastAPPOConfig, "FastA3C": FastA3CConfig}
