"""How a sampled extended context is realized: four ways to draw x_i from extend(sh) and score Q(·|sh, x_i).

Eq. 15 estimates the induced model Q̂(·|sh) (Eq. 13) with k extended contexts x_i drawn from extend(sh)
(Alg. 1); for a recurrent model the paper leaves open how a sample is fed. ``IMMConfig.realization``
picks one of:

* ``replay`` (default, faithful to Eq. 15): fresh samples through the current parameters, as the
  authors' released code draws them: each sample is the ``context_window`` tokens of training stream
  that end at a uniformly drawn occurrence of the short context (its extended context truncated to the
  paper's unroll of 35), run from a zero state; the gradient flows through the whole window. The
  released code differs in how a window is fed (it runs only the window's last i+1 tokens, i the
  position within the unroll, from the batch row's carried state) and in its 1-sample steps;
  docs/notebook/imm.md ("The authors' released code, read against ours") lists every difference.
* ``carried-state`` (opt-in, the authors' released code): fresh samples through the current
  parameters, drawn per position (k each, uniformly with replacement); for the position at offset i
  of its row, the last i+1 tokens of the sampled window are run from that row's carried state
  (``batch.state``), so at i = 0 every draw is the position itself. Draws per position, not per short
  context: at every position it costs 2.4 times the replay (docs/notebook/imm.md).
* ``in-batch`` (opt-in approximation): the batch's own positions that share a short context are draws
  from extend(sh) already computed by the primary pass: up to k of them (uniformly, without
  replacement) form the induced estimate of Eq. 15, and the gradient flows through the primary pass
  (full BPTT, current parameters). No extra forward pass; the costs are fewer samples where the batch
  holds few occurrences of a context (one, the position itself, for a rare context), samples drawn
  from the batch rather than the whole stream (correlated, as the rows of one batch), and the primary
  pass's dropout on the samples.
* ``state-bank`` (opt-in approximation): a ring buffer of detached recurrent states recorded by the
  primary pass (``state_bank.py``: the state after each batch, keyed by the short context of the next
  input); a sample is one step of the model from a banked state whose short context matches. Cheap,
  but banked states come from older parameters (up to ``bank_size`` / batch rows steps stale), only
  batch-end positions are banked (frequent contexts are over-represented among the matched positions)
  and the gradient passes one recurrent step.

``benchmarks/imm_overhead.py`` measures the cost of each against an MLE step (docs/notebook/imm.md).
The sampled passes (replay, carried-state, state-bank) run with dropout off (eval mode, restored
afterwards) and never touch the primary branch's recurrent state (Sec. 6); each is a deterministic
function chunk -> (c, P, V) log Q(·|sh, x_i) over the k samples drawn once, as the crosstalk gradient
needs (``crosstalk.py``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from infolm.models.base import eval_mode, select_state
from infolm.objectives.base import Batch
from infolm.objectives.imm.contexts import ShortContextIndex
from infolm.objectives.imm.crosstalk import SampleFn
from infolm.objectives.imm.state_bank import StateBank


def at_least_fp32(logits: Tensor) -> Tensor:
    """Logits in at least fp32 (bf16 under autocast is promoted) before a softmax."""
    return logits.to(torch.promote_types(logits.dtype, torch.float32))


def last_log_probs(model: nn.Module, windows: Tensor, lengths: Tensor, initial: Any = None) -> Tensor:
    """(N, W) token windows, (N,) used lengths -> (N, V) log Q(· | windows[n, :lengths[n]]), each row
    from the model's initial state or, with ``initial``, from its row of that state (N rows).

    The history before the last token goes through ``state_after`` (no softmax layer), the last token
    through the model: logits are computed only where they are read. Rows are grouped by length
    (all rows are full-length except samples near the start of the stream).
    """
    device = windows.device
    out: Tensor | None = None
    for length in torch.unique(lengths).tolist():
        rows = torch.nonzero(lengths == length).squeeze(1)
        tokens = windows[rows, :length]  # (n, length)
        if initial is None:
            state = model.init_state(len(rows), device)  # type: ignore[operator]
        else:
            state = select_state(initial, rows)
        if length > 1:
            state = model.state_after(tokens[:, :-1], state)  # type: ignore[operator]
        logits = model(tokens[:, -1:], state).logits[:, 0]  # (n, V)
        log_probs = torch.log_softmax(at_least_fp32(logits), dim=-1)
        if out is None:
            if len(rows) == len(windows):
                return log_probs
            out = log_probs.new_empty((len(windows), log_probs.size(-1)))
        out = out.index_copy(0, rows, log_probs)
    assert out is not None
    return out


# -- replay ------------------------------------------------------------------------------------


def replay_sampler(
    model: nn.Module,
    short_contexts: ShortContextIndex,
    context_ids: Tensor,
    k: int,
    chunk: int,
    context_window: int,
    device: torch.device,
) -> SampleFn:
    """k fresh windows of stream per short context, each ending at a drawn occurrence, run from a zero state."""
    num_positions = len(context_ids)
    occurrences = short_contexts.sample(context_ids, k)  # (k, P) stream positions, fresh each call
    stream = short_contexts.stream
    window = min(context_window, len(stream))
    start = (occurrences - window + 1).clamp(min=0)  # (k, P)
    windows = stream[start.unsqueeze(-1) + torch.arange(window)].to(device)  # (k, P, W)
    lengths = (occurrences - start + 1).to(device)  # (k, P): tokens up to and including the occurrence

    def replay_fn(index: int) -> Tensor:
        rows = windows[index * chunk : (index + 1) * chunk]  # (c, P, W)
        with eval_mode(model):
            log_probs = last_log_probs(
                model, rows.reshape(-1, window), lengths[index * chunk : (index + 1) * chunk].reshape(-1)
            )  # (c*P, V)
        return log_probs.view(rows.size(0), num_positions, -1)

    return replay_fn


# -- carried-state -----------------------------------------------------------------------------


def carried_state_positions(
    model: nn.Module, batch: Batch, positions: tuple[Tensor, Tensor, Tensor], length: int, positions_per_batch: int
) -> tuple[Tensor, Tensor, Tensor, tuple[Any, Tensor] | None]:
    """Every eligible position (or ``positions_per_batch`` of them) as its own entry: its short context
    (P, L), context id (P,), a uniform weight (P,), and (each entry's row state (P rows), its offset i
    in the row (P,))."""
    contexts, ids, eligible = positions
    flat = torch.nonzero(eligible.reshape(-1)).squeeze(1)  # (N,) flat positions of (B, T-L+1)
    if 0 < positions_per_batch < len(flat):
        flat = flat[torch.randperm(len(flat))[:positions_per_batch]]
    if len(flat) == 0:
        return contexts.reshape(-1, length)[:0], ids.reshape(-1)[:0], torch.zeros(0), None
    width = eligible.size(1)
    rows, offsets = flat // width, flat % width + length - 1  # offset of the context's last token
    device = next(model.parameters()).device
    state = batch.state if batch.state is not None else model.init_state(batch.inputs.size(0), device)  # type: ignore[operator]
    row_states = select_state(state, rows.to(device))
    weights = torch.full((len(flat),), 1.0 / len(flat), dtype=torch.float64)
    return contexts.reshape(-1, length)[flat], ids.reshape(-1)[flat], weights, (row_states, offsets)


def carried_state_sampler(
    model: nn.Module,
    short_contexts: ShortContextIndex,
    context_ids: Tensor,
    k: int,
    chunk: int,
    carried: tuple[Any, Tensor],
    device: torch.device,
) -> SampleFn:
    """The released code's feeding: the last i+1 tokens of each drawn window, from the position's row state."""
    num_positions = len(context_ids)
    row_states, offsets = carried
    occurrences = short_contexts.sample(context_ids, k)  # (k, P), drawn with replacement
    stream = short_contexts.stream
    need = (offsets + 1).unsqueeze(0)  # (1, P) tokens fed for a position at offset i
    start = (occurrences - need + 1).clamp(min=0)  # (k, P)
    width = int(need.max())
    index = (start.unsqueeze(-1) + torch.arange(width)).clamp(max=len(stream) - 1)
    windows = stream[index].to(device)  # (k, P, W); only the first lengths[j, p] tokens are read
    lengths = (occurrences - start + 1).to(device)  # (k, P)

    def carried_fn(index: int) -> Tensor:
        rows = windows[index * chunk : (index + 1) * chunk]  # (c, P, W)
        count = rows.size(0)
        repeat = torch.arange(num_positions, device=device).repeat(count)  # sample-major entries
        with eval_mode(model):
            log_probs = last_log_probs(
                model,
                rows.reshape(-1, width),
                lengths[index * chunk : (index + 1) * chunk].reshape(-1),
                initial=select_state(row_states, repeat),
            )  # (c*P, V)
        return log_probs.view(count, num_positions, -1)

    return carried_fn


# -- in-batch ----------------------------------------------------------------------------------


def in_batch_log_induced(
    positions: tuple[Tensor, Tensor, Tensor], output: Any, context_ids: Tensor, k: int, length: int
) -> Tensor:
    """(P,) context ids -> (P, V) log Q̂(·|sh) from up to k of the batch's positions with that context.

    The primary pass's prediction at such a position is Q(·|sh, x) for its extended context x, a
    draw from extend(sh): the k-sample estimate of Eq. 15 (log of the mean, Eq. 21) without a pass
    of its own. Draws are uniform without replacement among the batch's eligible positions.
    """
    _, ids, eligible = positions
    rows = torch.nonzero(eligible.reshape(-1)).squeeze(1)  # (N,) flat positions of (B, T-L+1)
    pool_ids = ids.reshape(-1)[rows]
    group = torch.searchsorted(context_ids, pool_ids).clamp(max=len(context_ids) - 1)
    member = context_ids[group] == pool_ids  # the pool's positions of a selected context
    rows, group = rows[member], group[member]
    shuffle = torch.randperm(len(rows))  # a uniform order, then stable-grouped: the first k draw
    rows, group = rows[shuffle], group[shuffle]
    order = torch.argsort(group, stable=True)
    rows, group = rows[order], group[order]
    counts = torch.bincount(group, minlength=len(context_ids))  # (P,) each >= 1: the selection's own
    starts = torch.cumsum(counts, 0) - counts
    keep = torch.arange(len(group)) - starts[group] < k
    rows, group = rows[keep], group[keep]
    device = output.logits.device
    logits = output.logits[:, length - 1 :]  # (B, T-L+1, V): predictions after each context
    sampled = logits.reshape(-1, logits.size(-1))[rows.to(device)]  # (M, V), M <= k * P
    probs = torch.softmax(at_least_fp32(sampled), dim=-1)  # Q(·|sh, x_i)
    group, samples = group.to(device), counts.clamp(max=k).to(device=device, dtype=probs.dtype)
    total = probs.new_zeros((len(context_ids), probs.size(-1))).index_add(0, group, probs)  # (P, V) Σ_i Q_i
    # the floor is reached only where every sample gives y a probability below ~1e-38 (log < -87)
    total = total.clamp(min=torch.finfo(total.dtype).tiny)
    return torch.log(total) - torch.log(samples).unsqueeze(1)  # log (1/m Σ_i Q_i), m = min(k, count)


# -- state-bank --------------------------------------------------------------------------------


def state_bank_sampler(
    model: nn.Module, bank: StateBank, contexts: Tensor, context_ids: Tensor, k: int, chunk: int, device: torch.device
) -> SampleFn:
    """k banked states per short context, each stepped once on the context's last token."""
    num_positions = len(context_ids)
    leaves = bank.sample(context_ids, k)  # per leaf (k*P, ...)
    last_tokens = contexts[:, -1].to(device)  # (P,): the state precedes the short context's last token

    def bank_fn(index: int) -> Tensor:
        rows = slice(index * chunk * num_positions, min((index + 1) * chunk, k) * num_positions)
        state = bank.as_state([leaf[rows] for leaf in leaves])
        count = (rows.stop - rows.start) // num_positions
        tokens = last_tokens.repeat(count).unsqueeze(1)  # (c*P, 1)
        with eval_mode(model):
            logits = model(tokens, state).logits[:, 0]  # (c*P, V)
        return torch.log_softmax(at_least_fp32(logits), dim=-1).view(count, num_positions, -1)

    return bank_fn
