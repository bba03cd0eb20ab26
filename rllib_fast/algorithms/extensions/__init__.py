"""Optional extensions an on-policy algorithm holds as components (rsl_rl's
pattern: ``self.symmetry = Symmetry(...) if cfg else None`` ... ``if
self.symmetry: ...``): symmetry augmentation and mirror loss
(:mod:`.symmetry`), random network distillation curiosity (:mod:`.rnd`).
Each is one config key of FastPPO (a dict of its settings) and one file."""
from .rnd import RandomNetworkDistillation
from .symmetry import Symmetry, cartpole_mirror, pendulum_mirror

__all__ = ["RandomNetworkDistillation", "Symmetry", "cartpole_mirror", "pendulum_mirror"]
