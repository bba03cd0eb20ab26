"""FastPPO with a recurrent actor-critic (``rnn_type``): acting with memory, and PPO over sequences.

Acting (:class:`RecurrentActing`, mixed into FastPPO; inert for a feed-forward
module): the actor's memory state ``[K, L, N, H]`` advances with every batched
env step and is zeroed where an episode ended -- terminated, truncated, or a
transition a one-step-late source marks ``valid=False`` (the step that carries
the reset), so every episode starts from a zero state. The states each rollout
began from are kept; with the rollout's ``done``/``valid`` flags they say where
every sequence starts (:class:`~..recurrent_module.Sequences`), so the rollout
need not store a state per step: a replay from the start state recomputes them
(rsl_rl stores one per step but reads only those at trajectory starts, which
are the rollout's first state or zeros).

The critic's memory is replayed over the rollout once for the targets
(``_rollout_values``): the values of every step, and of every ``final_obs`` one
step on from the pre-reset state (exact time-out bootstraps); its end state is
the next rollout's start state.

Learning (:class:`RecurrentPPOUpdate`): minibatches are sets of envs, each with
its whole ``T``-step sequence (truncated BPTT over the rollout), the memory
replayed from the stored start state and zeroed in front of every episode
start, as rsl_rl's split-and-pad minibatches are, with static shapes (a loop
over time, no host sync).
"""
from __future__ import annotations

from typing import Any, Dict, Optional

import torch

from ...core.memory import RecurrentMemory
from ..onpolicy.batch import OnPolicyBatch
from ..recurrent_module import Memories, RecurrentActorCriticModule, Sequences


class SequenceMinibatches:
    """Mixed into PPO's update (``ppo.algorithm.RecurrentPPOUpdate``): a minibatch is
    ``N / num_minibatches`` envs' whole ``T``-step sequences (rows ``t * N + env``,
    t-major), the actor and critic memories replayed from the rollout's start
    states. A feed-forward batch (no ``sequences``) is the update's own."""

    def minibatch_order(self, batch: OnPolicyBatch) -> torch.Tensor:
        if batch.sequences is None:
            return super().minibatch_order(batch)
        n = batch.advantages.shape[0] // batch.sequences.horizon
        if self.settings.shuffle == "none":   # contiguous env blocks: rsl_rl's recurrent generator
            return torch.arange(n, device=self.device)
        return torch.randperm(n, device=self.device, generator=self.shuffle_generator)

    def minibatch_rows(self, batch: OnPolicyBatch, order: torch.Tensor, i: int) -> torch.Tensor:
        if batch.sequences is None:
            return super().minibatch_rows(batch, order, i)
        n = order.shape[0]
        per = n // self.settings.num_minibatches
        envs = order[i * per:(i + 1) * per]
        steps = torch.arange(batch.sequences.horizon, device=envs.device).unsqueeze(1) * n
        return (steps + envs.unsqueeze(0)).reshape(-1)

    def _sequence(self, batch: OnPolicyBatch, x: torch.Tensor, idx: Optional[torch.Tensor], memory):
        """Rows ``idx`` (None: all) of ``x`` as ``[T, B, ...]`` with their memory start
        states ``[K, L, B, H]`` and episode starts ``[T, B]``."""
        seq = batch.sequences
        T = seq.horizon
        if idx is None:
            starts, xs = seq.starts, x
        else:
            starts, xs = seq.starts[idx], x[idx]
        xs = xs.reshape(T, -1, *x.shape[1:])
        if memory is not None and idx is not None:
            memory = memory[:, :, idx[:xs.shape[1]]]   # the rows of step 0 are the envs themselves
        return xs, memory, starts.reshape(T, -1)

    def actor_features(self, batch: OnPolicyBatch, idx: Optional[torch.Tensor]) -> torch.Tensor:
        if batch.sequences is None or not self.module.actor_recurrent:
            return super().actor_features(batch, idx)
        obs, memory, starts = self._sequence(batch, batch.obs, idx, batch.sequences.memories.actor)
        out = self.module.actor_sequence(obs, memory, starts)
        return out.reshape(-1, out.shape[-1])

    def critic_features(self, batch: OnPolicyBatch, idx: Optional[torch.Tensor]) -> torch.Tensor:
        if batch.sequences is None or not self.module.critic_recurrent:
            return super().critic_features(batch, idx)
        x, memory, starts = self._sequence(batch, batch.critic_in, idx, batch.sequences.memories.critic)
        out = self.module.critic_sequence(x, memory, starts)
        return out.reshape(-1, out.shape[-1])


class RecurrentActing:
    """Acting, targets and state with a recurrent actor-critic (mixed in before
    ``OnPolicyAlgorithm`` by FastPPO and by Distillation for its recurrent student;
    every method defers to it for a feed-forward module)."""

    SUPPORTS_RECURRENT = True
    #: the update rule with sequence minibatches (set by the algorithm class)
    RECURRENT_UPDATE: type = None

    def build(self) -> None:
        if getattr(self.config, "rnn_type", None) is not None:
            self.UPDATE = self.RECURRENT_UPDATE   # this instance's rule: the same settings and optimizer
        super().build()

    @property
    def recurrent(self) -> bool:
        return isinstance(self.__dict__.get("module"), RecurrentActorCriticModule)

    def _decorrelate(self) -> None:
        # the last step of build: the module exists, the memories start here
        if self.recurrent:
            self.memories = self.module.initial_memories(self.env.num_envs, self.device)
            self.rollout_start = self.memories
        super()._decorrelate()

    # -- acting ----------------------------------------------------------------------------
    def _exploration_action(self, obs_n: torch.Tensor) -> torch.Tensor:
        if not self.recurrent:
            return super()._exploration_action(obs_n)
        latent, actor = self.module.actor_step(obs_n, self.memories.actor)
        self.memories = self.memories._replace(actor=actor)
        return self.module.sample(latent)[0]

    def _act_step(self, obs: torch.Tensor):
        if not self.recurrent:
            return super()._act_step(obs)
        obs_n = self.module.policy_input(obs)
        latent, actor = self.module.actor_step(obs_n, self.memories.actor)
        self.memories = self.memories._replace(actor=actor)
        action, logp = self.module.sample(latent)
        return obs_n, action, logp, self.module.to_env_action(action)

    def _after_env_step(self, step) -> None:
        super()._after_env_step(step)
        if self.recurrent:
            self.memories = self.memories.forget(episode_ended(step))

    def _rollout(self) -> None:
        if self.recurrent:
            self.rollout_start = self.memories
        super()._rollout()

    def compute_actions(self, obs: torch.Tensor, explore: bool = True) -> torch.Tensor:
        if self.recurrent and self.module.actor_recurrent:
            raise ValueError(f"{type(self).__name__}.compute_actions: this policy is recurrent (rnn_type = "
                             f"{self.config.rnn_type!r}) and acts from a memory of its episodes; use "
                             "algo.episode_actor(num_envs) (act/forget per step) or get_module().forward_inference "
                             "with Columns.STATE_IN")
        return super().compute_actions(obs, explore)

    def episode_actor(self, num_envs: int, explore: bool = False):
        if not self.recurrent:
            return super().episode_actor(num_envs, explore)
        return RecurrentEpisodeActor(self, num_envs, explore)

    # -- targets and batch -----------------------------------------------------------------
    def _starts(self) -> torch.Tensor:
        """bool ``[T, N]``: the rollout's steps that begin an episode (after an end at t-1);
        step 0 continues from the rollout's start state."""
        st = self.storage
        ended = st["done"] | ~st["valid"]
        return torch.cat([torch.zeros_like(ended[:1]), ended[:-1]])

    def _rollout_values(self):
        if not (self.recurrent and self.module.critic_recurrent):
            return super()._rollout_values()
        st, module = self.storage, self.module
        out, end, final_out = module.vf_memory.unroll(st[self.critic_key], self.rollout_start.critic,
                                                      self._starts(), st[self.final_critic_key])
        ended = st["done"][-1] | ~st["valid"][-1]
        self.memories = self.memories._replace(critic=RecurrentMemory.forget(end, ended))
        T, N = self.horizon, self.env.num_envs
        both = torch.cat([out.reshape(T * N, -1), final_out.reshape(T * N, -1)])
        return self._target_values(both).view(2, T, N)

    def _batch(self, targets) -> OnPolicyBatch:
        batch = super()._batch(targets)
        if not self.recurrent:
            return batch
        return batch._replace(sequences=Sequences(self._starts().reshape(-1), self.rollout_start, self.horizon))

    # -- checkpoints -----------------------------------------------------------------------
    def extra_state(self) -> Dict[str, Any]:
        out = super().extra_state()
        if self.recurrent:
            out["memories"] = self.memories._asdict()
        return out

    def set_extra_state(self, state: Dict[str, Any]) -> None:
        super().set_extra_state(state)
        if self.recurrent:
            self.memories = memories_on(state["memories"], self.device)

    def _live_episodes(self) -> Dict[str, Any]:
        out = super()._live_episodes()
        if self.recurrent:
            out["memories"] = self.memories
        return out

    def _keep_live_episodes(self, live: Dict[str, Any]) -> None:
        super()._keep_live_episodes(live)
        if self.recurrent:
            self.memories = live["memories"]


def memories_on(state: Dict[str, Any], device) -> Memories:
    return Memories(*(None if state.get(k) is None else state[k].to(device) for k in Memories._fields))


def episode_ended(step) -> torch.Tensor:
    """bool ``[N]``: the envs whose memory must be zeroed after ``step``: an episode
    ended, or the step was the invalid one that carried a late reset."""
    ended = step.terminated | step.truncated
    return ended if step.valid is None else ended | ~step.valid


class RecurrentEpisodeActor:
    """Acts in ``num_envs`` envs of its own (evaluation) with a memory of its own,
    from zero states: ``act(obs)`` each step, ``forget(ended)`` after it."""

    def __init__(self, algo, num_envs: int, explore: bool) -> None:
        self.algo, self.explore = algo, explore
        self.memory = algo.module.initial_memories(num_envs, algo.device).actor

    @torch.no_grad()
    def act(self, obs: torch.Tensor) -> torch.Tensor:
        _, _, env_action, self.memory = self.algo.module.act(obs, self.memory, deterministic=not self.explore)
        return env_action

    def forget(self, ended: torch.Tensor) -> None:
        if self.memory is not None:
            self.memory = RecurrentMemory.forget(self.memory, ended)
