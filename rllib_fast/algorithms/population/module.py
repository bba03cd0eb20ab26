"""The populations' inference RLModule: one member's greedy policy.

The module holds the stacked network of all ``members`` (sharing the
algorithm's live weights) and acts with member ``member``, computing it the
way ``compute_actions`` does (all members' stacked forward, then the member's
slice), so its actions equal the algorithm's. ``select(m)`` returns a
one-member copy (what export and small deployments want).

Which member: ``algo.get_module()`` takes the best member by fitness, as
``compute_actions`` does (CEM-RL: the CEM mean policy, which is what CEM-RL
evaluates); ``algo.get_module(member=k)`` takes member ``k``.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from ...core.policy_module import GreedyPolicyModule, live_module
from ...core.stacked import StackedMLP, load_flat_members, member_tensors

KINDS = ("td3", "sac", "dqn")


class PopulationPolicyModule(GreedyPolicyModule):
    """``model_config``: kind ('td3' | 'sac' | 'dqn'), members, member,
    hidden_sizes, activation, layer_norm."""

    def setup(self) -> None:
        mc = dict(self.model_config)
        self.kind, self.members, self.member = mc["kind"], int(mc["members"]), int(mc["member"])
        if self.kind not in KINDS:
            raise ValueError(f"PopulationPolicyModule: kind={self.kind!r}; allowed: {KINDS}")
        if not 0 <= self.member < self.members:
            raise ValueError(f"PopulationPolicyModule: member={self.member}; allowed: 0..{self.members - 1}")
        hidden, act = tuple(mc["hidden_sizes"]), mc["activation"]
        if self.kind == "dqn":
            from .dqn import StackedQNet

            self.net = StackedQNet(self.members, tuple(self.observation_space.shape), int(self.action_space.n),
                                   hidden, act, None)
        else:
            a = int(np.prod(self.action_space.shape))
            self.net = StackedMLP(self.members, int(self.observation_space.shape[0]), hidden,
                                  a * (2 if self.kind == "sac" else 1), act, bool(mc["layer_norm"]))
            low = torch.as_tensor(self.action_space.low, dtype=torch.float32)
            high = torch.as_tensor(self.action_space.high, dtype=torch.float32)
            self.register_buffer("act_center", (high + low) / 2)
            self.register_buffer("act_half", (high - low) / 2)

    def greedy(self, obs: torch.Tensor):
        x = obs.unsqueeze(0).expand(self.members, *obs.shape)
        if self.kind == "dqn":
            q = self.net(x)[self.member]
            return q.argmax(-1), q
        out = self.net(x.float())[self.member]
        mean = out.chunk(2, -1)[0] if self.kind == "sac" else out
        a = self.act_center + self.act_half * torch.tanh(mean)
        return a, a

    @torch.no_grad()
    def select(self, member: Optional[int] = None) -> "PopulationPolicyModule":
        """A one-member module (own weights) acting as member ``member``
        (default: this module's member)."""
        if member is not None and self.model_config.get("cem_mean"):
            raise ValueError(f"member={member}: this module holds CEM-RL's mean policy only; a member is exported "
                             "from the algorithm (algo.export_policy(path, member=k) or algo.get_module(member=k))")
        m = self.member if member is None else int(member)
        if not 0 <= m < self.members:
            raise ValueError(f"member={m} is out of range; this population has members 0..{self.members - 1}")
        mc = {**dict(self.model_config), "members": 1, "member": 0}
        with torch.random.fork_rng(devices=[]):
            out = type(self)(observation_space=self.observation_space, action_space=self.action_space,
                             inference_only=True, model_config=mc)
        out = out.to(next(self.net.parameters()).device)
        for dst, src in zip(member_tensors(out.net), member_tensors(self.net)):
            dst.copy_(src[m:m + 1])
        return out


def population_policy_module(algo, member: Optional[int] = None) -> PopulationPolicyModule:
    """The live greedy module of a population algorithm (see the module docstring)."""
    from .cemrl import CEMRL
    from .dqn import PopDQN
    from .sac import PopSAC

    cfg, env = algo.config, algo.env
    if member is not None and not (isinstance(member, int) and 0 <= member < algo.K):
        raise ValueError(f"get_module: member={member!r}; allowed: None (the best member) or 0..{algo.K - 1}")
    kind = "dqn" if isinstance(algo, PopDQN) else "sac" if isinstance(algo, PopSAC) else "td3"
    if kind == "dqn":
        net = algo.q
    elif isinstance(algo, CEMRL) and member is None:
        net = algo.mean_actor
        load_flat_members(net, algo.mu.unsqueeze(0))  # as CEMRL.compute_actions does before acting
    else:
        net = algo.actor
    members = net.head.num_members if kind == "dqn" else net.num_members
    index = 0 if members == 1 else (algo.best_member() if member is None else member)
    mc = {"kind": kind, "members": members, "member": index, "hidden_sizes": list(algo.hidden_sizes),
          "activation": cfg.activation, "layer_norm": bool(getattr(cfg, "layer_norm", False)),
          "cem_mean": net is getattr(algo, "mean_actor", None)}

    def build():
        return PopulationPolicyModule(observation_space=env.single_observation_space,
                                      action_space=env.single_action_space, inference_only=True, model_config=mc)

    def attach(m):
        m.net = net

    return live_module(algo, (net, index), build, attach)
