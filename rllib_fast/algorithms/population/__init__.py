"""Vectorised populations (Flajolet et al., ICML 2022): PopTD3, PopSAC, PopDQN,
CEM-RL and DvD — K agents as one stacked network in one trial, with
per-member hyperparameters, RNG streams and replay, and in-trial PBT."""
from .cemrl import CEMRL
from .config import CEMRLConfig, DvDConfig, PopDQNConfig, PopSACConfig, PopTD3Config, PopulationConfig
from .dqn import PopDQN
from .dvd import DvD
from .sac import PopSAC
from .td3 import PopTD3

__all__ = ["PopTD3", "PopTD3Config", "PopSAC", "PopSACConfig", "PopDQN", "PopDQNConfig", "CEMRL", "CEMRLConfig",
           "DvD", "DvDConfig", "PopulationConfig"]

ALGORITHMS = {"PopTD3": PopTD3, "PopSAC": PopSAC, "PopDQN": PopDQN, "CEMRL": CEMRL, "DvD": DvD}
CONFIGS = {"PopTD3": PopTD3Config, "PopSAC": PopSACConfig, "PopDQN": PopDQNConfig, "CEMRL": CEMRLConfig,
           "DvD": DvDConfig}
