"""The teacher of student-teacher distillation: a trained policy read from a
checkpoint, acting on the privileged observations, that labels the student's
states with its actions.

Two checkpoint kinds:

* an rllib_fast algorithm checkpoint (or its policy-module directory) of an
  actor-critic policy (FastPPO, FastA2C, ...): its RLModule, normalisers
  included (:func:`rllib_fast.core.export.load_policy_module`);
* an rsl_rl checkpoint (a ``.pt`` file from rsl_rl's runner, whose
  ``actor_state_dict`` is an ``MLPModel``'s state dict, or that state dict
  alone): the matching MLP is built from the state dict's layer shapes
  (``teacher_activation`` names its activation), with rsl_rl's empirical
  observation normalisation when the state dict has one. Its actions are in
  the env's units; they are mapped into the student's policy units.

Labels (:meth:`Teacher.labels`) are the teacher's greedy action parameters in
the student's units: the Gaussian mean in ``[-1, 1]`` policy units (continuous)
or the action logits (discrete)."""
from __future__ import annotations

import pathlib
from typing import Any, Dict, Optional

import torch
from torch import nn

from ...core.nets import ACTIVATIONS


class RslRlActor(nn.Module):
    """An rsl_rl ``MLPModel`` actor's deterministic path (observation
    normalisation, then the MLP whose output is the Gaussian mean), rebuilt
    from its state dict."""

    def __init__(self, state: Dict[str, torch.Tensor], activation: str) -> None:
        super().__init__()
        linear = sorted({int(k.split(".")[1]) for k in state if k.startswith("mlp.") and k.endswith(".weight")})
        if not linear:
            raise ValueError("teacher_checkpoint: the rsl_rl state dict has no 'mlp.<i>.weight' layers; allowed: "
                             "an rsl_rl MLPModel actor's state dict (or a runner checkpoint holding one)")
        layers = []
        for n, i in enumerate(linear):
            w = state[f"mlp.{i}.weight"]
            lin = nn.Linear(w.shape[1], w.shape[0])
            lin.weight.data.copy_(w)
            lin.bias.data.copy_(state[f"mlp.{i}.bias"])
            layers.append(lin)
            if n < len(linear) - 1:
                layers.append(ACTIVATIONS[activation]())
        self.mlp = nn.Sequential(*layers)
        self.in_dim, self.out_dim = layers[0].in_features, layers[-1].out_features
        mean = state.get("obs_normalizer._mean")
        self.normalize = mean is not None
        if self.normalize:   # rsl_rl's EmpiricalNormalization: (x - mean) / (std + eps)
            self.register_buffer("obs_mean", mean.reshape(-1).clone())
            self.register_buffer("obs_std", state["obs_normalizer._std"].reshape(-1).clone())
        self.eps = 1e-2

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        if self.normalize:
            obs = (obs - self.obs_mean) / (self.obs_std + self.eps)
        return self.mlp(obs)


class Teacher(nn.Module):
    """A frozen teacher (never trained, always greedy) with the label map into
    the student's units."""

    def __init__(self, policy: nn.Module, kind: str, in_dim: int, discrete: bool,
                 act_low: Optional[torch.Tensor] = None, act_high: Optional[torch.Tensor] = None) -> None:
        super().__init__()
        self.policy, self.kind, self.in_dim, self.discrete = policy, kind, int(in_dim), discrete
        if act_low is not None:
            self.register_buffer("act_low", act_low.float().clone())
            self.register_buffer("act_high", act_high.float().clone())
        self.requires_grad_(False)
        self.eval()

    @torch.no_grad()
    def labels(self, raw: torch.Tensor) -> torch.Tensor:
        """The teacher's greedy action parameters for raw inputs ``[B, in_dim]``."""
        raw = raw.float().reshape(raw.shape[0], -1)
        if self.kind == "rllib_fast":
            p, _ = self.policy.dist_params(self.policy.policy_input(raw))
            return p
        out = self.policy(raw)
        if self.discrete:
            return out
        # rsl_rl acts in the env's units; the student's policy units map [-1, 1] onto the bounds
        return 2.0 * (out - self.act_low) / (self.act_high - self.act_low) - 1.0


def load_teacher(path: Any, activation: str, in_dim: int, action_space: Any, device: Any) -> Teacher:
    """The teacher of ``teacher_checkpoint`` = ``path`` for a student acting in
    ``action_space`` whose teacher reads inputs of width ``in_dim``; one-line
    ValueError when the checkpoint does not fit."""
    p = pathlib.Path(str(path))
    discrete = hasattr(action_space, "n")
    n_out = int(action_space.n) if discrete else int(torch.Size(action_space.shape).numel())
    low = high = None
    if not discrete:
        low = torch.as_tensor(action_space.low, dtype=torch.float32).reshape(-1)
        high = torch.as_tensor(action_space.high, dtype=torch.float32).reshape(-1)
    if p.is_dir():
        from ...core.export import ExportError, load_policy_module

        try:
            module = load_policy_module(p)
        except ExportError as err:
            raise ValueError(f"teacher_checkpoint: {err}") from None
        if not hasattr(module, "dist_params"):
            raise ValueError(f"teacher_checkpoint: {p} holds a {type(module).__name__}; allowed: an actor-critic "
                             "policy (FastPPO, FastA2C, ...) or an rsl_rl checkpoint file")
        if getattr(module, "actor_recurrent", False):   # its labels would need a memory per env
            raise ValueError(f"teacher_checkpoint: {p} holds a recurrent policy (rnn_type); allowed: a "
                             "feed-forward actor-critic policy (the teacher labels a rollout in one batched pass)")
        width = int(torch.Size(module.observation_space.shape).numel())
        kind = "rllib_fast"
        policy = module
    elif p.is_file():
        state = torch.load(str(p), map_location="cpu", weights_only=False)
        if isinstance(state, dict) and "actor_state_dict" in state:
            state = state["actor_state_dict"]
        if not isinstance(state, dict):
            raise ValueError(f"teacher_checkpoint: {p} holds a {type(state).__name__}; allowed: an rsl_rl runner "
                             "checkpoint or an rsl_rl actor's state dict")
        policy = RslRlActor(state, activation)
        width, kind = policy.in_dim, "rsl_rl"
        if policy.out_dim != n_out:
            raise ValueError(f"teacher_checkpoint: the rsl_rl actor outputs {policy.out_dim} values; the student "
                             f"acts with {n_out}")
    else:
        raise ValueError(f"teacher_checkpoint: {p} does not exist; allowed: an rllib_fast checkpoint directory or "
                         "an rsl_rl checkpoint file")
    if width != in_dim:
        raise ValueError(f"teacher_checkpoint: the teacher reads {width} inputs, the teacher group of this env "
                         f"has {in_dim} (teacher_obs selects 'states' or 'obs')")
    return Teacher(policy, kind, width, discrete, low, high).to(device)
