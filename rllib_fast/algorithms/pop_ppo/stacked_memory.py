"""K recurrent memories (a population's members) as one module with a leading member axis.

:class:`StackedRecurrentMemory` is :class:`~.memory.RecurrentMemory` for K
members at once: every parameter is the members' ``nn.LSTM``/``nn.GRU``
parameter stacked on a new first axis (``weight_ih_l0`` ``[K, G*H, in]``,
...), so a population's exploit copies a member's memory with the rest of its
weights (``core.stacked.copy_members``). The state is one explicit tensor
``[K, P, L, B, H]`` (members, P = 2 parts for an LSTM or 1 for a GRU, layers,
streams, units) that the algorithm owns and checkpoints; member k's slice is a
``RecurrentMemory`` state.

The cell equations are :func:`~.memory.cell_update`; the projections are one
batched product for all members. One member runs ``F.linear`` on its slice
instead, the kernel ``RecurrentMemory`` uses, so a population of one computes
FastPPO's recurrent module bit for bit.
"""
from __future__ import annotations

from typing import Optional, Sequence, Tuple

import torch
from torch import nn
from torch.nn import functional as F

from ...core.memory import RecurrentMemory, cell_update


class StackedRecurrentMemory(nn.Module):
    """K LSTMs/GRUs over ``[K, T, B, in]`` with an explicit ``[K, P, L, B, H]`` state,
    built from K :class:`RecurrentMemory` (their initial weights, member by member)."""

    def __init__(self, members: Sequence[RecurrentMemory]) -> None:
        super().__init__()
        first = members[0]
        self.num_members = len(members)
        self.rnn_type, self.hidden_size, self.num_layers = first.rnn_type, first.hidden_size, first.num_layers
        self.parts = first.parts
        for name, _ in first.rnn.named_parameters():
            stacked = torch.stack([dict(m.rnn.named_parameters())[name].detach() for m in members])
            self.register_parameter(name, nn.Parameter(stacked.clone()))

    def initial_state(self, batch: int, device=None) -> torch.Tensor:
        """Zeros ``[K, P, L, B, H]``: ``batch`` streams per member that have seen nothing."""
        return torch.zeros(self.num_members, self.parts, self.num_layers, batch, self.hidden_size, device=device)

    @staticmethod
    def forget(state: torch.Tensor, ended: torch.Tensor) -> torch.Tensor:
        """``state`` with the streams ``ended`` (bool ``[K, B]``) zeroed (a multiply: no host sync)."""
        K, B = ended.shape
        return state * (~ended).to(state.dtype).view(K, 1, 1, B, 1)

    def member(self, k: int, out: RecurrentMemory) -> RecurrentMemory:
        """``out`` (a ``RecurrentMemory`` of the same shape) with member k's weights."""
        with torch.no_grad():
            for name, p in out.rnn.named_parameters():
                p.copy_(getattr(self, name)[k])
        return out

    def _linear(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """``x [K, ..., in] -> [K, ..., out]`` with each member's ``w [out, in]``, ``b [out]``."""
        if self.num_members == 1:
            return F.linear(x[0], w[0], b[0]).unsqueeze(0)
        shape = x.shape
        out = torch.baddbmm(b.unsqueeze(1), x.reshape(shape[0], -1, shape[-1]), w.transpose(1, 2))
        return out.reshape(*shape[:-1], out.shape[-1])

    def _run(self, x: torch.Tensor, state: torch.Tensor, keep: Optional[torch.Tensor],
             final_x: Optional[torch.Tensor] = None):
        """``RecurrentMemory._run`` with the member axis first: ``x [K, T, B, in]``,
        ``keep [K, T, B, 1]`` (0 zeroes the state before that step)."""
        lstm = self.parts == 2
        ends = []
        for k in range(self.num_layers):
            w_ih, b_ih = getattr(self, f"weight_ih_l{k}"), getattr(self, f"bias_ih_l{k}")
            w_hh, b_hh = getattr(self, f"weight_hh_l{k}"), getattr(self, f"bias_hh_l{k}")
            gx = self._linear(x, w_ih, b_ih)
            gfx = None if final_x is None else self._linear(final_x, w_ih, b_ih)
            h, c = state[:, 0, k], (state[:, 1, k] if lstm else None)
            outs, final_outs = [], []
            for t in range(x.shape[1]):
                if keep is not None:
                    h = h * keep[:, t]
                    c = c * keep[:, t] if lstm else None
                h, c = cell_update(self.parts, gx[:, t], self._linear(h, w_hh, b_hh), h, c)
                outs.append(h)
                if gfx is not None:
                    final_outs.append(cell_update(self.parts, gfx[:, t], self._linear(h, w_hh, b_hh), h, c)[0])
            x = torch.stack(outs, 1)
            final_x = None if gfx is None else torch.stack(final_outs, 1)
            ends.append(torch.stack((h, c), 1) if lstm else h.unsqueeze(1))
        return x, torch.stack(ends, 2), final_x

    def step(self, x: torch.Tensor, state: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """One step: ``x [K, B, in]`` -> output ``[K, B, H]`` and the next state."""
        out, state, _ = self._run(x.unsqueeze(1), state, None)
        return out.squeeze(1), state

    def unroll(self, x: torch.Tensor, state: torch.Tensor, starts: torch.Tensor,
               final_x: Optional[torch.Tensor] = None):
        """``RecurrentMemory.unroll`` per member: ``x [K, T, B, in]`` from ``state``,
        zeroed in front of the steps ``starts [K, T, B]`` marks; outputs ``[K, T, B, H]``,
        the end state, and with ``final_x`` one more step's outputs from each step's state."""
        keep = (~starts).to(x.dtype).unsqueeze(-1)
        out, state, final_out = self._run(x, state, keep, final_x)
        return (out, state) if final_x is None else (out, state, final_out)
