"""Algorithm name -> class, registered with Tune by :func:`rllib_fast.register`.

Each algorithm family is a subpackage that exports two dicts, ``ALGORITHMS``
(name -> ``FastAlgorithm`` subclass) and ``CONFIGS`` (name -> config class).
They are merged here in a fixed order, so a new family is one import plus one
entry in ``_FAMILIES``, and a name claimed twice is an error rather than a
silent override.
"""
from . import a2c, appo, distillation, dqn, hts, pop_ppo, population, ppo, pql

_FAMILIES = (ppo, a2c, dqn, appo, pql, hts, population, pop_ppo, distillation)

ALGORITHMS: dict = {}
CONFIGS: dict = {}

for _family in _FAMILIES:
    for _name, _cls in _family.ALGORITHMS.items():
        if _name in ALGORITHMS:
            raise RuntimeError(f"algorithm name {_name!r} registered by two families")
        ALGORITHMS[_name] = _cls
    CONFIGS.update(_family.CONFIGS)

# ``from rllib_fast.algorithms import FastPPO`` works for every family
from .a2c import FastA2C, FastA2CConfig  # noqa: E402
from .appo import FastA3C, FastA3CConfig, FastAPPO, FastAPPOConfig  # noqa: E402
from .distillation import Distillation, DistillationConfig  # noqa: E402
from .dqn import EpsRainbow, EpsRainbowConfig, FastDQN, FastDQNConfig, Rainbow, RainbowConfig  # noqa: E402
from .hts import HTSA2C, HTSA2CConfig, HTSPPO, HTSPPOConfig  # noqa: E402
from .population import (CEMRL, CEMRLConfig, DvD, DvDConfig, PopDQN, PopDQNConfig, PopSAC,  # noqa: E402
                         PopSACConfig, PopTD3, PopTD3Config)
from .pop_ppo import PopA2C, PopA2CConfig, PopPPO, PopPPOConfig  # noqa: E402
from .ppo import FastPPO, FastPPOConfig  # noqa: E402
from .pql import DDPGN, DDPGNConfig, PQL, PQLConfig, SACN, SACNConfig  # noqa: E402

__all__ = [
    "ALGORITHMS", "CONFIGS",
    "CEMRL", "CEMRLConfig", "DDPGN", "DDPGNConfig", "Distillation", "DistillationConfig", "DvD", "DvDConfig",
    "EpsRainbow", "EpsRainbowConfig",
    "FastA2C", "FastA2CConfig", "FastA3C", "FastA3CConfig", "FastAPPO", "FastAPPOConfig", "FastDQN",
    "FastDQNConfig", "FastPPO", "FastPPOConfig", "HTSA2C", "HTSA2CConfig", "HTSPPO", "HTSPPOConfig", "PQL",
    "PQLConfig", "PopA2C", "PopA2CConfig", "PopDQN", "PopDQNConfig", "PopPPO", "PopPPOConfig", "PopSAC",
    "PopSACConfig", "PopTD3", "PopTD3Config", "Rainbow",
    "RainbowConfig", "SACN", "SACNConfig",
]
