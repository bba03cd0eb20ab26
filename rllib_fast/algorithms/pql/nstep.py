"""n-step aggregation on the acting side, before transitions reach a replay.

PQL's Actor turns every lock-step env step into finished n-step transitions
``(s_t, a_t, R_t^(m), s_{t+m}, discount)`` on its own device, so learners in
other threads or processes receive ready-to-use tuples and never need the
episode structure. A ring of the last ``n`` steps per env is kept; after each
push the window that starts ``n - 1`` steps ago is complete and is emitted.

Correctness rules (the three bugs of the reference code this avoids):

* the window is cut at the first episode end, termination *or* truncation, so
  rewards never leak across an auto-reset; the bootstrap observation is that
  step's ``final_obs`` (the true terminal observation on a time-out), and the
  bootstrap discount is ``gamma^m`` on a truncation and 0 on a termination —
  time-outs are bootstrapped, never treated as terminals;
* ``gamma`` is a constructor argument (one source: the algorithm's config),
  never a hard-coded default;
* a step with ``valid=False`` (it straddles a one-step-late auto-reset) is
  never included: a window starting there is emitted with ``valid=False`` (the
  replay masks it) and a window reaching it is cut before it.

Everything is batched tensor ops over ``[n, N]``; which window is emitted is
known from a host counter, so there is no host synchronisation.
"""
from __future__ import annotations

from typing import Dict, Optional

import torch


class NStepAggregator:
    def __init__(self, num_envs: int, n_step: int, gamma: float, obs_shape: tuple, action_shape: tuple,
                 device: torch.device, obs_dtype: torch.dtype = torch.float32):
        if n_step < 1:
            raise ValueError(f"n_step must be >= 1, got {n_step}")
        self.N, self.n, self.gamma, self.device = num_envs, n_step, float(gamma), device
        n, N = n_step, num_envs
        self.buf: Dict[str, torch.Tensor] = {
            "obs": torch.zeros((n, N, *obs_shape), dtype=obs_dtype, device=device),
            "action": torch.zeros((n, N, *action_shape), dtype=torch.float32, device=device),
            "reward": torch.zeros((n, N), dtype=torch.float32, device=device),
            "terminated": torch.zeros((n, N), dtype=torch.bool, device=device),
            "done": torch.zeros((n, N), dtype=torch.bool, device=device),
            "final_obs": torch.zeros((n, N, *obs_shape), dtype=obs_dtype, device=device),
            "valid": torch.zeros((n, N), dtype=torch.bool, device=device),
        }
        self.t = 0  # steps pushed (host int)
        self._powers = gamma ** torch.arange(n + 1, dtype=torch.float32, device=device)

    def push(self, obs, action, reward, terminated, truncated, final_obs,
             valid: Optional[torch.Tensor] = None) -> Optional[Dict[str, torch.Tensor]]:
        """Record one lock-step transition (copied: envs may reuse buffers);
        return the n-step batch of the window that just completed, or None
        during the first ``n - 1`` steps."""
        slot = self.t % self.n
        b = self.buf
        b["obs"][slot].copy_(obs)
        b["action"][slot].copy_(action)
        b["reward"][slot].copy_(reward)
        b["terminated"][slot].copy_(terminated)
        b["done"][slot].copy_(terminated | truncated)
        b["final_obs"][slot].copy_(final_obs)
        if valid is None:
            b["valid"][slot].fill_(True)
        else:
            b["valid"][slot].copy_(valid)
        self.t += 1
        if self.t < self.n:
            return None
        return self._window((self.t - self.n) % self.n)

    def cut_episodes(self) -> None:
        """End every env's in-flight window at the last pushed step, as a
        truncation (bootstrapped from its ``final_obs``, the true next
        observation). See :meth:`SegmentedReplay.cut_episodes`."""
        if self.t > 0:
            self.buf["done"][(self.t - 1) % self.n].fill_(True)

    def _window(self, start: int) -> Dict[str, torch.Tensor]:
        n, b = self.n, self.buf
        order = [(start + k) % n for k in range(n)]
        idx = torch.tensor(order, device=self.device) if n > 1 else None
        take = (lambda x: x.index_select(0, idx)) if idx is not None else (lambda x: x)
        done, valid = take(b["done"]), take(b["valid"])          # [n, N]
        ended_before = torch.cumsum(done.long(), 0) - done.long()
        invalid_upto = torch.cumsum((~valid).long(), 0)
        included = (ended_before == 0) & (invalid_upto == 0)    # [n, N]
        m = included.long().sum(0)                               # 0 only if the start step is invalid
        ret = (take(b["reward"]) * self._powers[:n].unsqueeze(1) * included.float()).sum(0)
        last = (m - 1).clamp_min(0)                              # window position of the last included step
        cols = torch.arange(self.N, device=self.device)
        final_obs = take(b["final_obs"])
        term = take(b["terminated"])
        return {
            "obs": b["obs"][start].clone(),
            "action": b["action"][start].clone(),
            "reward": ret,
            "next_obs": final_obs[last, cols],
            "discount": self._powers[m] * (~term[last, cols]).float(),
            "valid": valid[0].clone(),
        }

    def state_dict(self) -> Dict[str, object]:
        return {"t": self.t, "buf": {k: v.detach().cpu().clone() for k, v in self.buf.items()}}

    def load_state_dict(self, state: Dict[str, object]) -> None:
        self.t = int(state["t"])
        for k, v in state["buf"].items():
            self.buf[k].copy_(v)
