"""Evaluation identities: batched equals unbatched, every token counted, sampling filters."""

import math

import pytest
import torch

from infolm.data.batching import eval_rows
from infolm.evaluation.generation import filter_logits, sample
from infolm.evaluation.perplexity import stream_nll, summarize
from tests.conftest import tiny_model


@pytest.mark.parametrize("name", ["lstm", "transformer"])
def test_batched_evaluation_equals_unbatched(name, small_corpus):
    """B rows scored together equal the same rows scored one at a time, and every token counts once."""
    torch.manual_seed(0)
    model = tiny_model(name, len(small_corpus.vocab))
    stream = small_corpus.stream("valid")
    eos = small_corpus.vocab.eos_id
    batched, tokens = stream_nll(model, stream, eos, batch_size=4, bptt=16)
    assert tokens == stream.numel()
    inputs, targets = eval_rows(stream, eos, 4)
    row_len = inputs.size(1)
    total = 0.0
    for row in range(4):
        part = stream[row * row_len : (row + 1) * row_len]
        if part.numel() == 0:
            continue
        first_input = inputs[row, 0].item()
        # one row alone: the same tokens with the same history token before them
        nll, count = _row_nll(model, first_input, part)
        total += nll
    assert batched == pytest.approx(total, rel=1e-5)


def _row_nll(model, history_token, part):
    tokens = torch.cat([torch.tensor([history_token]), part])
    total, count, state = 0.0, 0, None
    model.eval()
    with torch.no_grad():
        for i in range(0, part.numel(), 16):
            x = tokens[i : i + 16].unsqueeze(0)
            y = tokens[i + 1 : i + 17].unsqueeze(0)
            x = x[:, : y.size(1)]
            if state is None:
                state = model.init_state(1)
            out = model(x, state)
            state = out.state
            total += float(torch.nn.functional.cross_entropy(out.logits[0], y[0], reduction="sum"))
            count += y.numel()
    return total, count


def test_summary_units():
    out = summarize(2 * math.log(2) * 10, 10, "char")
    assert out["bpc"] == pytest.approx(2.0) and out["ppl"] == pytest.approx(4.0)


def test_top_k_and_top_p_filters():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    kept = torch.isfinite(filter_logits(logits, top_k=2))
    assert kept.tolist() == [[True, True, False, False]]
    kept = torch.isfinite(filter_logits(logits, top_p=0.8))
    assert kept.tolist() == [[True, True, False, False]]  # 0.5 + 0.3 reaches 0.8
    kept = torch.isfinite(filter_logits(logits, top_p=0.81))
    assert kept.tolist() == [[True, True, True, False]]
    assert torch.isfinite(filter_logits(logits, top_p=0.01)).sum() == 1


def test_sampling_is_seeded_and_greedy_at_zero_temperature(small_corpus):
    torch.manual_seed(0)
    model = tiny_model("lstm", len(small_corpus.vocab))
    prompt = torch.tensor([[small_corpus.vocab.eos_id]])
    a = sample(model, prompt, 10, generator=torch.Generator().manual_seed(1))
    b = sample(model, prompt, 10, generator=torch.Generator().manual_seed(1))
    assert torch.equal(a, b)
    greedy = sample(model, prompt, 5, temperature=0)
    out = model.eval()(prompt, None)
    assert greedy[0, 0].item() == out.logits[0, -1].argmax().item()


def test_sampling_draws_what_a_step_by_step_loop_draws_and_stops_at_the_stop_token(small_corpus):
    torch.manual_seed(0)
    model = tiny_model("lstm", len(small_corpus.vocab)).eval()
    eos = small_corpus.vocab.eos_id
    prompt = torch.full((3, 1), eos)
    drawn = sample(model, prompt, 12, generator=torch.Generator().manual_seed(4))
    generator = torch.Generator().manual_seed(4)
    with torch.no_grad():
        output = model(prompt, model.init_state(3, "cpu"))
        expected = []
        for _ in range(12):
            token = torch.multinomial(output.logits[:, -1].float().softmax(-1), 1, generator=generator)
            expected.append(token)
            output = model(token, output.state)
    expected_tokens = torch.cat(expected, 1)
    assert drawn.shape == (3, 12) and torch.equal(drawn, expected_tokens)
    whole = sample(model, prompt[:1], 12, generator=torch.Generator().manual_seed(4))
    stop = int(whole[0, 5])  # one row stops at its first draw of the stop token, and keeps it
    first = int((whole[0] == stop).nonzero()[0])
    stopped = sample(model, prompt[:1], 12, generator=torch.Generator().manual_seed(4), stop_id=stop)
    assert first <= 5 and torch.equal(stopped, whole[:, : first + 1])
