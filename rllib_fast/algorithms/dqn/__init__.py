"""Batched-inference DQN family: FastDQN (components switchable), Rainbow, EpsRainbow."""
from .algorithm import EpsRainbow, FastDQN, Rainbow
from .config import EpsRainbowConfig, FastDQNConfig, RainbowConfig

__all__ = ["FastDQN", "FastDQNConfig", "Rainbow", "RainbowConfig", "EpsRainbow", "EpsRainbowConfig"]

ALGORITHMS = {"FastDQN": FastDQN, "Rainbow": Rainbow, "EpsRainbow": EpsRainbow}
CONFIGS = {"FastDQN": FastDQNConfig, "Rainbow": RainbowConfig, "EpsRainbow": EpsRainbowConfig}
