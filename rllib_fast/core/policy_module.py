"""Inference RLModules for algorithms whose networks are plain torch modules.

FastDQN, the PQL family and the populations keep their networks as plain
``nn.Module``s (replay-based learners ship them between threads and actors as
tensor lists). ``algo.get_module()`` must still return an RLlib ``RLModule``
whose ``forward_inference({"obs": obs})`` acts as the algorithm does greedily,
so each of those families wraps its live networks in a subclass of
:class:`GreedyPolicyModule`: raw observations in, the greedy env action out
(observation normalisation and action scaling included), under
``Columns.ACTIONS`` as RLlib's DQN module returns it, plus
``Columns.ACTION_DIST_INPUTS`` whose deterministic sample is that same action
(Q-values for a Categorical, the env action for a Deterministic), as
``ActorCriticModule`` returns both.

The module is built from ``model_config`` alone (so ``RLModule.from_checkpoint``
can rebuild it); :func:`live_module` then swaps in the algorithm's own
networks, so the module follows training without copies.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Tuple

import gymnasium as gym
import torch
from ray.rllib.core.columns import Columns

from .rl_module_base import FastTorchRLModule


class GreedyPolicyModule(FastTorchRLModule):
    """Subclasses implement :meth:`greedy` (raw observations -> (env actions,
    action-distribution inputs or None)). The algorithm explores itself, so
    exploration and training forwards give the greedy action too."""

    def greedy(self, obs: torch.Tensor) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        raise NotImplementedError("abstract: GreedyPolicyModule.greedy")

    def _forward(self, batch: Dict[str, Any], **kwargs) -> Dict[str, Any]:
        actions, dist_inputs = self.greedy(batch[Columns.OBS])
        out = {Columns.ACTIONS: actions}
        if dist_inputs is not None:
            out[Columns.ACTION_DIST_INPUTS] = dist_inputs
        return out

    def _forward_inference(self, batch: Dict[str, Any], **kwargs) -> Dict[str, Any]:
        return self._forward(batch)

    def _forward_exploration(self, batch: Dict[str, Any], **kwargs) -> Dict[str, Any]:
        return self._forward(batch)

    def get_inference_action_dist_cls(self):
        from ray.rllib.models.torch.torch_distributions import TorchCategorical, TorchDeterministic

        return TorchCategorical if isinstance(self.action_space, gym.spaces.Discrete) else TorchDeterministic

    get_exploration_action_dist_cls = get_inference_action_dist_cls
    get_train_action_dist_cls = get_inference_action_dist_cls


def live_module(algo, key: tuple, build: Callable[[], GreedyPolicyModule],
                attach: Callable[[GreedyPolicyModule], None]) -> GreedyPolicyModule:
    """The algorithm's inference module, built once per set of live networks.

    ``key``: the live networks the module wraps (compared by identity, so a
    PBT rebuild that replaces the networks gets a new module) and plain
    values it was built for (compared by value, e.g. a member index). ``build`` runs
    under a forked torch RNG: its throw-away initialisation must not shift the
    algorithm's random stream (a resumed run must stay identical whether or
    not ``get_module()`` was called). ``attach`` puts the live networks in."""
    cached = getattr(algo, "greedy_module_cache", None)
    if cached is not None and len(cached[0]) == len(key) and all(a is b if isinstance(a, torch.nn.Module) else a == b
                                                                 for a, b in zip(cached[0], key)):
        return cached[1]
    with torch.random.fork_rng(devices=[]):
        module = build()
    attach(module)
    # no .eval(): the networks are shared with training; greedy() never depends on the mode
    module = module.to(algo.device)
    algo.greedy_module_cache = (key, module)
    return module
