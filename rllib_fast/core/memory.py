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

The parameters are an ``nn.LSTM``/``nn.GRU``'s (its init and its
``weight_ih_l0``... names, so weights move between this and rsl_rl's
``RNNModel`` as they are), but the cell is written out here (PyTorch's gate
equations): the input projections of a whole sequence are one matrix product,
each step is one more (``h @ W_hh``) and a few elementwise ops. Why: a call
of ``nn.LSTM`` has a fixed cost that dominates at these sizes on a CPU, and a
replay with resets takes one call per step; the written-out cell also traces
to ONNX as plain matrix products and takes a leading member axis by batched
products.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import nn
from torch.nn import functional as F

#: the recurrent cells the ``rnn_type`` key offers
RNN_TYPES = ("lstm", "gru")


def cell_update(parts: int, gx: torch.Tensor, gh: torch.Tensor, h: torch.Tensor, c: Optional[torch.Tensor]):
    """PyTorch's LSTM (``parts`` 2: gates i, f, g, o) or GRU (1: gates r, z, n) update
    from the input and hidden projections ``gx``, ``gh`` (biases included): the
    next ``(h, c)`` (``c`` None for a GRU)."""
    if parts == 2:
        i, f, g, o = (gx + gh).chunk(4, -1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        return torch.sigmoid(o) * torch.tanh(c), c
    xr, xz, xn = gx.chunk(3, -1)
    hr, hz, hn = gh.chunk(3, -1)
    r, z = torch.sigmoid(xr + hr), torch.sigmoid(xz + hz)
    n = torch.tanh(xn + r * hn)
    return n + z * (h - n), None


class RecurrentMemory(nn.Module):
    """An LSTM/GRU (``nn.LSTM``/``nn.GRU`` parameters, PyTorch's default init:
    rsl_rl's) stepped or unrolled over ``[T, B, in_dim]`` with an explicit
    ``[K, L, B, H]`` state."""

    def __init__(self, in_dim: int, hidden_size: int, num_layers: int = 1, rnn_type: str = "lstm") -> None:
        super().__init__()
        if rnn_type not in RNN_TYPES:
            raise ValueError(f"RecurrentMemory: rnn_type = {rnn_type!r}; allowed: {', '.join(RNN_TYPES)}")
        cell = nn.LSTM if rnn_type == "lstm" else nn.GRU
        #: the parameter container (``weight_ih_l{k}``, ``weight_hh_l{k}``, ``bias_ih_l{k}``, ``bias_hh_l{k}``)
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

    def _layer(self, k: int):
        r = self.rnn
        return (getattr(r, f"weight_ih_l{k}"), getattr(r, f"bias_ih_l{k}"),
                getattr(r, f"weight_hh_l{k}"), getattr(r, f"bias_hh_l{k}"))

    def _cell(self, gx: torch.Tensor, h: torch.Tensor, c: Optional[torch.Tensor], w_hh, b_hh):
        """One step of one layer from the input projection ``gx`` (bias included)."""
        return cell_update(self.parts, gx, F.linear(h, w_hh, b_hh), h, c)

    def _run(self, x: torch.Tensor, state: torch.Tensor, keep: Optional[torch.Tensor],
             final_x: Optional[torch.Tensor] = None):
        """Layer by layer over ``x [T, B, in]`` (``keep [T, B, 1]``: 0 zeroes the state
        before that step); returns outputs, the end state, and the outputs of one
        more step on ``final_x`` from each step's state (or None)."""
        lstm = self.parts == 2
        ends = []
        for k in range(self.num_layers):
            w_ih, b_ih, w_hh, b_hh = self._layer(k)
            gx = F.linear(x, w_ih, b_ih)   # every step's input projection at once
            gfx = None if final_x is None else F.linear(final_x, w_ih, b_ih)
            h, c = state[0, k], (state[1, k] if lstm else None)
            outs, final_outs = [], []
            for t in range(x.shape[0]):
                if keep is not None:
                    h = h * keep[t]
                    c = c * keep[t] if lstm else None
                h, c = self._cell(gx[t], h, c, w_hh, b_hh)
                outs.append(h)
                if gfx is not None:
                    final_outs.append(self._cell(gfx[t], h, c, w_hh, b_hh)[0])
            x = torch.stack(outs)
            final_x = None if gfx is None else torch.stack(final_outs)
            ends.append(torch.stack((h, c)) if lstm else h.unsqueeze(0))
        return x, torch.stack(ends, 1), final_x

    def step(self, x: torch.Tensor, state: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """One step for a batch: ``x [B, in_dim]`` -> output ``[B, H]`` and the next state."""
        out, state, _ = self._run(x.unsqueeze(0), state, None)
        return out.squeeze(0), state

    def unroll(self, x: torch.Tensor, state: torch.Tensor, starts: torch.Tensor,
               final_x: torch.Tensor | None = None):
        """Replay ``x [T, B, in_dim]`` from ``state`` (the state before step 0), zeroing a
        stream's state in front of every step ``starts [T, B]`` marks (the first step of
        an episode). Returns the outputs ``[T, B, H]`` and the state after step T-1
        (before any reset); with ``final_x [T, B, in_dim]`` (each step's true next
        input, e.g. ``final_obs``) also the outputs ``[T, B, H]`` of one more step on it
        from the state after step t -- what a recurrent critic bootstraps from."""
        keep = (~starts).to(x.dtype).unsqueeze(-1)
        out, state, final_out = self._run(x, state, keep, final_x)
        return (out, state) if final_x is None else (out, state, final_out)
