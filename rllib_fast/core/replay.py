"""Device-resident replay organised by env, n-step windows, prioritized sampling.

Layout (Stooke & Abbeel §5.3, "replay organised by simulator"): every field is
a ``[C, N, ...]`` tensor, so env ``i``'s history is column ``i``, a contiguous
ring of ``C = capacity // N`` steps written in lock-step with the others.
n-step windows therefore never cross envs, and are cut at the first episode
end inside the window; the bootstrap observation is the stored ``next_obs``
(the env's ``final_obs``) of the window's last step, which is the terminal
observation when an episode was truncated there. Transitions marked invalid
(straddling a late auto-reset) get priority 0 under prioritized replay (never
drawn); uniform sampling may draw them with importance weight 0, so they take
a batch slot but contribute nothing to the loss.

Prioritized replay uses a sum-tree held in one device tensor; updates and
stratified sampling walk the tree level by level as batched tensor ops (no
Python loop over samples, no host sync).
"""
from __future__ import annotations

import math
from typing import Dict, Optional, Tuple

import torch


class SumTree:
    """Binary sum-tree over ``capacity`` leaves in a flat tensor of size 2P.

    Node ``k`` has children ``2k`` and ``2k+1``; leaves live at ``P + i``;
    the root (index 1) holds the total priority.
    """

    def __init__(self, capacity: int, device: torch.device):
        self.capacity = capacity
        self.levels = max(1, math.ceil(math.log2(max(2, capacity))))
        self.P = 1 << self.levels
        self.tree = torch.zeros(2 * self.P, dtype=torch.float64, device=device)

    @property
    def total(self) -> torch.Tensor:
        return self.tree[1]

    def leaves(self) -> torch.Tensor:
        return self.tree[self.P:self.P + self.capacity]

    def update(self, idx: torch.Tensor, priority: torch.Tensor) -> None:
        """Set leaf priorities and refresh their ancestors (duplicates in
        ``idx`` are fine: recomputing a parent from its children is idempotent)."""
        node = idx.long() + self.P
        self.tree[node] = priority.to(self.tree.dtype)
        for _ in range(self.levels):
            node = torch.div(node, 2, rounding_mode="floor")
            self.tree[node] = self.tree[2 * node] + self.tree[2 * node + 1]

    def sample(self, batch_size: int, generator: Optional[torch.Generator] = None) -> Tuple[torch.Tensor, torch.Tensor]:
        """Stratified proportional sampling: one draw per equal slice of the
        total mass. Returns (leaf indices, their priorities)."""
        dev = self.tree.device
        u = (torch.arange(batch_size, device=dev, dtype=self.tree.dtype)
             + torch.rand(batch_size, device=dev, dtype=self.tree.dtype, generator=generator)) / batch_size
        u = u * self.total
        node = torch.ones(batch_size, dtype=torch.long, device=dev)
        for _ in range(self.levels):
            left = self.tree[2 * node]
            go_right = (u > left) & (self.tree[2 * node + 1] > 0)
            u = torch.where(go_right, u - left, u)
            node = 2 * node + go_right.long()
        return node - self.P, self.tree[node]


class SegmentedReplay:
    """Replay of ``capacity`` transitions split into N per-env segments.

    ``fields``: name -> (per-env shape, dtype) for ``obs``, ``next_obs`` and
    anything else; the buffer itself adds ``action``, ``reward``,
    ``terminated``, ``done`` and ``valid`` bookkeeping via :meth:`add`.
    """

    def __init__(self, capacity: int, num_envs: int, obs_shape: tuple, obs_dtype: torch.dtype,
                 action_shape: tuple, action_dtype: torch.dtype, device: torch.device,
                 prioritized: bool = False, alpha: float = 0.6):
        self.N = num_envs
        self.C = max(1, capacity // num_envs)
        self.device = device
        C, N = self.C, self.N
        self.data: Dict[str, torch.Tensor] = {
            "obs": torch.zeros((C, N, *obs_shape), dtype=obs_dtype, device=device),
            "next_obs": torch.zeros((C, N, *obs_shape), dtype=obs_dtype, device=device),
            "action": torch.zeros((C, N, *action_shape), dtype=action_dtype, device=device),
            "reward": torch.zeros((C, N), dtype=torch.float32, device=device),
            "terminated": torch.zeros((C, N), dtype=torch.bool, device=device),
            "done": torch.zeros((C, N), dtype=torch.bool, device=device),
            "valid": torch.zeros((C, N), dtype=torch.bool, device=device),
        }
        self.t = 0  # steps written (host int: the number of add() calls, known without a sync)
        self.prioritized = prioritized
        self.alpha = alpha
        if prioritized:
            self.tree = SumTree(C * N, device)
            self.max_priority = torch.ones((), dtype=torch.float64, device=device)

    @property
    def steps_stored(self) -> int:
        return min(self.t, self.C)

    def __len__(self) -> int:
        return self.steps_stored * self.N

    def add(self, obs, action, reward, terminated, done, next_obs, valid=None) -> None:
        """Write one lock-step transition for all N envs (copies: an env may
        overwrite its returned buffers in place)."""
        slot = self.t % self.C
        d = self.data
        d["obs"][slot].copy_(obs)
        d["next_obs"][slot].copy_(next_obs)
        d["action"][slot].copy_(action)
        d["reward"][slot].copy_(reward)
        d["terminated"][slot].copy_(terminated)
        d["done"][slot].copy_(done)
        if valid is None:
            d["valid"][slot].fill_(True)
        else:
            d["valid"][slot].copy_(valid)
        if self.prioritized:
            idx = torch.arange(slot * self.N, (slot + 1) * self.N, device=self.device)
            prio = self.max_priority.pow(self.alpha) * d["valid"][slot].to(torch.float64)
            self.tree.update(idx, prio)
        self.t += 1

    def clear(self) -> None:
        """Hold nothing, as when built (what a restore from a checkpoint saved
        without its replay leaves: the same state however the algorithm got here)."""
        self.t = 0
        if self.prioritized:
            self.tree.tree.zero_()
            self.max_priority.fill_(1.0)

    def cut_episodes(self) -> None:
        """End every env's episode at the last stored step, as a truncation
        (its stored ``next_obs`` is the true next observation, so windows
        bootstrap from it). For a restore whose source could not restore its
        own state: the next stored step starts from an unrelated observation,
        and no window may reach across."""
        if self.t > 0:
            self.data["done"][(self.t - 1) % self.C].fill_(True)

    # -- sampling ---------------------------------------------------------------
    def sample_uniform(self, batch_size: int, generator=None) -> Tuple[torch.Tensor, torch.Tensor]:
        """Uniform (slot, env) indices over stored steps; returns (flat index,
        weight) where weight is 0 for invalid transitions (masked, not redrawn:
        no host sync)."""
        S = self.steps_stored
        oldest = self.t - S
        pos = oldest + torch.randint(0, S, (batch_size,), device=self.device, generator=generator)
        env = torch.randint(0, self.N, (batch_size,), device=self.device, generator=generator)
        flat = (pos % self.C) * self.N + env
        w = self.data["valid"].reshape(-1)[flat].float()
        return flat, w

    def sample_prioritized(self, batch_size: int, beta: float, generator=None):
        """Proportional PER: P(i) = p_i^α / Σ p^α; returns (flat index, IS
        weight normalised by the batch maximum)."""
        flat, prio = self.tree.sample(batch_size, generator)
        prob = prio / self.tree.total.clamp_min(1e-12)
        w = (len(self) * prob.clamp_min(1e-12)).pow(-beta)
        w = (w / w.max()).float()
        return flat, w

    def update_priorities(self, flat: torch.Tensor, priority: torch.Tensor, eps: float = 1e-6) -> None:
        p = priority.detach().to(torch.float64).abs() + eps
        self.max_priority = torch.maximum(self.max_priority, p.max())
        valid = self.data["valid"].reshape(-1)[flat].to(torch.float64)
        self.tree.update(flat, p.pow(self.alpha) * valid)

    # -- n-step gather ------------------------------------------------------------
    def gather(self, flat: torch.Tensor, n_step: int, gamma: float) -> Dict[str, torch.Tensor]:
        """Batch for flat indices: obs, action, the n-step discounted reward,
        the bootstrap observation and its discount ``gamma^m * (1 - terminated)``.

        The window starting at the sampled step takes m <= n steps: it stops at
        the first episode end (termination or truncation) and at the newest
        stored step. After a truncation the bootstrap obs is the stored
        terminal observation, so time-outs are bootstrapped, terminations not.
        """
        C, N = self.C, self.N
        slot = torch.div(flat, N, rounding_mode="floor")
        env = flat % N
        # logical time of the sampled step, to know how many newer steps exist
        newest_slot = (self.t - 1) % C
        age = (newest_slot - slot) % C            # 0 for the newest step
        k = torch.arange(n_step, device=self.device)
        rows = (slot.unsqueeze(1) + k) % C          # [B, n]
        cols = env.unsqueeze(1).expand_as(rows)
        avail = k.unsqueeze(0) <= age.unsqueeze(1)  # step exists in the buffer
        d = self.data
        rew = d["reward"][rows, cols]
        done = d["done"][rows, cols] & avail
        # step j is included if it exists and no episode ended before it
        ended_before = torch.cumsum(done.long(), 1) - done.long()
        included = avail & (ended_before == 0)
        discounts = gamma ** k.to(torch.float32)
        ret = (rew * discounts * included.float()).sum(1)
        m = included.long().sum(1)                   # >= 1 (the sampled step itself)
        last = (slot + m - 1) % C
        term_last = d["terminated"][last, env]
        boot_discount = (gamma ** m.to(torch.float32)) * (~term_last).float()
        return {
            "obs": d["obs"][slot, env],
            "action": d["action"][slot, env],
            "return": ret,
            "next_obs": d["next_obs"][last, env],
            "discount": boot_discount,
            "steps": m,
        }

    # -- checkpointing ----------------------------------------------------------------
    def state_dict(self) -> Dict[str, object]:
        out = {"t": self.t, "data": {k: v.detach().cpu().clone() for k, v in self.data.items()}}
        if self.prioritized:
            out["tree"] = self.tree.tree.cpu().clone()
            out["max_priority"] = self.max_priority.cpu().clone()
        return out

    def load_state_dict(self, state: Dict[str, object]) -> None:
        self.t = int(state["t"])
        for k, v in state["data"].items():
            self.data[k].copy_(v)
        if self.prioritized:
            self.tree.tree.copy_(state["tree"])
            self.max_priority = state["max_priority"].to(self.device)
