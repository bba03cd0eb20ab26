"""Recurrent actor-critic: an LSTM/GRU memory in front of the actor's and/or the critic's MLP.

rsl_rl's ``RNNModel`` layout: the (normalised) observation goes through the
recurrent cell and its output is the MLP's input. The memory state is explicit
(``core.memory``): the algorithm carries it across env steps and rollouts,
zeroes it at episode ends and checkpoints it; an update replays whole
sequences from the state each rollout began with (:class:`Sequences`).

Config keys (FastPPO; :data:`RECURRENT_HYPERPARAMETERS`): ``rnn_type`` (None:
feed-forward), ``rnn_hidden_size``, ``rnn_num_layers``, ``rnn_on``
('actor', 'critic' or 'both').

RLModule API (``algo.get_module()``): a recurrent actor makes the module
stateful (``is_stateful()``); ``forward_inference`` takes one step per call,
``batch[Columns.STATE_IN] = {"actor": [B, K, L, H]}`` (zeros when absent: a
first step) and returns ``Columns.STATE_OUT`` in the same layout; the caller
zeroes a row at its episode's end. ``get_initial_state()`` is one row of zeros.
"""
from __future__ import annotations

import math
from typing import Any, Dict, NamedTuple, Optional, Tuple

import torch
from ray.rllib.core.columns import Columns

from ..core.memory import RNN_TYPES, RecurrentMemory
from ..core.params import Param
from .actor_critic import ActorCriticModule

#: where the memory sits (the ``rnn_on`` key)
RNN_ON = ("actor", "critic", "both")

RECURRENT_HYPERPARAMETERS = {
    "rnn_type": Param(None, "recurrent actor-critic: an 'lstm' or 'gru' memory in front of the MLPs rnn_on names, "
                      "its state carried across steps and rollouts, zeroed at episode ends, replayed over whole "
                      "rollout sequences in the update (minibatches are sets of envs; docs/recurrent.md); "
                      "None: feed-forward", (str,), choices=RNN_TYPES, optional=True),
    "rnn_hidden_size": Param(256, "rnn_type: units of the recurrent memory (its output is the MLP's input)",
                             (int,), low=1),
    "rnn_num_layers": Param(1, "rnn_type: stacked recurrent layers", (int,), low=1),
    "rnn_on": Param("both", "rnn_type: which networks read through a memory: 'actor', 'critic' or 'both' (each "
                    "its own)", (str,), choices=RNN_ON),
}


def recurrent_model_config(config: Any) -> Dict[str, Any]:
    """The module's recurrent ``model_config`` entries from an algorithm config
    (empty for a feed-forward config or one without the keys)."""
    rnn_type = getattr(config, "rnn_type", None)
    if rnn_type is None:
        return {}
    # a config without `rnn_on` (a distillation student: no trained critic) puts the memory on the actor
    return {"rnn_type": rnn_type, "rnn_hidden_size": int(config.rnn_hidden_size),
            "rnn_num_layers": int(config.rnn_num_layers), "rnn_on": getattr(config, "rnn_on", "actor")}


def actor_critic_class(config: Any) -> type:
    """The actor-critic module class a config asks for."""
    return RecurrentActorCriticModule if getattr(config, "rnn_type", None) is not None else ActorCriticModule


class Memories(NamedTuple):
    """The memory states of the actor and the critic (``[K, L, N, H]`` each; None
    for a network without a memory)."""

    actor: Optional[torch.Tensor]
    critic: Optional[torch.Tensor]

    def forget(self, ended: torch.Tensor) -> "Memories":
        """These states with the envs ``ended`` (bool ``[N]``) zeroed."""
        return Memories(*(None if m is None else RecurrentMemory.forget(m, ended) for m in self))


class Sequences(NamedTuple):
    """How a rollout's flat ``[T * N]`` rows (t-major) replay as sequences: what an
    update of a recurrent module needs besides the transitions."""

    starts: torch.Tensor              # bool [T * N]: the row begins an episode (t > 0 after an end)
    memories: Memories                # the states the rollout's first step acted from
    horizon: int                      # T


class MemoryParts:
    """What an actor-critic holding an optional actor memory (``pi_memory``) and
    critic memory (``vf_memory``) does with them; shared by FastPPO's recurrent
    module and PopPPO's stacked one (whose memories carry a leading member axis,
    which passes through unchanged)."""

    pi_memory: Optional[Any]
    vf_memory: Optional[Any]

    def initial_memories(self, batch: int, device=None) -> Memories:
        """Zero states for ``batch`` envs (per member, for stacked memories)."""
        return Memories(*(None if m is None else m.initial_state(batch, device)
                          for m in (self.pi_memory, self.vf_memory)))

    def actor_step(self, obs_n: torch.Tensor, memory: Optional[torch.Tensor]):
        """The actor's MLP input for one step of normalised observations ``[..., B, D]``
        and the actor's next memory state (identity without an actor memory)."""
        if self.pi_memory is None:
            return obs_n, memory
        return self.pi_memory.step(obs_n, memory)

    def actor_sequence(self, obs_n: torch.Tensor, memory: Optional[torch.Tensor], starts: torch.Tensor):
        """The actor's MLP inputs ``[..., T, B, *]`` for a replayed sequence ``[..., T, B, D]``."""
        if self.pi_memory is None:
            return obs_n
        return self.pi_memory.unroll(obs_n, memory, starts)[0]

    def critic_sequence(self, critic_in: torch.Tensor, memory: Optional[torch.Tensor], starts: torch.Tensor):
        """The critic's MLP inputs ``[..., T, B, *]`` for a replayed sequence of prepared critic inputs."""
        if self.vf_memory is None:
            return critic_in
        return self.vf_memory.unroll(critic_in, memory, starts)[0]


class RecurrentActorCriticModule(MemoryParts, ActorCriticModule):
    """:class:`ActorCriticModule` with a :class:`~rllib_fast.core.memory.RecurrentMemory`
    (``pi_memory``, ``vf_memory``) in front of the actor's and/or the critic's MLP.

    ``model_config`` adds: rnn_type ('lstm'/'gru'), rnn_hidden_size,
    rnn_num_layers, rnn_on ('actor', 'critic', 'both')."""

    def setup(self) -> None:
        mc = dict(self.model_config or {})
        self.rnn_type = mc.get("rnn_type", "lstm")
        self.rnn_hidden_size = int(mc.get("rnn_hidden_size", 256))
        self.rnn_num_layers = int(mc.get("rnn_num_layers", 1))
        on = mc.get("rnn_on", "both")
        if on not in RNN_ON:
            raise ValueError(f"RecurrentActorCriticModule: rnn_on = {on!r}; allowed: {', '.join(RNN_ON)}")
        self.actor_recurrent, self.critic_recurrent = on in ("actor", "both"), on in ("critic", "both")
        super().setup()
        obs_dim = int(math.prod(self.observation_space.shape))
        critic_dim = int(mc["state_dim"]) if self.asymmetric else obs_dim
        args = (self.rnn_hidden_size, self.rnn_num_layers, self.rnn_type)
        self.pi_memory = RecurrentMemory(obs_dim, *args) if self.actor_recurrent else None
        self.vf_memory = RecurrentMemory(critic_dim, *args) if self.critic_recurrent else None

    def head_input_dims(self, obs_dim: int, critic_dim: int) -> Tuple[int, int]:
        h = self.rnn_hidden_size
        return (h if self.actor_recurrent else obs_dim), (h if self.critic_recurrent else critic_dim)

    def critic_parameter_names(self) -> Tuple[str, ...]:
        return ("vf.", "vf_memory.")

    # -- acting with memory ------------------------------------------------------------------
    def act(self, obs: torch.Tensor, memory: Optional[torch.Tensor], deterministic: bool = False):
        """Raw observations ``[B, ...]`` -> (action in policy units, its log-probability,
        env action, next actor memory): one step of the policy."""
        latent, memory = self.actor_step(self.policy_input(obs), memory)
        a, logp = self.sample(latent, deterministic=deterministic)
        return a, logp, self.to_env_action(a), memory

    # -- RLModule API (raw observations in, states batch-first) ------------------------------
    def is_stateful(self) -> bool:
        return self.actor_recurrent

    def get_initial_state(self) -> Dict[str, Any]:
        if not self.actor_recurrent:
            return {}
        m = self.pi_memory
        return {"actor": torch.zeros(m.parts, m.num_layers, m.hidden_size, device=self.value_norm.mean.device)}

    def _state_in(self, batch: Dict[str, Any], key: str, memory: Optional[RecurrentMemory], n: int, device):
        state = (batch.get(Columns.STATE_IN) or {}).get(key)
        if memory is None:
            return None
        if state is None:
            return memory.initial_state(n, device)
        return state.permute(1, 2, 0, 3).contiguous()   # [B, K, L, H] -> [K, L, B, H]

    def _actor_outputs(self, batch: Dict[str, Any]):
        """One step of the actor on a batch: RLlib's outputs (distribution inputs,
        ``STATE_OUT``) and the actor MLP's input."""
        obs = batch[Columns.OBS]
        memory = self._state_in(batch, "actor", self.pi_memory, obs.shape[0], obs.device)
        latent, memory = self.actor_step(self.policy_input(obs), memory)
        p, log_std = self.dist_params(latent)
        out = {Columns.ACTION_DIST_INPUTS: p if self.discrete else torch.cat([p, log_std], dim=-1)}
        if memory is not None:
            out[Columns.STATE_OUT] = {"actor": memory.permute(2, 0, 1, 3)}
        return out, latent

    def _forward(self, batch: Dict[str, Any], **kwargs) -> Dict[str, Any]:
        return self._actor_outputs(batch)[0]

    def _forward_inference(self, batch: Dict[str, Any], **kwargs) -> Dict[str, Any]:
        out, latent = self._actor_outputs(batch)
        a, _ = self.sample(latent, deterministic=True)
        out[Columns.ACTIONS] = self.to_env_action(a)
        return out

    def compute_values(self, batch: Dict[str, Any], embeddings: Any = None) -> torch.Tensor:
        """Denormalised values of one step: the critic's memory from
        ``batch[STATE_IN]["critic"]`` (``[B, K, L, H]``; zeros when absent)."""
        critic_in = self.critic_input_of(batch)
        memory = self._state_in(batch, "critic", self.vf_memory, critic_in.shape[0], critic_in.device)
        if memory is not None:
            critic_in = self.vf_memory.step(critic_in, memory)[0]
        return self.value_norm.denormalize(self.value(critic_in))
