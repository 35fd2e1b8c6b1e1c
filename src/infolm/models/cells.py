"""Recurrent cells over whole sequences: LSTM, Mogrifier LSTM (Melis thesis Eq. 2.2), Rewired LSTM (Sec. 4.1).

Every cell maps ``x (B, T, I)`` and a state ``(h, c)`` (each ``(B, H)``) to ``(outputs (B, T, H), (h, c))``.
An optional ``state_mask (B, H)`` is the variational state-dropout mask ``M^state`` of Sec. 4.2: it multiplies
``h_prev`` wherever the recurrence reads it (and ``c`` in the RLSTM's output gate); outputs are unmasked.

Two backends compute the same function:

* ``fused`` (default): a hand-written backpropagation through time (``torch.autograd.Function``). The input
  projection of all time steps is one GEMM, the gate matmuls are fused into one per step, the forward pass
  records no autograd graph, and every weight gradient is one GEMM over all ``T * B`` rows at the end.
  Measured on a 2-core CPU (LSTM, H 256, B 32, T 35, forward + backward, relative to ``nn.LSTM``): eager
  autograd loop 1.8-2.0x, ``torch.jit.script`` of the step 1.8-3.0x, ``torch.compile`` of the step 2.0x,
  ``torch.compile`` of the unrolled sequence 1.2-1.4x but 47 s of compilation per sequence length, this
  backend 1.2-1.5x with no compilation. It supports first-order gradients only.
* ``eager``: the plain step-by-step formulas under autograd; the reference in tests, used under autocast
  (and for the Mogrifier RLSTM) or when ``backend="eager"``.

The Mogrifier's fused path computes ``2 sigma(z)`` as ``1 + tanh(z / 2)`` (one kernel fewer per round); it equals
the eager formula up to rounding.
"""

from __future__ import annotations

import math
from typing import Any, Union, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from infolm.errors import InfolmError

CellState = tuple[Tensor, Tensor]  # (h, c), each (B, H)
RecurrentCell = Union["LSTMCell", "MogrifierLSTMCell", "RLSTMCell"]
BACKENDS = ("fused", "eager")

# LSTM gate order in weight rows: input i, forget f, output o (sigmoids, contiguous), candidate j (tanh).
_F = 1


def _init_uniform(module: nn.Module, hidden_size: int) -> None:
    bound = 1.0 / math.sqrt(hidden_size)
    for p in module.parameters():
        nn.init.uniform_(p, -bound, bound)


def chrono_forget_bias_(bias: Tensor, t_max: float) -> None:
    """Chrono init (Tallec & Ollivier 2018; thesis Sec. 4.4): ``b_f ~ ln(U(1, T_max - 1))`` in place."""
    if t_max <= 2.0:
        raise InfolmError(f"chrono init needs t_max > 2, got {t_max}")
    with torch.no_grad():
        bias.uniform_(1.0, t_max - 1.0).log_()


def _check_input(x: Tensor, input_size: int) -> None:
    if x.dim() != 3 or x.size(2) != input_size:
        raise InfolmError(f"cell input must be (B, T, {input_size}), got {tuple(x.shape)}")


def _zero_state(x: Tensor, hidden_size: int) -> CellState:
    zeros = x.new_zeros(x.size(0), hidden_size)
    return zeros, zeros


def _use_eager(backend: str, x: Tensor) -> bool:
    return backend == "eager" or torch.is_autocast_enabled(x.device.type)


# ----------------------------------------------------------------------------------------------------------------
# LSTM gate arithmetic shared by the LSTM and the Mogrifier (Eq. 2.1, optionally with i capped at 1 - f).


def _lstm_gates_forward(
    pre: Tensor, c_prev: Tensor, capped: bool, c_out: Tensor, tanh_c_out: Tensor, h_out: Tensor
) -> Tensor:
    """Activates ``pre (B, 4H)`` in place into (i, f, o, j); writes c, tanh(c) and h into the ``*_out`` buffers."""
    hidden = pre.size(1) // 4
    pre[:, : 3 * hidden].sigmoid_()
    pre[:, 3 * hidden :].tanh_()
    i, f, o, j = pre.chunk(4, 1)
    if capped:
        i = torch.minimum(i, 1.0 - f)  # c = f c_prev + min(i, 1 - f) j (Sec. 4.1; |c| <= 1)
    torch.addcmul(f * c_prev, i, j, out=c_out)
    torch.tanh(c_out, out=tanh_c_out)
    return torch.mul(o, tanh_c_out, out=h_out)


def _lstm_gates_backward(
    gates: Tensor, c_prev: Tensor, tanh_c: Tensor, dh: Tensor, dc: Tensor, capped: bool, d_pre: Tensor
) -> Tensor:
    """Writes d(pre-activations) into ``d_pre (B, 4H)`` from dL/dh and dL/dc (dc already includes later steps).

    Returns dL/dc_prev.
    """
    i, f, o, j = gates.chunk(4, 1)
    d_i, d_f, d_o, d_j = d_pre.chunk(4, 1)
    _sigmoid_grad(dh * tanh_c, o, out=d_o)
    dc = dc + _tanh_grad(dh * o, tanh_c)
    d_input = dc * j
    df = dc * c_prev
    if capped:
        one_minus_f = 1.0 - f
        i_eff = torch.minimum(i, one_minus_f)
        chosen = d_input * (i <= one_minus_f)  # the gradient of min(i, 1 - f) flows to the chosen side
        df = df - (d_input - chosen)
        d_input = chosen
    else:
        i_eff = i
    _sigmoid_grad(d_input, i, out=d_i)
    _sigmoid_grad(df, f, out=d_f)
    _tanh_grad(dc * i_eff, j, out=d_j)
    return dc * f


def _sigmoid_grad(grad: Tensor, sigmoid: Tensor, out: Tensor) -> Tensor:
    """``grad * s (1 - s)`` in one kernel, written into ``out``."""
    return torch.ops.aten.sigmoid_backward.grad_input(grad, sigmoid, grad_input=out)


def _tanh_grad(grad: Tensor, tanh: Tensor, out: Tensor | None = None) -> Tensor:
    """``grad * (1 - t^2)`` in one kernel (written into ``out`` when given)."""
    if out is None:
        return torch.ops.aten.tanh_backward(grad, tanh)
    return torch.ops.aten.tanh_backward.grad_input(grad, tanh, grad_input=out)


def _shifted(h0: Tensor, outputs: Tensor) -> Tensor:
    """``(h_0, ..., h_{T-1})`` as ``(T, B, H)`` from the initial state and the outputs ``(T, B, H)``."""
    return torch.cat([h0.unsqueeze(0), outputs[:-1]], 0)


def _none_to_zeros(grad: Tensor | None, like: Tensor) -> Tensor:
    return torch.zeros_like(like) if grad is None else grad


# ----------------------------------------------------------------------------------------------------------------
# LSTM


class _LSTMSequence(torch.autograd.Function):
    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        x: Tensor,  # (B, T, I)
        h0: Tensor,
        c0: Tensor,
        mask: Tensor | None,
        weight_ih: Tensor,
        weight_hh: Tensor,
        bias: Tensor,
        capped: bool,
    ) -> tuple[Tensor, Tensor, Tensor]:
        x_tm = x.transpose(0, 1).contiguous()  # (T, B, I)
        steps, hidden = x_tm.size(0), h0.size(1)
        gates = F.linear(x_tm, weight_ih, bias)  # (T, B, 4H): all input projections in one GEMM
        cells = x.new_empty(steps + 1, x.size(0), hidden)
        tanh_cells = x.new_empty(steps, x.size(0), hidden)
        outputs = x.new_empty(steps, x.size(0), hidden)
        cells[0] = c0
        hh_t = weight_hh.t()
        h_prev_hat = h0 * mask if mask is not None else h0
        masked_prev = [h_prev_hat] if mask is not None else []
        pre_steps, cell_steps, tanh_c_steps, out_steps = (
            gates.unbind(0),
            cells.unbind(0),
            tanh_cells.unbind(0),
            outputs.unbind(0),
        )
        for t in range(steps):
            pre = pre_steps[t].addmm_(h_prev_hat, hh_t)
            h = _lstm_gates_forward(pre, cell_steps[t], capped, cell_steps[t + 1], tanh_c_steps[t], out_steps[t])
            if mask is not None:
                h_prev_hat = h * mask
                masked_prev.append(h_prev_hat)
            else:
                h_prev_hat = h
        ctx.capped = capped
        hats = torch.stack(masked_prev[:-1]) if mask is not None else None
        ctx.save_for_backward(x_tm, h0, mask, weight_ih, weight_hh, gates, cells, tanh_cells, outputs, hats)
        return outputs.transpose(0, 1).contiguous(), outputs[-1].clone(), cells[-1].clone()

    @staticmethod
    def backward(ctx: Any, d_out: Tensor | None, d_hT: Tensor | None, d_cT: Tensor | None) -> tuple[Any, ...]:  # type: ignore[override]
        x_tm, h0, mask, weight_ih, weight_hh, gates, cells, tanh_cells, outputs, hats = ctx.saved_tensors
        steps, batch = x_tm.size(0), x_tm.size(1)
        d_out_tm = _none_to_zeros(d_out, outputs.transpose(0, 1)).transpose(0, 1)
        dc = _none_to_zeros(d_cT, h0)
        d_pre = torch.empty_like(gates)
        d_out_steps, d_pre_steps = d_out_tm.unbind(0), d_pre.unbind(0)
        gate_steps, cell_steps, tanh_c_steps = gates.unbind(0), cells.unbind(0), tanh_cells.unbind(0)
        dh = d_out_steps[-1] if d_hT is None else d_out_steps[-1] + d_hT
        for t in range(steps - 1, -1, -1):
            dc = _lstm_gates_backward(gate_steps[t], cell_steps[t], tanh_c_steps[t], dh, dc, ctx.capped, d_pre_steps[t])
            if t == 0:
                dh = d_pre_steps[0] @ weight_hh
                dh = dh * mask if mask is not None else dh
            elif mask is None:  # dL/dh_{t-1} = output grad + recurrent grad, in one GEMM call
                dh = torch.addmm(d_out_steps[t - 1], d_pre_steps[t], weight_hh)
            else:
                dh = torch.addcmul(d_out_steps[t - 1], d_pre_steps[t] @ weight_hh, mask)
        flat = d_pre.flatten(0, 1)  # (T B, 4H)
        prev = hats if hats is not None else _shifted(h0, outputs)
        d_weight_hh = flat.t() @ prev.flatten(0, 1)
        d_weight_ih = flat.t() @ x_tm.flatten(0, 1)
        dx = (flat @ weight_ih).view(steps, batch, -1).transpose(0, 1)
        return dx, dh, dc, None, d_weight_ih, d_weight_hh, flat.sum(0), None


def _lstm_eager(
    x: Tensor, state: CellState, mask: Tensor | None, weight_ih: Tensor, weight_hh: Tensor, bias: Tensor, capped: bool
) -> tuple[Tensor, CellState]:
    h, c = state
    projected = F.linear(x, weight_ih, bias)  # (B, T, 4H)
    outputs = []
    for t in range(x.size(1)):
        h_hat = h * mask if mask is not None else h
        pre = projected[:, t] + h_hat @ weight_hh.t()
        i, f, o, j = pre.chunk(4, 1)
        i, f, o, j = torch.sigmoid(i), torch.sigmoid(f), torch.sigmoid(o), torch.tanh(j)
        if capped:
            i = torch.minimum(i, 1.0 - f)
        c = f * c + i * j  # Eq. 2.1
        h = o * torch.tanh(c)
        outputs.append(h)
    return torch.stack(outputs, 1), (h, c)


def lstm_sequence(
    x: Tensor,
    state: CellState,
    state_mask: Tensor | None,
    weight_ih: Tensor,
    weight_hh: Tensor,
    bias: Tensor,
    capped: bool = False,
    backend: str = "fused",
) -> tuple[Tensor, CellState]:
    """The LSTM of :class:`LSTMCell` as a function of its weights (gate rows i, f, o, j; one bias):
    ``x (B, T, I)`` from ``state`` to ``(outputs (B, T, H), (h, c))``, ``h_prev`` read as ``h_prev * state_mask``."""
    if _use_eager(backend, x):
        return _lstm_eager(x, state, state_mask, weight_ih, weight_hh, bias, capped)
    outputs, h, c = _LSTMSequence.apply(x, state[0], state[1], state_mask, weight_ih, weight_hh, bias, capped)
    return outputs, (h, c)


def torch_lstm_weights(lstm: nn.LSTM) -> tuple[Tensor, Tensor, Tensor]:
    """A one-layer, one-direction ``nn.LSTM``'s weights in this module's layout, differentiably: its gate rows
    (i, f, g, o) reordered to (i, f, o, j) with j = g, and its two biases summed (the same function)."""
    if lstm.num_layers != 1 or lstm.bidirectional or lstm.proj_size or not lstm.bias:
        raise InfolmError("only a one-layer, unidirectional nn.LSTM with biases and no projection maps onto the cell")

    def reorder(rows: Tensor) -> Tensor:
        i, f, g, o = rows.chunk(4, 0)
        return torch.cat([i, f, o, g], 0)

    weight_ih, weight_hh, bias_ih, bias_hh = (cast(Tensor, p) for p in lstm.all_weights[0])
    return reorder(weight_ih), reorder(weight_hh), reorder(bias_ih + bias_hh)


class LSTMCell(nn.Module):
    """LSTM (thesis Eq. 2.1) over a sequence, with the input gate optionally capped at ``1 - f`` (Sec. 4.6)."""

    def __init__(self, input_size: int, hidden_size: int, capped_input_gate: bool = False, backend: str = "fused"):
        super().__init__()
        if backend not in BACKENDS:
            raise InfolmError(f"cell backend must be one of {', '.join(BACKENDS)}; got {backend!r}")
        self.input_size, self.hidden_size = input_size, hidden_size
        self.capped_input_gate, self.backend = capped_input_gate, backend
        self.weight_ih = nn.Parameter(torch.empty(4 * hidden_size, input_size))  # rows: i, f, o, j
        self.weight_hh = nn.Parameter(torch.empty(4 * hidden_size, hidden_size))
        self.bias = nn.Parameter(torch.empty(4 * hidden_size))
        _init_uniform(self, hidden_size)

    @property
    def forget_bias(self) -> Tensor:
        return self.bias[_F * self.hidden_size : (_F + 1) * self.hidden_size]

    def chrono_init_(self, t_max: float) -> None:
        chrono_forget_bias_(self.forget_bias, t_max)

    def forward(
        self, x: Tensor, state: CellState | None = None, state_mask: Tensor | None = None
    ) -> tuple[Tensor, CellState]:
        _check_input(x, self.input_size)
        return lstm_sequence(
            x,
            state if state is not None else _zero_state(x, self.hidden_size),
            state_mask,
            self.weight_ih,
            self.weight_hh,
            self.bias,
            self.capped_input_gate,
            self.backend,
        )


# ----------------------------------------------------------------------------------------------------------------
# Mogrifier LSTM (Eq. 2.2)


def _round_weights(params: list[Tensor], rank: int) -> list[tuple[Tensor, Tensor | None]]:
    """Per round (left, right): full rank ``(left, None)`` with left = Q^i; low rank Q^i = left @ right."""
    if rank > 0:
        return [(params[2 * k], params[2 * k + 1]) for k in range(len(params) // 2)]
    return [(p, None) for p in params]


def _project(src: Tensor, left: Tensor, right: Tensor | None) -> Tensor:
    """``src @ Q^T`` for Q = left (full rank) or left @ right (rank k: two thin GEMMs)."""
    if right is None:
        return src @ left.t()
    return (src @ right.t()) @ left.t()


def _mogrify_eager(h: Tensor, x: Tensor, rounds: list[tuple[Tensor, Tensor | None]]) -> tuple[Tensor, Tensor]:
    """Eq. 2.2: x^i = 2 sigma(Q^i h^{i-1}) x^{i-2} for odd i, h^i = 2 sigma(R^i x^{i-1}) h^{i-2} for even i."""
    for index, (left, right) in enumerate(rounds, start=1):
        if index % 2 == 1:
            x = 2.0 * torch.sigmoid(_project(h, left, right)) * x
        else:
            h = 2.0 * torch.sigmoid(_project(x, left, right)) * h
    return h, x


def _mogrifier_parameters(input_size: int, hidden_size: int, rounds: int, rank: int) -> nn.ParameterList:
    """Q^i (odd rounds: h (H) -> gate on x (I)) and R^i (even rounds: x (I) -> gate on h (H)), low rank if k > 0."""
    params = nn.ParameterList()
    for index in range(1, rounds + 1):
        out_size, in_size = (input_size, hidden_size) if index % 2 == 1 else (hidden_size, input_size)
        shapes = [(out_size, rank), (rank, in_size)] if rank > 0 else [(out_size, in_size)]
        for shape in shapes:
            p = nn.Parameter(torch.empty(shape))
            nn.init.uniform_(p, -1.0 / math.sqrt(shape[1]), 1.0 / math.sqrt(shape[1]))
            params.append(p)
    return params


def _round_buffers(k: int, x_chain: list[Tensor], h_chain: list[Tensor]) -> tuple[Tensor, Tensor, Tensor]:
    """(source, gated input, output) sequences of round i = k + 1 of Eq. 2.2, each (T, B, .)."""
    if k % 2 == 0:  # odd round i: x^i = 2 sigma(Q^i h^{i-1}) x^{i-2}
        return h_chain[k // 2], x_chain[k // 2], x_chain[k // 2 + 1]
    return x_chain[(k + 1) // 2], h_chain[k // 2], h_chain[k // 2 + 1]  # even round: h^i from x^{i-1}, h^{i-2}


def _halved(rounds: list[tuple[Tensor, Tensor | None]]) -> list[tuple[Tensor, Tensor | None]]:
    """Q^i / 2 (its left factor when low rank): the fused cell uses 2 sigma(z) = 1 + tanh(z / 2)."""
    return [(0.5 * left, right) for left, right in rounds]


class _MogrifierSequence(torch.autograd.Function):
    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        x: Tensor,  # (B, T, I)
        h0: Tensor,
        c0: Tensor,
        mask: Tensor | None,
        weight: Tensor,  # (4H, I + H): [W^x, W^h] tiled, one GEMM per step
        bias: Tensor,
        capped: bool,
        rank: int,
        *round_params: Tensor,
    ) -> tuple[Tensor, Tensor, Tensor]:
        rounds = _halved(_round_weights(list(round_params), rank))
        n_rounds = len(rounds)
        x_tm = x.transpose(0, 1).contiguous()
        steps, batch, in_size = x_tm.shape
        hidden = h0.size(1)
        # inputs of the final LSTM step [x^final, h^final] for all t: one buffer, one weight-gradient GEMM
        xh = x.new_empty(steps, batch, in_size + hidden)
        # chains: x^{-1}, x^1, x^3, ... and h^0, h^2, ...; the last element of each is a view of xh
        n_x, n_h = (n_rounds + 1) // 2, n_rounds // 2
        x_chain = [x_tm] + [x.new_empty(steps, batch, in_size) for _ in range(n_x - 1)] + [xh[:, :, :in_size]]
        h_chain = [x.new_empty(steps, batch, hidden) for _ in range(n_h)] + [xh[:, :, in_size:]]
        tanh_gates = [x.new_empty(steps, batch, in_size if k % 2 == 0 else hidden) for k in range(n_rounds)]
        gates = x.new_empty(steps, batch, 4 * hidden)
        cells = x.new_empty(steps + 1, batch, hidden)
        tanh_cells = x.new_empty(steps, batch, hidden)
        outputs = x.new_empty(steps, batch, hidden)
        cells[0] = c0
        weight_t = weight.t()
        # per-step views made once (unbind), so the loop does no indexing
        plan = [
            list(zip(*(b.unbind(0) for b in _round_buffers(k, x_chain, h_chain)), tanh_gates[k].unbind(0)))
            for k in range(n_rounds)
        ]
        h_first, xh_steps, pre_steps = h_chain[0].unbind(0), xh.unbind(0), gates.unbind(0)
        cell_steps, tanh_c_steps, out_steps = cells.unbind(0), tanh_cells.unbind(0), outputs.unbind(0)
        h_prev = h0
        for t in range(steps):
            if mask is not None:
                torch.mul(h_prev, mask, out=h_first[t])
            else:
                h_first[t].copy_(h_prev)
            for k, (left, right) in enumerate(rounds):
                src, prev, out, tanh_gate = plan[k][t]
                tanh_gate = torch.tanh(_project(src, left, right), out=tanh_gate)
                torch.addcmul(prev, prev, tanh_gate, out=out)  # 2 sigma(z) prev = prev (1 + tanh(z / 2)), Eq. 2.2
            pre = torch.addmm(bias, xh_steps[t], weight_t, out=pre_steps[t])
            h_prev = _lstm_gates_forward(pre, cell_steps[t], capped, cell_steps[t + 1], tanh_c_steps[t], out_steps[t])
        ctx.capped, ctx.rank, ctx.n_rounds = capped, rank, n_rounds
        ctx.save_for_backward(
            x, h0, mask, weight, gates, cells, tanh_cells, outputs, xh, *x_chain[:-1], *h_chain[:-1], *tanh_gates,
            *round_params,
        )  # fmt: skip
        return outputs.transpose(0, 1).contiguous(), outputs[-1].clone(), cells[-1].clone()

    @staticmethod
    def backward(ctx: Any, d_out: Tensor | None, d_hT: Tensor | None, d_cT: Tensor | None) -> tuple[Any, ...]:  # type: ignore[override]
        saved = list(ctx.saved_tensors)
        x, h0, mask, weight, gates, cells, tanh_cells, outputs, xh = saved[:9]
        n_rounds = ctx.n_rounds
        n_x, n_h = (n_rounds + 1) // 2, n_rounds // 2
        rest = saved[9:]
        x_chain = rest[:n_x] + [xh[:, :, : x.size(2)]]
        h_chain = rest[n_x : n_x + n_h] + [xh[:, :, x.size(2) :]]
        tanh_gates = rest[n_x + n_h : n_x + n_h + n_rounds]
        round_params = rest[n_x + n_h + n_rounds :]
        rounds = _halved(_round_weights(round_params, ctx.rank))
        steps, batch, in_size = gates.size(0), x.size(0), x.size(2)

        d_out_tm = _none_to_zeros(d_out, outputs.transpose(0, 1)).transpose(0, 1)
        dh = _none_to_zeros(d_hT, h0).clone()
        dc = _none_to_zeros(d_cT, h0)
        d_pre = torch.empty_like(gates)
        dx_tm = x.new_empty(steps, batch, in_size)
        d_z = [torch.empty_like(g) for g in tanh_gates]  # grads of the halved pre-activations z / 2
        d_low = [x.new_empty(steps, batch, ctx.rank) for _ in rounds] if ctx.rank > 0 else []
        plan = [
            list(
                zip(
                    _round_buffers(k, x_chain, h_chain)[1].unbind(0),
                    tanh_gates[k].unbind(0),
                    d_z[k].unbind(0),
                    *([d_low[k].unbind(0)] if d_low else []),
                )
            )
            for k in range(n_rounds)
        ]
        d_out_steps, d_pre_steps, dx_steps = d_out_tm.unbind(0), d_pre.unbind(0), dx_tm.unbind(0)
        gate_steps, cell_steps, tanh_c_steps = gates.unbind(0), cells.unbind(0), tanh_cells.unbind(0)
        for t in range(steps - 1, -1, -1):
            dh = dh + d_out_steps[t]
            dc = _lstm_gates_backward(gate_steps[t], cell_steps[t], tanh_c_steps[t], dh, dc, ctx.capped, d_pre_steps[t])
            d_xh = d_pre_steps[t] @ weight  # (B, I + H)
            grads = [d_xh[:, :in_size], d_xh[:, in_size:]]  # dL/d(latest x), dL/d(latest h)
            for k in range(n_rounds - 1, -1, -1):
                left, right = rounds[k]
                prev, tanh_gate, dz, *low = plan[k][t]
                side = k % 2  # 0: this round gated x, 1: it gated h
                g_out = grads[side]
                grads[side] = torch.addcmul(g_out, g_out, tanh_gate)  # d prev = g (1 + tanh(z / 2))
                dz = _tanh_grad(g_out * prev, tanh_gate, out=dz)
                d_src = dz @ left if right is None else torch.mm(dz, left, out=low[0]) @ right
                grads[1 - side] = grads[1 - side] + d_src
            dx_steps[t].copy_(grads[0])
            dh = grads[1] * mask if mask is not None else grads[1]
        flat = d_pre.flatten(0, 1)
        d_weight = flat.t() @ xh.flatten(0, 1)
        d_rounds: list[Tensor] = []
        for k, (_left, right) in enumerate(rounds):
            src = _round_buffers(k, x_chain, h_chain)[0].flatten(0, 1)
            dz = d_z[k].flatten(0, 1)
            if right is None:
                d_rounds.append(0.5 * (dz.t() @ src))  # z / 2 = src (Q / 2)^T
            else:
                d_rounds.append(0.5 * (dz.t() @ (src @ right.t())))  # d left
                d_rounds.append(d_low[k].flatten(0, 1).t() @ src)  # d right (d_low already through left / 2)
        return (dx_tm.transpose(0, 1), dh, dc, None, d_weight, flat.sum(0), None, None, *d_rounds)


class MogrifierLSTMCell(nn.Module):
    """Mogrifier LSTM (thesis Eq. 2.2): x and h_prev gate each other for ``rounds`` rounds, then an LSTM step.

    ``rank > 0`` factorizes each Q^i, R^i as ``left (out, k) @ right (k, in)``; ``rank <= 0`` is full rank.
    Parameter names ``weight_ih``, ``weight_hh``, ``bias`` match :class:`LSTMCell` (same gate order), so with
    ``rounds=0`` an LSTM's state dict loads into this cell and computes the same function.
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        rounds: int = 5,
        rank: int = 64,
        capped_input_gate: bool = False,
        backend: str = "fused",
    ):
        super().__init__()
        if backend not in BACKENDS:
            raise InfolmError(f"cell backend must be one of {', '.join(BACKENDS)}; got {backend!r}")
        if rounds < 0:
            raise InfolmError(f"mogrifier rounds must be >= 0, got {rounds}")
        self.input_size, self.hidden_size = input_size, hidden_size
        self.rounds, self.rank = rounds, max(rank, 0)
        self.capped_input_gate, self.backend = capped_input_gate, backend
        self.weight_ih = nn.Parameter(torch.empty(4 * hidden_size, input_size))  # rows: i, f, o, j
        self.weight_hh = nn.Parameter(torch.empty(4 * hidden_size, hidden_size))
        self.bias = nn.Parameter(torch.empty(4 * hidden_size))
        _init_uniform(self, hidden_size)
        self.mogrifier = _mogrifier_parameters(input_size, hidden_size, rounds, self.rank)

    @property
    def forget_bias(self) -> Tensor:
        return self.bias[_F * self.hidden_size : (_F + 1) * self.hidden_size]

    def chrono_init_(self, t_max: float) -> None:
        chrono_forget_bias_(self.forget_bias, t_max)

    def mogrify(self, h: Tensor, x: Tensor) -> tuple[Tensor, Tensor]:
        """Eq. 2.2 for one step: ``(h (B, H), x (B, I)) -> (h^{2 floor(r/2)}, x^{2 floor((r+1)/2) - 1})``."""
        return _mogrify_eager(h, x, _round_weights(list(self.mogrifier), self.rank))

    def forward(
        self, x: Tensor, state: CellState | None = None, state_mask: Tensor | None = None
    ) -> tuple[Tensor, CellState]:
        _check_input(x, self.input_size)
        h0, c0 = state if state is not None else _zero_state(x, self.hidden_size)
        capped = self.capped_input_gate
        if _use_eager(self.backend, x):
            return self._forward_eager(x, (h0, c0), state_mask)
        if self.rounds == 0:  # mogrify is the identity: exactly the LSTM
            outputs, h, c = _LSTMSequence.apply(
                x, h0, c0, state_mask, self.weight_ih, self.weight_hh, self.bias, capped
            )
            return outputs, (h, c)
        weight = torch.cat([self.weight_ih, self.weight_hh], 1)  # (4H, I + H)
        outputs, h, c = _MogrifierSequence.apply(
            x, h0, c0, state_mask, weight, self.bias, capped, self.rank, *self.mogrifier
        )
        return outputs, (h, c)

    def _forward_eager(self, x: Tensor, state: CellState, mask: Tensor | None) -> tuple[Tensor, CellState]:
        h, c = state
        rounds = _round_weights(list(self.mogrifier), self.rank)
        outputs = []
        for t in range(x.size(1)):
            h_hat = h * mask if mask is not None else h
            h_mog, x_mog = _mogrify_eager(h_hat, x[:, t], rounds)
            pre = F.linear(x_mog, self.weight_ih, self.bias) + h_mog @ self.weight_hh.t()
            i, f, o, j = pre.chunk(4, 1)
            i, f, o, j = torch.sigmoid(i), torch.sigmoid(f), torch.sigmoid(o), torch.tanh(j)
            if self.capped_input_gate:
                i = torch.minimum(i, 1.0 - f)
            c = f * c + i * j
            h = o * torch.tanh(c)
            outputs.append(h)
        return torch.stack(outputs, 1), (h, c)


# ----------------------------------------------------------------------------------------------------------------
# Rewired LSTM (Sec. 4.1)


class _RLSTMSequence(torch.autograd.Function):
    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        x: Tensor,  # (B, T, I)
        h0: Tensor,
        c0: Tensor,
        mask: Tensor | None,
        weight_ix: Tensor,  # (2H, I): W^{ix}, W^{jx}
        weight_hh: Tensor,  # (3H, H): W^{ih}, W^{jh}, W^{fh}
        weight_fu: Tensor,  # (H, H)
        weight_oc: Tensor,  # (H, H)
        bias: Tensor,  # (4H): b^i, b^j, b^f, b^o
    ) -> tuple[Tensor, Tensor, Tensor]:
        x_tm = x.transpose(0, 1).contiguous()
        steps, batch = x_tm.size(0), x_tm.size(1)
        hidden = h0.size(1)
        pre = x.new_empty(steps, batch, 3 * hidden)  # pre-activations of i, j, f, then activated in place
        torch.add(F.linear(x_tm, weight_ix), bias[: 2 * hidden], out=pre[:, :, : 2 * hidden])  # one GEMM for all t
        pre[:, :, 2 * hidden :] = bias[2 * hidden : 3 * hidden]
        out_gate = x.new_empty(steps, batch, hidden)
        cells = x.new_empty(steps + 1, batch, hidden)
        tanh_cells = x.new_empty(steps, batch, hidden)
        updates = x.new_empty(steps, batch, hidden)  # u = i j
        hats = x.new_empty(steps, batch, hidden)  # h_prev masked
        c_hats = x.new_empty(steps, batch, hidden) if mask is not None else None  # c masked (output gate input)
        outputs = x.new_empty(steps, batch, hidden)
        cells[0] = c0
        hh_t, fu_t, oc_t = weight_hh.t(), weight_fu.t(), weight_oc.t()
        bias_o = bias[3 * hidden :]
        h_prev = h0
        hat_steps, pre_steps, u_steps, o_steps = hats.unbind(0), pre.unbind(0), updates.unbind(0), out_gate.unbind(0)
        cell_steps, tanh_c_steps, out_steps = cells.unbind(0), tanh_cells.unbind(0), outputs.unbind(0)
        c_hat_steps = c_hats.unbind(0) if c_hats is not None else None
        for t in range(steps):
            h_hat = torch.mul(h_prev, mask, out=hat_steps[t]) if mask is not None else hat_steps[t].copy_(h_prev)
            step = pre_steps[t].addmm_(h_hat, hh_t)
            i, j, f = step.chunk(3, 1)
            i.sigmoid_()
            j.tanh_()
            u = torch.mul(i, j, out=u_steps[t])
            f.addmm_(u, fu_t).sigmoid_()  # f = sigma(W^{fu} (i j) + W^{fh} h_prev + b^f)
            c = torch.addcmul(f * cell_steps[t], torch.minimum(i, 1.0 - f), j, out=cell_steps[t + 1])
            c_hat = torch.mul(c, mask, out=c_hat_steps[t]) if mask is not None and c_hat_steps is not None else c
            o = torch.addmm(bias_o, c_hat, oc_t, out=o_steps[t]).sigmoid_()  # o = sigma(W^{oc} c + b^o)
            h_prev = torch.mul(o, torch.tanh(c, out=tanh_c_steps[t]), out=out_steps[t])
        ctx.save_for_backward(
            x_tm, h0, mask, weight_ix, weight_hh, weight_fu, weight_oc, pre, out_gate, cells, tanh_cells, updates, hats,
            c_hats,
        )  # fmt: skip
        return outputs.transpose(0, 1).contiguous(), outputs[-1].clone(), cells[-1].clone()

    @staticmethod
    def backward(ctx: Any, d_out: Tensor | None, d_hT: Tensor | None, d_cT: Tensor | None) -> tuple[Any, ...]:  # type: ignore[override]
        (x_tm, h0, mask, weight_ix, weight_hh, weight_fu, weight_oc, acts, out_gate, cells, tanh_cells, updates, hats,
         c_hats) = ctx.saved_tensors  # fmt: skip
        steps, batch, hidden = out_gate.shape
        d_out_tm = _none_to_zeros(d_out, h0.new_empty(batch, steps, hidden)).transpose(0, 1)
        dh = _none_to_zeros(d_hT, h0).clone()
        dc = _none_to_zeros(d_cT, h0)
        d_pre = h0.new_empty(steps, batch, 3 * hidden)  # i, j, f
        d_o = h0.new_empty(steps, batch, hidden)
        act_steps, d_pre_steps, o_steps, d_o_steps = acts.unbind(0), d_pre.unbind(0), out_gate.unbind(0), d_o.unbind(0)
        cell_steps, tanh_c_steps, d_out_steps = cells.unbind(0), tanh_cells.unbind(0), d_out_tm.unbind(0)
        for t in range(steps - 1, -1, -1):
            i, j, f = act_steps[t].chunk(3, 1)
            d_i, d_j, d_f = d_pre_steps[t].chunk(3, 1)
            o, tanh_c = o_steps[t], tanh_c_steps[t]
            dh = dh + d_out_steps[t]
            da_o = _sigmoid_grad(dh * tanh_c, o, out=d_o_steps[t])
            d_c_hat = da_o @ weight_oc
            if mask is not None:
                d_c_hat = d_c_hat * mask
            dc = dc + _tanh_grad(dh * o, tanh_c) + d_c_hat
            one_minus_f = 1.0 - f
            d_input = dc * j
            di = d_input * (i <= one_minus_f)  # min(i, 1 - f): the gradient flows to the chosen side
            df = dc * cell_steps[t] - (d_input - di)
            dj = dc * torch.minimum(i, one_minus_f)
            da_f = _sigmoid_grad(df, f, out=d_f)
            du = da_f @ weight_fu
            _sigmoid_grad(torch.addcmul(di, du, j), i, out=d_i)
            _tanh_grad(torch.addcmul(dj, du, i), j, out=d_j)
            dc = dc * f
            dh = d_pre_steps[t] @ weight_hh
            if mask is not None:
                dh = dh * mask
        flat = d_pre.flatten(0, 1)  # (T B, 3H)
        flat_ij = flat[:, : 2 * hidden]
        flat_o = d_o.flatten(0, 1)
        d_weight_ix = flat_ij.t() @ x_tm.flatten(0, 1)
        d_weight_hh = flat.t() @ hats.flatten(0, 1)
        d_weight_fu = flat[:, 2 * hidden :].t() @ updates.flatten(0, 1)
        c_in = c_hats if c_hats is not None else cells[1:]
        d_weight_oc = flat_o.t() @ c_in.flatten(0, 1)
        d_bias = torch.cat([flat.sum(0), flat_o.sum(0)])
        dx = (flat_ij @ weight_ix).view(steps, batch, -1).transpose(0, 1)
        return dx, dh, dc, None, d_weight_ix, d_weight_hh, d_weight_fu, d_weight_oc, d_bias


class RLSTMCell(nn.Module):
    """Rewired LSTM (thesis Sec. 4.1): f from i*j, i capped at 1 - f, o from c (masked by ``M^state``, Sec. 4.2).

    ``rounds > 0`` gives the Mogrifier RLSTM of Sec. 4.2 / Table 4.1 (mogrify(h_prev, x) feeds the RLSTM); that
    variant runs on the eager backend (the fused BPTT covers ``rounds == 0``).
    """

    def __init__(self, input_size: int, hidden_size: int, backend: str = "fused", rounds: int = 0, rank: int = 64):
        super().__init__()
        if backend not in BACKENDS:
            raise InfolmError(f"cell backend must be one of {', '.join(BACKENDS)}; got {backend!r}")
        if rounds < 0:
            raise InfolmError(f"mogrifier rounds must be >= 0, got {rounds}")
        self.input_size, self.hidden_size, self.backend = input_size, hidden_size, backend
        self.rounds, self.rank = rounds, max(rank, 0)
        self.weight_ix = nn.Parameter(torch.empty(2 * hidden_size, input_size))  # rows: i, j
        self.weight_hh = nn.Parameter(torch.empty(3 * hidden_size, hidden_size))  # rows: i, j, f
        self.weight_fu = nn.Parameter(torch.empty(hidden_size, hidden_size))  # f from u = i j
        self.weight_oc = nn.Parameter(torch.empty(hidden_size, hidden_size))  # o from c
        self.bias = nn.Parameter(torch.empty(4 * hidden_size))  # i, j, f, o
        _init_uniform(self, hidden_size)
        self.mogrifier = _mogrifier_parameters(input_size, hidden_size, rounds, self.rank)

    @property
    def forget_bias(self) -> Tensor:
        return self.bias[2 * self.hidden_size : 3 * self.hidden_size]

    def chrono_init_(self, t_max: float) -> None:
        chrono_forget_bias_(self.forget_bias, t_max)

    def forward(
        self, x: Tensor, state: CellState | None = None, state_mask: Tensor | None = None
    ) -> tuple[Tensor, CellState]:
        _check_input(x, self.input_size)
        h0, c0 = state if state is not None else _zero_state(x, self.hidden_size)
        weights = (self.weight_ix, self.weight_hh, self.weight_fu, self.weight_oc, self.bias)
        if self.rounds > 0 or _use_eager(self.backend, x):
            return self._forward_eager(x, (h0, c0), state_mask)
        outputs, h, c = _RLSTMSequence.apply(x, h0, c0, state_mask, *weights)
        return outputs, (h, c)

    def _forward_eager(self, x: Tensor, state: CellState, mask: Tensor | None) -> tuple[Tensor, CellState]:
        h, c = state
        hidden = self.hidden_size
        b_i, b_j, b_f, b_o = self.bias.chunk(4)
        bias_ij = torch.cat([b_i, b_j])
        rounds = _round_weights(list(self.mogrifier), self.rank)
        projected = F.linear(x, self.weight_ix, bias_ij) if not rounds else None  # (B, T, 2H)
        outputs = []
        for t in range(x.size(1)):
            h_hat = h * mask if mask is not None else h
            if projected is None:
                h_hat, x_mog = _mogrify_eager(h_hat, x[:, t], rounds)
                x_proj = F.linear(x_mog, self.weight_ix, bias_ij)
            else:
                x_proj = projected[:, t]
            recurrent = h_hat @ self.weight_hh.t()  # (B, 3H)
            i = torch.sigmoid(x_proj[:, :hidden] + recurrent[:, :hidden])
            j = torch.tanh(x_proj[:, hidden:] + recurrent[:, hidden : 2 * hidden])
            f = torch.sigmoid((i * j) @ self.weight_fu.t() + recurrent[:, 2 * hidden :] + b_f)
            c = f * c + torch.minimum(i, 1.0 - f) * j  # Sec. 4.1
            c_hat = c * mask if mask is not None else c
            o = torch.sigmoid(c_hat @ self.weight_oc.t() + b_o)
            h = o * torch.tanh(c)
            outputs.append(h)
        return torch.stack(outputs, 1), (h, c)
