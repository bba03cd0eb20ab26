"""Distillation: DAgger-style student-teacher behaviour cloning (rsl_rl's ``Distillation``)."""
from .algorithm import Distillation
from .config import DistillationConfig

__all__ = ["Distillation", "DistillationConfig"]

ALGORITHMS = {"Distillation": Distillation}
CONFIGS = {"Distillation": DistillationConfig}
