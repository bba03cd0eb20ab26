"""Algorithm name -> class, registered with Tune by :func:`rllib_fast.register`."""
from .dqn import EpsRainbow, EpsRainbowConfig, FastDQN, FastDQNConfig, Rainbow, RainbowConfig
from .ppo import FastPPO, FastPPOConfig

ALGORITHMS = {"FastPPO": FastPPO, "FastDQN": FastDQN, "Rainbow": Rainbow, "EpsRainbow": EpsRainbow}
CONFIGS = {"FastPPO": FastPPOConfig, "FastDQN": FastDQNConfig, "Rainbow": RainbowConfig,
           "EpsRainbow": EpsRainbowConfig}
