"""The actor-critic policy of the on-policy algorithms (FastPPO, FastA2C): an RLModule (so ``algo.get_module()`` and RLlib-style
inference work) whose hot-path methods are plain tensor functions.

The observation and value normalisers are buffers of this module, so a policy
restored from a checkpoint normalises exactly as in training. Continuous
actions are produced in [-1, 1] units and mapped affinely to the env's bounds
(then clipped), so one initial std suits every task.
"""
from __future__ import annotations

import math
from typing import Any, Dict, Optional, Tuple

import gymnasium as gym
import numpy as np
import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.apis.value_function_api import ValueFunctionAPI
from torch import nn
from torch.nn import functional as F

from ..core.nets import ACTIVATIONS, mlp
from ..core.normalize import RunningMeanStd
from ..core.rl_module_base import FastTorchRLModule

_LOG_2PI = math.log(2 * math.pi)


class ActorCriticModule(FastTorchRLModule, ValueFunctionAPI):
    """Separate actor and critic MLPs, or one trunk with two linear heads.

    ``model_config``: hidden_sizes, critic_hidden_sizes (None: hidden_sizes), activation, init ('orthogonal' or
    'torch': ``core.nets.mlp``), std_mode, init_log_std, std_param ('log' or
    'scalar'), clip_actions (default True), normalize_obs (default True), state_dim (asymmetric actor-critic: the
    critic reads the source's privileged ``states`` of this width, normalised
    by their own ``state_norm``; None: the critic reads the observation),
    shared_trunk (default False: every hidden layer shared by policy and
    value, each a linear head on top -- rl_games' ``separate: False``; the
    value loss then shapes the policy's features too, so ``vf_loss_coeff``
    weighs the two tasks; needs the critic to read the observation).
    """

    def setup(self) -> None:
        mc = dict(self.model_config or {})
        obs_dim = int(np.prod(self.observation_space.shape))
        hidden, act = mc.get("hidden_sizes", [64, 64]), mc.get("activation", "tanh")
        self.discrete = isinstance(self.action_space, gym.spaces.Discrete)
        self.state_dependent_std = mc.get("std_mode", "state_independent") == "state_dependent"
        if self.discrete:
            out = int(self.action_space.n)
        else:
            self.act_dim = int(np.prod(self.action_space.shape))
            out = self.act_dim * (2 if self.state_dependent_std else 1)
            low = torch.as_tensor(self.action_space.low, dtype=torch.float32)
            high = torch.as_tensor(self.action_space.high, dtype=torch.float32)
            self.register_buffer("act_low", low)
            self.register_buffer("act_high", high)
            #: 'scalar': the std itself is the parameter (rsl_rl's std_type='scalar'), else its log
            self.scalar_std = mc.get("std_param", "log") == "scalar"
            if self.state_dependent_std:
                pass
            elif self.scalar_std:
                self.std = nn.Parameter(torch.full((self.act_dim,), math.exp(float(mc.get("init_log_std", 0.0)))))
            else:
                self.log_std = nn.Parameter(torch.full((self.act_dim,), float(mc.get("init_log_std", 0.0))))
            #: False: sampled actions reach the env unclamped (rsl_rl's clip_actions=None)
            self.clip_actions = bool(mc.get("clip_actions", True))
            self.init_log_std = float(mc.get("init_log_std", 0.0))
        init = mc.get("init", "orthogonal")
        state_dim = mc.get("state_dim")
        self.asymmetric = state_dim is not None
        pi_in, vf_in = self.head_input_dims(obs_dim, int(state_dim) if self.asymmetric else obs_dim)
        self.shared_trunk = bool(mc.get("shared_trunk", False))
        critic_hidden = mc.get("critic_hidden_sizes")
        critic_hidden = list(hidden) if critic_hidden is None else list(critic_hidden)
        if self.shared_trunk:
            if critic_hidden != list(hidden):
                raise ValueError(f"{type(self).__name__}: shared_trunk = True shares every hidden layer, so the "
                                 f"critic cannot have its own sizes (critic_hidden_sizes = {critic_hidden}); "
                                 "allowed: critic_hidden_sizes = None")
            if self.asymmetric or pi_in != vf_in:
                raise ValueError(f"{type(self).__name__}: shared_trunk = True needs the critic to read the actor's "
                                 "input (an asymmetric critic reads states); allowed: shared_trunk = False, or "
                                 "asymmetric_critic = False")
            # the hidden layers once (their last one with its activation), each head a linear layer on top
            self.trunk = nn.Sequential(*mlp(pi_in, hidden[:-1], hidden[-1], act, out_gain=math.sqrt(2), init=init),
                                       ACTIVATIONS[act]())
            pi_in = vf_in = hidden[-1]
            hidden = critic_hidden = []
        self.pi = mlp(pi_in, hidden, out, act, out_gain=0.01, init=init)
        self.vf = mlp(vf_in, critic_hidden, 1, act, out_gain=1.0, init=init)
        self.obs_norm = RunningMeanStd((obs_dim,))
        if self.asymmetric:  # the critic's own input statistics (states are not observations)
            self.state_norm = RunningMeanStd((int(state_dim),))
        # Whether observations go through `obs_norm`. Without it the policy is trained on raw
        # observations, so inference must not apply the (identity) normaliser's +-10 clip either.
        self.normalize_obs = bool(mc.get("normalize_obs", True))
        self.value_norm = RunningMeanStd((), clip=math.inf)

    def head_input_dims(self, obs_dim: int, critic_dim: int) -> Tuple[int, int]:
        """Input widths of the actor and critic MLPs: the observation's and the
        critic input's (a recurrent module puts its memory in front of them)."""
        return obs_dim, critic_dim

    def critic_parameter_names(self) -> Tuple[str, ...]:
        """Name prefixes of the critic's parameters (``grad_clip_scope='per_network'``)."""
        return ("vf.",)

    # -- hot path (normalised observations in) -------------------------------------
    def policy_input(self, obs: torch.Tensor) -> torch.Tensor:
        """Raw observations ``[B, ...]`` as the networks see them: flattened,
        float, normalised (and clipped) only when ``normalize_obs``. The one
        definition shared by the acting path and the RLModule API, so
        inference acts exactly as training did."""
        obs = obs.float().reshape(obs.shape[0], -1)
        return self.obs_norm.normalize(obs) if self.normalize_obs else obs

    def critic_input(self, states: torch.Tensor) -> torch.Tensor:
        """Raw states ``[B, ...]`` as the critic sees them (flattened, float,
        normalised like observations when ``normalize_obs``)."""
        states = states.float().reshape(states.shape[0], -1)
        return self.state_norm.normalize(states) if self.normalize_obs else states

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """What the heads read: the shared trunk's output, or ``x`` itself when
        the actor and critic are separate networks."""
        return self.trunk(x) if self.shared_trunk else x

    def dist_params(self, obs_n: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor | None]:
        return self._dist_of_head(self.pi(self.features(obs_n)))

    def dist_params_and_value(self, obs_n: torch.Tensor, critic_in: torch.Tensor):
        """``(mean or logits, log_std, value)`` for a training minibatch. With
        ``shared_trunk`` the critic reads the observation, so the trunk runs once
        for both heads (``critic_in`` is then the same rows as ``obs_n`` and is
        not read); otherwise the actor and the critic each read their own input.
        Why: the trunk is most of the network, and PPO's loss needs both heads on
        every minibatch."""
        if self.shared_trunk:
            h = self.trunk(obs_n)
            return (*self._dist_of_head(self.pi(h)), self.vf(h).squeeze(-1))
        return (*self.dist_params(obs_n), self.value(critic_in))

    def _dist_of_head(self, out: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor | None]:
        """The policy head's output as distribution parameters (logits, or mean and log std)."""
        if self.discrete:
            return out, None
        if self.state_dependent_std:
            mean, log_std = out.split(self.act_dim, dim=-1)
            return mean, (log_std + self.init_log_std).clamp(-20.0, 2.0)
        if self.scalar_std:
            return out, self.std.clamp(1e-6, 1e6).log().expand_as(out)
        return out, self.log_std.expand_as(out)

    def sample(self, obs_n: torch.Tensor, deterministic: bool = False) -> Tuple[torch.Tensor, torch.Tensor]:
        """Actions and their log-probabilities for a batch."""
        p, log_std = self.dist_params(obs_n)
        if self.discrete:
            logp_all = F.log_softmax(p, dim=-1)
            if deterministic:
                a = p.argmax(-1)
            else:  # Gumbel-max: one kernel chain, no torch.distributions overhead
                g = -torch.log(-torch.log(torch.rand_like(p).clamp_(1e-20, 1.0)))
                a = (logp_all + g).argmax(-1)
            return a, logp_all.gather(-1, a.unsqueeze(-1)).squeeze(-1)
        a = p if deterministic else p + torch.randn_like(p) * log_std.exp()
        return a, self.gauss_logp(a, p, log_std)

    @staticmethod
    def gauss_logp(a, mean, log_std):
        z = (a - mean) * torch.exp(-log_std)
        return (-0.5 * z.pow(2) - log_std - 0.5 * _LOG_2PI).sum(-1)

    def evaluate_actions(self, obs_n: torch.Tensor, actions: torch.Tensor):
        """Log-probs and entropies of given actions (for the PPO loss)."""
        return self.logp_entropy(*self.dist_params(obs_n), actions)

    def logp_entropy(self, p: torch.Tensor, log_std: Optional[torch.Tensor], actions: torch.Tensor):
        """Log-probs of ``actions`` and entropies under the distribution ``(p, log_std)``
        (:meth:`dist_params`' output)."""
        if self.discrete:
            logp_all = F.log_softmax(p, dim=-1)
            logp = logp_all.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
            entropy = -(logp_all.exp() * logp_all).sum(-1)
            return logp, entropy
        logp = self.gauss_logp(actions, p, log_std)
        entropy = (0.5 + 0.5 * _LOG_2PI + log_std).sum(-1)
        return logp, entropy

    def value(self, critic_in: torch.Tensor) -> torch.Tensor:
        """Critic output in normalised-return units, from the critic's input as
        prepared for it: normalised observations, or ``critic_input(states)``
        for an asymmetric critic."""
        return self.vf(self.features(critic_in)).squeeze(-1)

    def to_env_action(self, a: torch.Tensor) -> torch.Tensor:
        if self.discrete:
            return a
        if self.clip_actions:
            a = a.clamp(-1.0, 1.0)
        scaled = self.act_low + (a + 1.0) * 0.5 * (self.act_high - self.act_low)
        return scaled

    # -- RLModule API (raw observations in) ------------------------------------------
    def _forward(self, batch: Dict[str, Any], **kwargs) -> Dict[str, Any]:
        obs_n = self.policy_input(batch[Columns.OBS])
        p, log_std = self.dist_params(obs_n)
        dist_inputs = p if self.discrete else torch.cat([p, log_std], dim=-1)
        return {Columns.ACTION_DIST_INPUTS: dist_inputs}

    def _forward_inference(self, batch: Dict[str, Any], **kwargs) -> Dict[str, Any]:
        out = self._forward(batch)
        obs_n = self.policy_input(batch[Columns.OBS])
        a, _ = self.sample(obs_n, deterministic=True)
        out[Columns.ACTIONS] = self.to_env_action(a)
        return out

    def compute_values(self, batch: Dict[str, Any], embeddings: Any = None) -> torch.Tensor:
        """Denormalised state values for raw observations, or for raw
        ``batch["states"]`` when the critic is asymmetric."""
        return self.value_norm.denormalize(self.value(self.critic_input_of(batch)))

    def critic_input_of(self, batch: Dict[str, Any]) -> torch.Tensor:
        """The critic's prepared input for an RLModule batch: its raw observations,
        or its raw ``batch["states"]`` when the critic is asymmetric."""
        if self.asymmetric:
            if "states" not in batch:
                raise KeyError(f"{type(self).__name__}.compute_values: this critic reads the source's states; "
                               "pass them as batch['states'] (observations are the actor's input only)")
            return self.critic_input(batch["states"])
        return self.policy_input(batch[Columns.OBS])

    def get_inference_action_dist_cls(self):
        from ray.rllib.models.torch.torch_distributions import TorchCategorical, TorchDiagGaussian

        return TorchCategorical if self.discrete else TorchDiagGaussian

    get_exploration_action_dist_cls = get_inference_action_dist_cls
    get_train_action_dist_cls = get_inference_action_dist_cls


# the name FastPPO users know
FastPPOModule = ActorCriticModule
