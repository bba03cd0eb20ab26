"""K PPO actor-critics as one stacked network, and the RLModule of one member.

:class:`StackedActorCritic` holds only member-stacked tensors (every
parameter and buffer has the member axis first): the policy and value MLPs
(``core.stacked.StackedMLP``), the Gaussian log-std, and each member's
observation, state and value normalisers (``core.normalize.RunningMeanStd``
with a member axis).
That is what makes a PBT exploit one ``copy_members(module, src, dst)``: a
member's weights and its normalisers move together, as Tune's checkpoint
exploit moves a FastPPO trial's module.

Each member is initialised exactly as FastPPO's ``ActorCriticModule``
(orthogonal init of ``core.nets.mlp``: policy then critic, member after
member, in one RNG order), so member 0 of a population starts from the
weights a FastPPO run of the same seed starts from.
"""
from __future__ import annotations

import math
from typing import Any, Dict, Optional, Sequence

import gymnasium as gym
import numpy as np
import torch
from ray.rllib.core.columns import Columns
from torch import nn
from torch.nn import functional as F

from ...core.memory import RecurrentMemory
from ...core.nets import mlp
from ...core.normalize import RunningMeanStd
from ...core.policy_module import live_module
from ...core.stacked import StackedMLP, member_tensors
from .stacked_memory import StackedRecurrentMemory
from ..actor_critic import ActorCriticModule
from ..population.module import PopulationPolicyModule
from ..recurrent_module import MemoryParts, RecurrentActorCriticModule, recurrent_model_config

_LOG_2PI = math.log(2 * math.pi)


class StackedActorCritic(MemoryParts, nn.Module):
    """K separate actor and critic MLPs (FastPPO's ``ActorCriticModule`` per member).

    Hot-path methods take member-major tensors ``[K, B, ...]``."""

    def __init__(self, K: int, obs_dim: int, action_space: gym.Space, hidden: Sequence[int], activation: str,
                 init_log_std: float = 0.0, state_dependent_std: bool = False, state_dim: Optional[int] = None,
                 normalize_obs: bool = True, recurrent: Optional[Dict[str, Any]] = None):
        super().__init__()
        # recurrent (``recurrent_model_config``): each member's memory in front of its MLPs, as FastPPO's
        rnn = dict(recurrent or {})
        self.rnn_type = rnn.get("rnn_type")
        on = rnn.get("rnn_on", "both") if self.rnn_type is not None else None
        self.actor_recurrent, self.critic_recurrent = on in ("actor", "both"), on in ("critic", "both")
        rnn_args = (int(rnn.get("rnn_hidden_size", 256)), int(rnn.get("rnn_num_layers", 1)), self.rnn_type)
        self.K = K
        self.discrete = isinstance(action_space, gym.spaces.Discrete)
        self.state_dependent_std = state_dependent_std and not self.discrete
        self.act_dim = int(action_space.n) if self.discrete else int(np.prod(action_space.shape))
        out = self.act_dim * (2 if self.state_dependent_std else 1)
        self.init_log_std = float(init_log_std)
        if not self.discrete and not self.state_dependent_std:
            self.log_std = nn.Parameter(torch.full((K, self.act_dim), float(init_log_std)))
        critic_dim = obs_dim if state_dim is None else int(state_dim)
        pi_in = rnn_args[0] if self.actor_recurrent else obs_dim
        vf_in = rnn_args[0] if self.critic_recurrent else critic_dim
        # members' networks drawn as FastPPO draws its one (policy, critic, then the actor's
        # and the critic's memories), member by member
        pis, vfs, pi_memories, vf_memories = [], [], [], []
        for _ in range(K):
            pis.append(mlp(pi_in, hidden, out, activation, out_gain=0.01))
            vfs.append(mlp(vf_in, hidden, 1, activation, out_gain=1.0))
            if self.actor_recurrent:
                pi_memories.append(RecurrentMemory(obs_dim, *rnn_args))
            if self.critic_recurrent:
                vf_memories.append(RecurrentMemory(critic_dim, *rnn_args))
        with torch.random.fork_rng(devices=[]):   # the stacks' own init is overwritten: keep the stream
            self.pi = StackedMLP(K, pi_in, hidden, out, activation)
            self.vf = StackedMLP(K, vf_in, hidden, 1, activation)
        self.pi.load_members(pis)
        self.vf.load_members(vfs)
        self.pi_memory = StackedRecurrentMemory(pi_memories) if pi_memories else None
        self.vf_memory = StackedRecurrentMemory(vf_memories) if vf_memories else None
        self.normalize_obs = bool(normalize_obs)
        self.asymmetric = state_dim is not None
        self.obs_norm = RunningMeanStd((obs_dim,), members=K)
        if self.asymmetric:
            self.state_norm = RunningMeanStd((critic_dim,), members=K)
        self.value_norm = RunningMeanStd((), clip=math.inf, members=K)

    def run(self, net: StackedMLP, x: torch.Tensor) -> torch.Tensor:
        """``net`` over ``[K, B, in]``: one batched matmul per layer for all
        members. One member runs ``nn.Linear``'s own kernel instead (its weight
        in ``nn.Linear``'s ``[out, in]`` layout): ``baddbmm`` and ``addmm`` round
        differently (in the last bits of a forward and of a gradient), and a
        population of one is meant to be FastPPO's run bit for bit."""
        if self.K > 1:
            return net(x)
        h, n = x[0], len(net.layers)
        for i, layer in enumerate(net.layers):
            h = F.linear(h, layer.weight[0].t().contiguous(), layer.bias[0, 0])
            if i < n - 1:
                h = net.act(h)
        return h.unsqueeze(0)

    # -- inputs -------------------------------------------------------------------------
    def policy_input(self, obs: torch.Tensor) -> torch.Tensor:
        """Raw ``[K, B, ...]`` observations as the policies see them (flat, float,
        normalised by each member's statistics when ``normalize_obs``)."""
        obs = obs.float().reshape(obs.shape[0], obs.shape[1], -1)
        return self.obs_norm.normalize(obs) if self.normalize_obs else obs

    def critic_input(self, states: torch.Tensor) -> torch.Tensor:
        states = states.float().reshape(states.shape[0], states.shape[1], -1)
        return self.state_norm.normalize(states) if self.normalize_obs else states

    def transposed_parameters(self):
        """Per parameter: stored transposed w.r.t. FastPPO's module (the stacked MLPs'
        ``[K, in, out]`` weights and ``[K, 1, out]`` biases; the memories keep
        ``nn.LSTM``'s layout)."""
        return [p.dim() == 3 and not name.startswith(("pi_memory.", "vf_memory."))
                for name, p in self.named_parameters()]

    # -- memories (recurrent members; states ``[K, P, L, B, H]``) ----------------------------
    @property
    def recurrent(self) -> bool:
        return self.rnn_type is not None

    # -- distribution --------------------------------------------------------------------
    def dist_params(self, obs_n: torch.Tensor):
        out = self.run(self.pi, obs_n)
        if self.discrete:
            return out, None
        if self.state_dependent_std:
            mean, log_std = out.split(self.act_dim, dim=-1)
            return mean, (log_std + self.init_log_std).clamp(-20.0, 2.0)
        if self.K == 1:   # FastPPO's expand ([A] -> [N, A]): its gradient sums over the same shape
            return out, self.log_std[0].expand_as(out[0]).unsqueeze(0)
        return out, self.log_std.unsqueeze(1).expand_as(out)

    def sample(self, obs_n: torch.Tensor, deterministic: bool = False):
        """Actions ``[K, B, ...]`` and their log-probabilities ``[K, B]``: the
        draws FastPPO makes (one ``rand_like``/``randn_like`` over all envs)."""
        p, log_std = self.dist_params(obs_n)
        if self.discrete:
            logp_all = F.log_softmax(p, dim=-1)
            if deterministic:
                a = p.argmax(-1)
            else:
                g = -torch.log(-torch.log(torch.rand_like(p).clamp_(1e-20, 1.0)))
                a = (logp_all + g).argmax(-1)
            return a, logp_all.gather(-1, a.unsqueeze(-1)).squeeze(-1)
        a = p if deterministic else p + torch.randn_like(p) * log_std.exp()
        return a, ActorCriticModule.gauss_logp(a, p, log_std)

    def evaluate_actions(self, obs_n: torch.Tensor, actions: torch.Tensor):
        p, log_std = self.dist_params(obs_n)
        if self.discrete:
            logp_all = F.log_softmax(p, dim=-1)
            logp = logp_all.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
            return logp, -(logp_all.exp() * logp_all).sum(-1)
        logp = ActorCriticModule.gauss_logp(actions, p, log_std)
        return logp, (0.5 + 0.5 * _LOG_2PI + log_std).sum(-1)

    def value(self, critic_in: torch.Tensor) -> torch.Tensor:
        """``[K, B]`` values in each member's normalised-return units."""
        return self.run(self.vf, critic_in).squeeze(-1)


class PopPPOPolicyModule(PopulationPolicyModule):
    """One PopPPO member's greedy policy (raw observations in, env actions
    out; its own observation normalisation and action scaling included).

    ``model_config``: members, member, obs_dim, hidden_sizes, activation,
    init_log_std, std_mode, normalize_obs, state_dim (the critic's input
    width, so a saved module rebuilds; the policy reads observations only),
    and for recurrent members FastPPO's rnn_type, rnn_hidden_size,
    rnn_num_layers, rnn_on.

    A recurrent actor makes the module stateful as FastPPO's is: one step per
    ``forward_inference`` call, ``batch[Columns.STATE_IN] = {"actor": [B, P, L, H]}``
    (zeros when absent), ``Columns.STATE_OUT`` in the same layout. ``select()``
    of a recurrent population is FastPPO's ``RecurrentActorCriticModule`` with
    the member's weights and statistics (what export and evaluation run)."""

    def setup(self) -> None:
        mc = dict(self.model_config)
        self.members, self.member = int(mc["members"]), int(mc["member"])
        if not 0 <= self.member < self.members:
            raise ValueError(f"PopPPOPolicyModule: member={self.member}; allowed: 0..{self.members - 1}")
        with torch.random.fork_rng(devices=[]):
            self.net = StackedActorCritic(self.members, int(mc["obs_dim"]), self.action_space,
                                          tuple(mc["hidden_sizes"]), mc["activation"], mc.get("init_log_std", 0.0),
                                          mc.get("std_mode") == "state_dependent", mc.get("state_dim"),
                                          bool(mc.get("normalize_obs", True)), recurrent_model_config_of(mc))
        if not self.net.discrete:
            self.register_buffer("act_low", torch.as_tensor(self.action_space.low, dtype=torch.float32))
            self.register_buffer("act_high", torch.as_tensor(self.action_space.high, dtype=torch.float32))

    def greedy(self, obs: torch.Tensor):
        x = obs.unsqueeze(0).expand(self.members, *obs.shape)
        a, _ = self.net.sample(self.net.policy_input(x), deterministic=True)
        a = a[self.member]
        if self.net.discrete:
            return a, self.net.dist_params(self.net.policy_input(x))[0][self.member]
        env_a = to_env_action(a, self.act_low, self.act_high)
        return env_a, env_a

    # -- recurrent members: the actor's memory in STATE_IN / STATE_OUT ------------------------
    def is_stateful(self) -> bool:
        return self.net.actor_recurrent

    def get_initial_state(self) -> Dict[str, Any]:
        if not self.net.actor_recurrent:
            return {}
        m = self.net.pi_memory
        return {"actor": torch.zeros(m.parts, m.num_layers, m.hidden_size, device=self.net.value_norm.mean.device)}

    def _forward(self, batch: Dict[str, Any], **kwargs) -> Dict[str, Any]:
        if not self.net.actor_recurrent:
            return super()._forward(batch, **kwargs)
        obs = batch[Columns.OBS]
        x = obs.unsqueeze(0).expand(self.members, *obs.shape)
        state = (batch.get(Columns.STATE_IN) or {}).get("actor")
        memory = self.net.pi_memory.initial_state(obs.shape[0], obs.device)
        if state is not None:   # [B, P, L, H] -> this member's [P, L, B, H] (the others' rows stay zero)
            memory[self.member] = state.permute(1, 2, 0, 3)
        latent, memory = self.net.actor_step(self.net.policy_input(x), memory)
        p, _ = self.net.dist_params(latent)
        a, _ = self.net.sample(latent, deterministic=True)
        a, p = a[self.member], p[self.member]
        actions = a if self.net.discrete else to_env_action(a, self.act_low, self.act_high)
        return {Columns.ACTIONS: actions, Columns.ACTION_DIST_INPUTS: p if self.net.discrete else actions,
                Columns.STATE_OUT: {"actor": memory[self.member].permute(2, 0, 1, 3)}}

    @torch.no_grad()
    def select(self, member: Optional[int] = None):
        m = self.member if member is None else int(member)
        if not 0 <= m < self.members:
            raise ValueError(f"member={m} is out of range; this population has members 0..{self.members - 1}")
        if self.net.recurrent:
            return member_as_fastppo_module(self.net, m, self.observation_space, self.action_space,
                                            dict(self.model_config))
        mc = {**dict(self.model_config), "members": 1, "member": 0}
        out = type(self)(observation_space=self.observation_space, action_space=self.action_space,
                         inference_only=True, model_config=mc)
        out = out.to(next(self.net.parameters()).device)
        for dst, src in zip(member_tensors(out.net), member_tensors(self.net)):
            dst.copy_(src[m:m + 1])
        return out


def recurrent_model_config_of(mc: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """The recurrent entries of a PopPPO module's ``model_config`` (None: feed-forward)."""
    if mc.get("rnn_type") is None:
        return None
    return {k: mc[k] for k in ("rnn_type", "rnn_hidden_size", "rnn_num_layers", "rnn_on")}


@torch.no_grad()
def member_as_fastppo_module(net: StackedActorCritic, k: int, observation_space, action_space,
                             mc: Dict[str, Any]) -> RecurrentActorCriticModule:
    """Member ``k`` of a recurrent population as FastPPO's ``RecurrentActorCriticModule``
    (its own copy of the member's MLPs, memories, log-std and statistics): what
    FastPPO's export, ``episode_actor`` and ``rllib-fast evaluate`` run."""
    config = {"hidden_sizes": list(mc["hidden_sizes"]), "activation": mc["activation"],
              "init_log_std": mc.get("init_log_std", 0.0), "std_mode": mc.get("std_mode", "state_independent"),
              "normalize_obs": bool(mc.get("normalize_obs", True)), "state_dim": mc.get("state_dim"),
              **recurrent_model_config_of(mc)}
    with torch.random.fork_rng(devices=[]):
        out = RecurrentActorCriticModule(observation_space=observation_space, action_space=action_space,
                                         inference_only=False, model_config=config)
    device = net.value_norm.mean.device
    out = out.to(device)
    for stack, seq in ((net.pi, out.pi), (net.vf, out.vf)):
        linears = [m for m in seq if isinstance(m, nn.Linear)]
        for layer, lin in zip(stack.layers, linears):
            lin.weight.copy_(layer.weight[k].t())
            lin.bias.copy_(layer.bias[k, 0])
    for stack, memory in ((net.pi_memory, out.pi_memory), (net.vf_memory, out.vf_memory)):
        if stack is not None:
            stack.member(k, memory)
    if hasattr(net, "log_std"):
        out.log_std.copy_(net.log_std[k])
    for name in ("obs_norm", "state_norm", "value_norm"):
        if hasattr(net, name):
            for dst, src in zip(getattr(out, name).buffers(), getattr(net, name).buffers()):
                dst.copy_(src[k])
    return out


def to_env_action(a: torch.Tensor, low: torch.Tensor, high: torch.Tensor) -> torch.Tensor:
    """[-1, 1] policy units -> the env's Box (as FastPPO's ``to_env_action``)."""
    return low + (a.clamp(-1.0, 1.0) + 1.0) * 0.5 * (high - low)


def pop_ppo_policy_module(algo, member: Optional[int] = None) -> PopPPOPolicyModule:
    """The live greedy module of a PopPPO: the best member by fitness, or ``member``."""
    if member is not None and not (isinstance(member, int) and 0 <= member < algo.K):
        raise ValueError(f"get_module: member={member!r}; allowed: None (the best member) or 0..{algo.K - 1}")
    cfg, env = algo.config, algo.env
    index = 0 if algo.K == 1 else (algo.best_member() if member is None else member)
    mc = {"members": algo.K, "member": index, "obs_dim": algo.obs_dim, "hidden_sizes": list(cfg.hidden_sizes),
          "activation": cfg.activation, "init_log_std": cfg.init_log_std, "std_mode": cfg.std_mode,
          "normalize_obs": algo.normalize_obs, "state_dim": algo.state_dim, **recurrent_model_config(cfg)}
    net = algo.module

    def build():
        return PopPPOPolicyModule(observation_space=env.single_observation_space,
                                  action_space=env.single_action_space, inference_only=True, model_config=mc)

    def attach(m):
        m.net = net

    return live_module(algo, (net, index), build, attach)


