"""PQL family: Parallel Q-Learning (concurrent Actor, V-learner, P-learner;
thread or Ray back-end) and its sequential baselines DDPG(n) and SAC(n)."""
from .algorithm import DDPGN, PQL, SACN
from .config import DDPGNConfig, PQLConfig, SACNConfig

__all__ = ["PQL", "PQLConfig", "DDPGN", "DDPGNConfig", "SACN", "SACNConfig"]

ALGORITHMS = {"PQL": PQL, "DDPGN": DDPGN, "SACN": SACN}
CONFIGS = {"PQL": PQLConfig, "DDPGN": DDPGNConfig, "SACN": SACNConfig}
