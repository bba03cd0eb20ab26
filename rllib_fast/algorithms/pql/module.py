"""The inference RLModule of PQL, DDPGN and SACN: the Actor's policy with its
observation statistics and the action scaling, acting deterministically
(DDPG's tanh output, SAC's squashed mean) as evaluation does."""
from __future__ import annotations

import numpy as np
import torch

from ...core.normalize import RunningMeanStd
from ...core.policy_module import GreedyPolicyModule, live_module
from .components import normalize_obs
from .nets import build_policy


class PQLPolicyModule(GreedyPolicyModule):
    """``model_config``: policy_learner ('ddpg' | 'sac'), hidden_sizes,
    activation, sac_log_std_bounds, sac_init_alpha, obs_norm, obs_clip, layer_norm."""

    def setup(self) -> None:
        mc = dict(self.model_config)
        obs_dim = int(np.prod(self.observation_space.shape))
        act_dim = int(np.prod(self.action_space.shape))
        self.obs_norm, self.obs_clip = bool(mc["obs_norm"]), float(mc["obs_clip"])
        self.policy = build_policy(mc["policy_learner"], obs_dim, act_dim, list(mc["hidden_sizes"]), mc["activation"],
                                   tuple(mc["sac_log_std_bounds"]), float(mc["sac_init_alpha"]),
                                   bool(mc.get("layer_norm", False)))
        self.rms = RunningMeanStd((obs_dim,), clip=self.obs_clip)
        self.register_buffer("act_low", torch.as_tensor(self.action_space.low, dtype=torch.float32).reshape(-1))
        self.register_buffer("act_high", torch.as_tensor(self.action_space.high, dtype=torch.float32).reshape(-1))

    def greedy(self, obs: torch.Tensor):
        x = obs.reshape(obs.shape[0], -1).float()
        if self.obs_norm:  # the formula the Actor uses (components.normalize_obs), for identical actions
            x = normalize_obs(x, (self.rms.mean, self.rms.var), self.obs_clip)
        a = self.policy.act(x, deterministic=True)
        env_a = self.act_low + (a.clamp(-1.0, 1.0) + 1.0) * 0.5 * (self.act_high - self.act_low)
        env_a = env_a.reshape(obs.shape[0], *self.action_space.shape)
        return env_a, env_a


def pql_policy_module(algo) -> PQLPolicyModule:
    """The live greedy module of a PQL-family algorithm (shares the Actor's
    policy and observation statistics)."""
    cfg, env, actor = algo.config, algo.env, algo.actor

    def build():
        mc = {"policy_learner": cfg.policy_learner, "hidden_sizes": list(cfg.resolved_hidden(algo.dims.obs_dim)),
              "activation": cfg.activation, "sac_log_std_bounds": list(cfg.sac_log_std_bounds),
              "sac_init_alpha": cfg.sac_init_alpha, "obs_norm": cfg.obs_norm, "obs_clip": cfg.obs_clip,
              "layer_norm": cfg.layer_norm}
        return PQLPolicyModule(observation_space=env.single_observation_space, action_space=env.single_action_space,
                               inference_only=True, model_config=mc)

    def attach(m):
        m.policy, m.rms = actor.policy, actor.rms

    return live_module(algo, (actor.policy, actor.rms), build, attach)
