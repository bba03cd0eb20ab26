"""``[T, N]`` on-policy storage and generalized advantage estimation.

Storage is preallocated once on the env's device and written by index each
step, so a rollout allocates nothing. GAE bootstraps from ``V(final_obs)``:
the value of the *true* next state of every transition. Because the contract
defines ``final_obs`` for every row (the terminal observation where an episode
ended, the next observation elsewhere), one batched critic pass over
``final_obs`` gives every bootstrap value, including time-outs, and no
transition ever bootstraps across an auto-reset.
"""
from __future__ import annotations

from typing import Dict, Optional

import torch


class RolloutStorage:
    """Named ``[T, N, *shape]`` tensors, allocated once.

    ``fields`` maps name -> (per-env shape, dtype). ``insert(t, **values)``
    writes step ``t``; ``flat(name)`` views a field as ``[T*N, ...]`` for
    minibatching.
    """

    def __init__(self, horizon: int, num_envs: int, fields: Dict[str, tuple], device: torch.device):
        self.horizon, self.num_envs, self.device = horizon, num_envs, device
        self.data: Dict[str, torch.Tensor] = {
            name: torch.zeros((horizon, num_envs, *shape), dtype=dtype, device=device)
            for name, (shape, dtype) in fields.items()
        }

    def __getitem__(self, name: str) -> torch.Tensor:
        return self.data[name]

    def insert(self, t: int, **values: torch.Tensor) -> None:
        for name, value in values.items():
            self.data[name][t].copy_(value)

    def flat(self, name: str) -> torch.Tensor:
        x = self.data[name]
        return x.reshape(self.horizon * self.num_envs, *x.shape[2:])


def compute_gae(rewards: torch.Tensor, values: torch.Tensor, next_values: torch.Tensor,
                terminated: torch.Tensor, done: torch.Tensor, gamma: float, lam: float,
                valid: Optional[torch.Tensor] = None) -> tuple:
    """Advantages and returns for ``[T, N]`` inputs.

    * ``next_values[t]`` is ``V(final_obs_t)``; it is zeroed where the episode
      terminated, and kept where it was truncated (time-out bootstrap).
    * The recursion is cut wherever an episode ended (``done``), so an
      advantage never mixes two episodes.
    * ``valid=False`` rows (a transition straddling an auto-reset) get a zero
      advantage and also cut the recursion; losses must mask them.

    Returns ``(advantages, returns)`` with ``returns = advantages + values``.
    """
    not_term = (~terminated).to(values.dtype)
    cont = (~done).to(values.dtype)
    deltas = rewards + gamma * not_term * next_values - values
    if valid is not None:
        v = valid.to(values.dtype)
        deltas = deltas * v
        cont = cont * v
    adv = torch.zeros_like(values)
    last = torch.zeros_like(values[0])
    for t in range(values.shape[0] - 1, -1, -1):
        # a cut at t stops t from seeing t+1; an invalid t+1 contributes nothing
        nxt_valid = 1.0 if valid is None or t + 1 >= values.shape[0] else valid[t + 1].to(values.dtype)
        last = deltas[t] + gamma * lam * cont[t] * nxt_valid * last
        adv[t] = last
    return adv, adv + values
