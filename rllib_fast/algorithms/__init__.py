"""Algorithm name -> class, registered with Tune by :func:`rllib_fast.register`."""
from .a2c import FastA2C, FastA2CConfig
from .dqn import EpsRainbow, EpsRainbowConfig, FastDQN, FastDQNConfig, Rainbow, RainbowConfig
from .ppo import FastPPO, FastPPOConfig

ALGORITHMS = {"FastPPO": FastPPO, "FastA2C": FastA2C, "FastDQN": FastDQN, "Rainbow": Rainbow, "EpsRainbow": EpsRainbow}
CONFIGS = {"FastPPO": FastPPOConfig, "FastA2C": FastA2CConfig, "FastDQN": FastDQNConfig, "Rainbow": RainbowConfig,
           "EpsRainbow": EpsRainbowConfig}
