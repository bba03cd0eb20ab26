"""Recurrent memory (LSTM or GRU) over a batch of env streams, with its state as one explicit tensor.

The state of a memory is a single tensor ``[K, L, B, H]``: K = 2 parts for an
LSTM (hidden and cell state), 1 for a GRU; L layers; B streams (envs); H units.
Nothing is kept inside the module, so the algorithm owns (and checkpoints) the
state, a rollout step is a pure function ``(x, state) -> (out, state)``, and a
minibatch replays whole sequences from their stored start state
(:meth:`RecurrentMemory.unroll`).

Episode ends are handled by zeroing: ``forget(state, ended)`` before the next
step, and in :meth:`~RecurrentMemory.unroll` the ``starts`` mask zeroes the
state in front of every step that begins a new episode. The replay therefore
equals rsl_rl's split-and-pad scheme (each trajectory from its stored start
state, zero after an episode end, no gradient across the boundary) with static
shapes: the update loops over time, never over envs, and never reads a
data-dependent count on the host.
"""
from __future__ import annotations

from typing import Tuple

import torch
from torch import nn

#: the recurrent cells the ``rnn_type`` key offers
RNN_TYPES = ("lstm", "gru")


class RecurrentMemory(nn.Module):
    """An ``nn.LSTM``/``nn.GRU`` (PyTorch's default init, rsl_rl's) stepped or
    unrolled over ``[T, B, in_dim]`` with an explicit ``[K, L, B, H]`` state."""

    def __init__(self, in_dim: int, hidden_size: int, num_layers: int = 1, rnn_type: str = "lstm") -> None:
        super().__init__()
        if rnn_type not in RNN_TYPES:
            raise ValueError(f"RecurrentMemory: rnn_type = {rnn_type!r}; allowed: {', '.join(RNN_TYPES)}")
        cell = nn.LSTM if rnn_type == "lstm" else nn.GRU
        self.rnn = cell(input_size=in_dim, hidden_size=hidden_size, num_layers=num_layers)
        self.rnn_type, self.hidden_size, self.num_layers = rnn_type, hidden_size, num_layers
        self.parts = 2 if rnn_type == "lstm" else 1

    def initial_state(self, batch: int, device=None) -> torch.Tensor:
        """The state of ``batch`` streams that have seen nothing: zeros ``[K, L, B, H]``."""
        return torch.zeros(self.parts, self.num_layers, batch, self.hidden_size, device=device)

    @staticmethod
    def forget(state: torch.Tensor, ended: torch.Tensor) -> torch.Tensor:
        """``state`` with the streams ``ended`` (bool ``[B]``) zeroed (a multiply: no host sync)."""
        return state * (~ended).to(state.dtype).view(1, 1, -1, 1)

    def run(self, x: torch.Tensor, state: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """The cell over a ``[S, B, in_dim]`` sequence from ``state`` with no resets in between:
        outputs ``[S, B, H]`` and the state after the last step."""
        if self.parts == 2:
            out, (h, c) = self.rnn(x, (state[0], state[1]))
            return out, torch.stack((h, c))
        out, h = self.rnn(x, state[0])
        return out, h.unsqueeze(0)

    def step(self, x: torch.Tensor, state: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """One step for a batch: ``x [B, in_dim]`` -> output ``[B, H]`` and the next state."""
        out, state = self.run(x.unsqueeze(0), state)
        return out.squeeze(0), state

    def unroll(self, x: torch.Tensor, state: torch.Tensor, starts: torch.Tensor,
               final_x: torch.Tensor | None = None):
        """Replay ``x [T, B, in_dim]`` from ``state`` (the state before step 0), zeroing a
        stream's state in front of every step ``starts [T, B]`` marks (the first step of
        an episode). Returns the outputs ``[T, B, H]`` and the state after step T-1
        (before any reset); with ``final_x [T, B, in_dim]`` (each step's true next
        input, e.g. ``final_obs``) also the outputs ``[T, B, H]`` of one more step on it
        from the state after step t -- what a recurrent critic bootstraps from."""
        keep = (~starts).to(x.dtype).view(starts.shape[0], 1, 1, -1, 1)
        outs, final_outs = [], []
        for t in range(x.shape[0]):
            state = state * keep[t]
            out, state = self.run(x[t:t + 1], state)
            outs.append(out[0])
            if final_x is not None:
                final_outs.append(self.run(final_x[t:t + 1], state)[0][0])
        out = torch.stack(outs)
        if final_x is None:
            return out, state
        return out, state, torch.stack(final_outs)
