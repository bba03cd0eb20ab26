"""Algorithm name -> class, registered with Tune by :func:`rllib_fast.register`."""
from .ppo import FastPPO, FastPPOConfig

ALGORITHMS = {"FastPPO": FastPPO}
CONFIGS = {"FastPPO": FastPPOConfig}
