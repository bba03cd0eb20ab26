"""FastDQN's inference RLModule: the online Q-network, greedy (argmax over
Q; noisy layers on their means, as evaluation acts)."""
from __future__ import annotations

from typing import Any, Dict

import gymnasium as gym
import torch

from ...core.policy_module import GreedyPolicyModule, live_module
from ...core.qnets import QNetwork


class QPolicyModule(GreedyPolicyModule):
    """``model_config``: the ``QNetwork`` keyword arguments (trunk, hidden_sizes,
    activation, dueling, num_atoms, noisy, sigma0, v_min, v_max)."""

    def setup(self) -> None:
        if not isinstance(self.action_space, gym.spaces.Discrete):
            raise TypeError(f"QPolicyModule needs a Discrete action space, got {self.action_space}")
        self.q = QNetwork(tuple(self.observation_space.shape), int(self.action_space.n), **dict(self.model_config))

    def greedy(self, obs: torch.Tensor):
        q = self.q(obs, noise=False)
        return q.argmax(-1), q


def q_model_config(cfg) -> Dict[str, Any]:
    return {"trunk": cfg.trunk, "hidden_sizes": list(cfg.hidden_sizes), "activation": cfg.activation,
            "dueling": cfg.dueling, "num_atoms": cfg.num_atoms, "noisy": cfg.noisy, "sigma0": cfg.noisy_sigma0,
            "v_min": cfg.v_min, "v_max": cfg.v_max}


def dqn_policy_module(algo) -> QPolicyModule:
    """The live greedy module of a FastDQN (shares ``algo.module``)."""
    env = algo.env

    def build():
        return QPolicyModule(observation_space=env.single_observation_space, action_space=env.single_action_space,
                             inference_only=True, model_config=q_model_config(algo.config))

    def attach(m):
        m.q = algo.module

    return live_module(algo, (algo.module,), build, attach)
