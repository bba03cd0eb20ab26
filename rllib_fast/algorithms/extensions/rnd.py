"""Random network distillation curiosity (Burda et al., "Exploration by Random
Network Distillation", 2018; Schwarke et al., CoRL 2023; rsl_rl's
``rnd_cfg``), FastPPO's ``rnd`` key.

A fixed random ``target`` network embeds chosen observation terms; a
``predictor`` network learns to reproduce the embedding. Its error is large on
states seen rarely, and is the intrinsic reward: ``weight * ||target(s') -
predictor(s')||`` of each transition's next state ``s'`` (the true next state:
``final_obs`` where an episode ended). As rsl_rl does, the intrinsic reward is
*added to the extrinsic reward* before GAE -- one critic learns the sum (no
second value head) -- so episode returns in the metrics stay extrinsic while
the policy maximises both.

Settings (a dict; rsl_rl's names):

* ``weight`` and ``weight_schedule`` (None, or ``{"mode": "constant" | "step" |
  "linear", "initial_step", "final_step", "final_value"}``; steps count batched
  env steps of the rollouts, rsl_rl's counter);
* ``obs_group``: ``"obs"`` (the actor's observations) or ``"states"`` (the
  source's privileged states), ``obs_indices``: the terms of that group (None:
  all);
* ``num_outputs``, ``predictor_hidden_dims``, ``target_hidden_dims`` (-1 in a
  list: the input width), ``activation``;
* ``state_normalization``: running mean/std of the inputs;
  ``reward_normalization``: intrinsic rewards divided by the running std of
  their per-env discounted sum (Burda et al.'s; discount: the algorithm's gamma);
* ``learning_rate``: the predictor's own Adam. The predictor takes one step per
  PPO minibatch step (``num_epochs * num_minibatches`` per iteration) on the
  rollout's next-state inputs.

The intrinsic rewards of a rollout are computed in one batched pass after it
(the inputs are recorded during it), so normalisers update once per rollout.
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional

import torch
from torch import nn

from ...core.nets import ACTIVATIONS, mlp
from ...core.normalize import RunningMeanStd
from ..asymmetric import final_states
from .settings import dict_key_error

RND_KEYS = {"weight": 1.0, "weight_schedule": None, "obs_group": "obs", "obs_indices": None, "num_outputs": 16,
            "predictor_hidden_dims": [64, 64], "target_hidden_dims": [64, 64], "activation": "elu",
            "state_normalization": True, "reward_normalization": False, "learning_rate": 1e-3}
SCHEDULE_MODES = ("constant", "step", "linear")


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and abs(v) != float("inf")


def _dims(v: Any) -> bool:
    return isinstance(v, (list, tuple)) and all(isinstance(h, int) and not isinstance(h, bool)
                                                and (h > 0 or h == -1) for h in v)


def rnd_error(value: Any, owner: str = "FastPPOConfig") -> Optional[str]:
    """Why ``rnd`` = ``value`` is not allowed (one line), or None."""
    if value is None:
        return None
    shape = dict_key_error("rnd", value, RND_KEYS, owner)
    if shape:
        return shape
    v = {**RND_KEYS, **dict(value)}
    checks = [
        ("weight", _number(v["weight"]) and v["weight"] >= 0, "a finite number >= 0"),
        ("obs_group", v["obs_group"] in ("obs", "states"), "'obs' or 'states'"),
        ("obs_indices", v["obs_indices"] is None or (isinstance(v["obs_indices"], (list, tuple)) and v["obs_indices"]
                                                       and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0
                                                               for i in v["obs_indices"])),
         "None or a non-empty list of indices >= 0"),
        ("num_outputs", isinstance(v["num_outputs"], int) and not isinstance(v["num_outputs"], bool)
         and v["num_outputs"] > 0, "an int > 0"),
        ("predictor_hidden_dims", _dims(v["predictor_hidden_dims"]), "a list of ints > 0 (or -1: the input width)"),
        ("target_hidden_dims", _dims(v["target_hidden_dims"]), "a list of ints > 0 (or -1: the input width)"),
        ("activation", v["activation"] in ACTIVATIONS, "one of " + ", ".join(map(repr, ACTIVATIONS))),
        ("state_normalization", isinstance(v["state_normalization"], bool), "True or False"),
        ("reward_normalization", isinstance(v["reward_normalization"], bool), "True or False"),
        ("learning_rate", _number(v["learning_rate"]) and v["learning_rate"] > 0, "a number > 0"),
    ]
    for key, ok, allowed in checks:
        if not ok:
            return f"{owner}: `rnd.{key}` = {v[key]!r} is not allowed; allowed: {allowed}"
    sched = v["weight_schedule"]
    if sched is not None:
        if not isinstance(sched, Mapping) or sched.get("mode") not in SCHEDULE_MODES:
            return (f"{owner}: `rnd.weight_schedule` = {sched!r}; allowed: None or a dict with 'mode' one of "
                    f"{', '.join(map(repr, SCHEDULE_MODES))}")
        need = {"constant": (), "step": ("final_step", "final_value"),
                "linear": ("initial_step", "final_step", "final_value")}[sched["mode"]]
        for key in need:
            if not _number(sched.get(key)):
                return (f"{owner}: `rnd.weight_schedule.{key}` = {sched.get(key)!r}; allowed: a number "
                        f"(mode {sched['mode']!r} needs {', '.join(need)})")
        if sched["mode"] == "linear" and not sched["final_step"] > sched["initial_step"]:
            return (f"{owner}: `rnd.weight_schedule.final_step` = {sched['final_step']!r}; allowed: > "
                    f"initial_step ({sched['initial_step']!r})")
    return None


def scheduled_weight(weight: float, schedule: Optional[Mapping[str, Any]], step: int) -> float:
    """The intrinsic reward's weight at ``step`` (rsl_rl's three schedules)."""
    if schedule is None or schedule["mode"] == "constant":
        return weight
    if schedule["mode"] == "step":
        return weight if step < schedule["final_step"] else float(schedule["final_value"])
    lo, hi, final = schedule["initial_step"], schedule["final_step"], float(schedule["final_value"])
    if step < lo:
        return weight
    if step > hi:
        return final
    return weight + (final - weight) * (step - lo) / (hi - lo)


class RandomNetworkDistillation(nn.Module):
    """The curiosity extension an algorithm holds (None when ``rnd`` is off).

    ``record(t, step)`` keeps each env step's next-state inputs; after the
    rollout ``add_intrinsic_rewards(rewards)`` adds the weighted intrinsic
    rewards to the ``[T, N]`` reward storage; ``learn(settings)`` trains the
    predictor. Checkpointed whole (networks, normalisers, the per-env
    discounted sums and the schedule's step counter), its optimizer beside it."""

    def __init__(self, settings: Mapping[str, Any], input_width: int, horizon: int, num_envs: int,
                 gamma: float, device: Any) -> None:
        super().__init__()
        s = {**RND_KEYS, **dict(settings)}
        self.weight, self.weight_schedule = float(s["weight"]), s["weight_schedule"]
        self.obs_group = s["obs_group"]
        idx = s["obs_indices"]
        self.register_buffer("indices", None if idx is None else torch.as_tensor(list(idx), dtype=torch.long),
                             persistent=False)
        width = input_width if idx is None else len(idx)
        self.gamma = float(gamma)
        hidden = lambda dims: [width if h == -1 else int(h) for h in dims]   # noqa: E731
        self.predictor = mlp(width, hidden(s["predictor_hidden_dims"]), int(s["num_outputs"]), s["activation"],
                             init="torch")
        self.target = mlp(width, hidden(s["target_hidden_dims"]), int(s["num_outputs"]), s["activation"],
                          init="torch")
        self.target.requires_grad_(False)
        self.state_norm = RunningMeanStd((width,)) if s["state_normalization"] else None
        self.reward_norm = RunningMeanStd((), clip=float("inf")) if s["reward_normalization"] else None
        #: per-env discounted sum of intrinsic rewards (what reward normalisation measures the scale of)
        self.register_buffer("discounted", torch.zeros(num_envs))
        #: the current rollout's next-state inputs (rewritten every rollout)
        self.register_buffer("inputs", torch.zeros(horizon, num_envs, width), persistent=False)
        #: batched env steps so far (the weight schedule's clock)
        self.env_steps = 0
        self.to(device)
        self.optimizer = torch.optim.Adam(self.predictor.parameters(), lr=float(s["learning_rate"]))

    def get_extra_state(self) -> Dict[str, Any]:
        return {"env_steps": self.env_steps}

    def set_extra_state(self, state: Dict[str, Any]) -> None:
        self.env_steps = int(state["env_steps"])

    def forward(self, *args, **kwargs):
        raise RuntimeError("RandomNetworkDistillation has no forward; use intrinsic_rewards / add_intrinsic_rewards")

    # -- rollout --------------------------------------------------------------------------
    def select(self, x: torch.Tensor) -> torch.Tensor:
        """The chosen terms of a flat ``[..., D]`` group."""
        x = x.float()
        return x if self.indices is None else x.index_select(-1, self.indices)

    def record(self, t: int, step: Any) -> None:
        """Keep env step ``t``'s next-state inputs (``final_obs``, or the states that go with it)."""
        src = step.final_obs if self.obs_group == "obs" else final_states(step)
        self.inputs[t].copy_(self.select(src.reshape(src.shape[0], -1)))

    def embed_inputs(self, x: torch.Tensor) -> torch.Tensor:
        return x if self.state_norm is None else self.state_norm.normalize(x)

    @torch.no_grad()
    def prediction_error(self, x: torch.Tensor) -> torch.Tensor:
        """``||target(x) - predictor(x)||`` per row of normalised inputs ``x``."""
        return torch.linalg.vector_norm(self.target(x) - self.predictor(x), dim=-1)

    @torch.no_grad()
    def intrinsic_rewards(self) -> torch.Tensor:
        """The recorded rollout's weighted intrinsic rewards ``[T, N]``: the input
        statistics absorb the rollout first, then the errors are scaled by the
        running std of the per-env discounted sums (reward normalisation) and by
        each step's scheduled weight."""
        T = self.inputs.shape[0]
        if self.state_norm is not None:
            self.state_norm.update(self.inputs)
        err = self.prediction_error(self.embed_inputs(self.inputs))
        if self.reward_norm is not None:
            sums = torch.empty_like(err)
            running = self.discounted
            for t in range(T):   # a scan over the rollout's T steps, batched over envs
                running = running * self.gamma + err[t]
                sums[t] = running
            self.discounted.copy_(running)
            self.reward_norm.update(sums)
            err = err / torch.sqrt(self.reward_norm.var + 1e-8).to(err.dtype)
        weights = [scheduled_weight(self.weight, self.weight_schedule, self.env_steps + t + 1) for t in range(T)]
        self.env_steps += T
        return err * torch.tensor(weights, dtype=err.dtype, device=err.device)[:, None]

    @torch.no_grad()
    def add_intrinsic_rewards(self, rewards: torch.Tensor) -> Dict[str, Any]:
        """Add the rollout's intrinsic rewards to ``rewards`` ``[T, N]`` in place;
        returns the statistics to log."""
        r_int = self.intrinsic_rewards()
        rewards.add_(r_int)
        return {"rnd_intrinsic_reward": r_int.mean(),
                "rnd_weight": scheduled_weight(self.weight, self.weight_schedule, self.env_steps)}

    # -- learning ----------------------------------------------------------------------------
    def loss(self, x: torch.Tensor) -> torch.Tensor:
        """The predictor's MSE to the frozen target on normalised inputs ``x``."""
        return nn.functional.mse_loss(self.predictor(x), self.target(x))

    def learn(self, settings: Any, generator: Optional[torch.Generator] = None) -> Dict[str, Any]:
        """``num_epochs * num_minibatches`` predictor steps on the rollout's inputs
        (PPO's minibatch shape); the shuffles draw from ``generator``, the
        algorithm's shuffle generator (None: the algorithm's own stream)."""
        x = self.embed_inputs(self.inputs.reshape(-1, self.inputs.shape[-1]))
        B = x.shape[0]
        mb = B // settings.num_minibatches
        total = torch.zeros((), device=x.device)
        for _ in range(settings.num_epochs):
            perm = torch.randperm(B, device=x.device, generator=generator)
            for i in range(settings.num_minibatches):
                loss = self.loss(x[perm[i * mb:(i + 1) * mb]])
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                self.optimizer.step()
                total += loss.detach()
        return {"rnd_loss": total / (settings.num_epochs * settings.num_minibatches)}


def make_rnd(value: Optional[Mapping[str, Any]], config: Any, env: Any, device: Any
             ) -> Optional[RandomNetworkDistillation]:
    """The extension for FastPPO's ``rnd`` key (None: off)."""
    if value is None:
        return None
    group = value.get("obs_group", RND_KEYS["obs_group"])
    space = env.single_observation_space if group == "obs" else getattr(env, "single_state_space", None)
    if space is None:
        raise ValueError(f"FastPPO: `rnd.obs_group` = 'states' but env {config.env!r} has no privileged states; "
                         "allowed: 'obs'")
    width = 1
    for d in space.shape:
        width *= int(d)
    idx: Optional[List[int]] = value.get("obs_indices")
    if idx is not None and max(idx) >= width:
        raise ValueError(f"FastPPO: `rnd.obs_indices` = {list(idx)} exceeds the {group!r} group's width {width}; "
                         f"allowed: indices < {width}")
    return RandomNetworkDistillation(value, width, config.resolved_horizon(), env.num_envs, config.gamma, device)
