"""The VQ-VAE objective (``objectives/vq_vae.py``): its loss and encoder gradient by hand, the EMA step in
training only, refusals, a short training that lowers the NLL, and ``infolm train`` on the synthetic config."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from infolm.errors import InfolmError
from infolm.latent import evaluate_latent
from infolm.latent.vq import commitment_loss, ema_codebook_update
from infolm.models import MODELS
from infolm.objectives import OBJECTIVES, build_objective
from tests.conftest import run_cli, run_in_process


def model(vocab: int = 7, latents: int = 2, categories: int = 3):
    torch.manual_seed(0)
    settings = {"vq_latents": latents, "vq_categories": categories, "vq_dim": 4, "embedding": 8, "hidden": 16}
    return MODELS.build("latent-synthetic-vq", settings, vocab_size=vocab, where="model")


def symbols(*ids: int) -> SimpleNamespace:
    """A sentence-latent batch of one-symbol rows."""
    return SimpleNamespace(targets=torch.tensor(ids).view(-1, 1), lengths=torch.ones(len(ids), dtype=torch.long))


def test_loss_and_encoder_gradient_are_eq_3_with_the_straight_through_estimator() -> None:
    vq, beta = model(), 0.7
    objective = build_objective({"vq-vae": {"beta": beta}})
    objective.setup(None, vq)
    encoded = []
    vq.latent.project.register_forward_hook(lambda module, inputs, output: encoded.append(output))
    batch = symbols(0, 3, 3, 6)
    codebook = vq.latent.codebook.clone()
    with torch.no_grad():
        quantization = vq.quantize(batch.targets, batch.lengths)  # before the step's EMA update
        z = F.one_hot(quantization.codes, 3).unsqueeze(0)
        reconstruction = vq.log_likelihood(batch.targets, batch.lengths, z)[0]  # ln p(x|z_q), (B,)
        commitment = commitment_loss(quantization)
    terms = objective(vq, batch, None)
    z_e = encoded[-1]
    by_hand = (-reconstruction + beta * commitment).mean()  # per sentence (one symbol each)
    torch.testing.assert_close(terms.losses["vq-vae"], by_hand)
    assert terms.metrics["vq-vae_nll_bound"] == pytest.approx(float(-reconstruction.mean()) + 2 * math.log(3))
    # d loss / d z_e = -(d ln p(x|z)/dz at z_q) / B + 2β (z_e - z_q) / B: the decoder's gradient copied, plus commitment
    (gradient,) = torch.autograd.grad(terms.losses["vq-vae"], z_e)
    at_codes = (codebook[quantization.codes]).requires_grad_()
    h = vq.vector_log_likelihood(batch.targets, batch.lengths, at_codes.unsqueeze(0))
    (decoder,) = torch.autograd.grad(h.sum(), at_codes)
    expected = (-decoder + 2 * beta * (z_e.detach().view_as(at_codes) - at_codes.detach())) / 4
    torch.testing.assert_close(gradient.view_as(expected), expected)


def test_the_codebook_moves_by_ema_in_training_only() -> None:
    vq = model()
    objective = build_objective({"vq-vae": {"decay": 0.9}})
    objective.setup(None, vq)
    batch = symbols(1, 2, 5)
    start = vq.latent.codebook.clone()
    vq.eval()
    objective(vq, batch, None)
    vq.train()
    with torch.no_grad():
        objective(vq, batch, None)
    torch.testing.assert_close(vq.latent.codebook, start)  # an evaluation pass leaves it alone
    with torch.no_grad():
        quantization = vq.quantize(batch.targets, batch.lengths)
    _, _, expected = ema_codebook_update(
        vq.latent.ema_count, vq.latent.ema_total, quantization.encoded, quantization.codes, 0.9
    )
    terms = objective(vq, batch, None)
    torch.testing.assert_close(vq.latent.codebook, expected)
    terms.total().backward()  # the in-place EMA step does not disturb the graph
    assert all(p.grad is not None for p in vq.parameters())
    assert "codebook" not in dict(vq.named_parameters()) and "latent.codebook" in vq.state_dict()


def test_mismatched_models_and_settings_are_one_line() -> None:
    with pytest.raises(InfolmError, match="objective mi-kl trains latent-variable models, got a vector-quantized"):
        build_objective({"mi-kl": {"estimator": "vimco"}}).setup(None, model())
    gaussian = MODELS.build("latent-synthetic", {"latent_size": 3, "hidden": 8, "embedding": 8}, vocab_size=7)
    with pytest.raises(InfolmError, match="objective vq-vae trains vector-quantized models, got a latent-variable"):
        build_objective({"vq-vae": {}}).setup(None, gaussian)
    for settings, message in (({"beta": -1.0}, "beta must be non-negative"), ({"decay": 1.0}, "decay must lie in")):
        with pytest.raises(InfolmError, match=message):
            OBJECTIVES.build("vq-vae", settings, where="objective.vq-vae")


def test_a_short_training_lowers_the_nll_bound() -> None:
    vocab = 16
    vq = model(vocab=vocab, latents=2, categories=4)  # D ln K = ln 16: a perfect code would reach the optimum
    objective = build_objective({"vq-vae": {}})
    objective.setup(None, vq)
    everything = [(torch.arange(vocab).view(-1, 1), torch.ones(vocab, dtype=torch.long))]
    before = evaluate_latent(vq, everything, samples=2)
    optimizer = torch.optim.Adam(vq.parameters(), lr=1e-2, betas=(0.0, 0.999))
    generator = torch.Generator().manual_seed(1)
    for _ in range(100):
        batch = symbols(*torch.randint(0, vocab, (32,), generator=generator).tolist())
        optimizer.zero_grad()
        objective(vq, batch, None).total().backward()
        optimizer.step()
    after = evaluate_latent(vq, everything, samples=2)
    assert after.nll < before.nll - 0.5, (before.nll, after.nll)
    assert after.nll >= math.log(vocab) - 1e-4  # every symbol once: Gibbs' inequality bounds the mean NLL
    assert after.mutual_information == pytest.approx(2 * math.log(4), abs=1e-5)


def test_synthetic_config_trains_and_reports_mi_d_ln_k(tmp_path) -> None:
    run = tmp_path / "run"
    short = ["train.max_steps=4", "train.eval_every=4", "task.valid_samples=3", "train.log_every=2"]
    result = run_in_process("train", "configs/synthetic/vq-vae.yaml", f"run.dir={run}", *short)
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    final = [r for r in records if "mi" in r][-1]
    assert final["mi"] == pytest.approx(2 * math.log(10), abs=1e-5) and final["kl"] == pytest.approx(final["mi"])
    assert final["loss"] >= math.log(1000) - 1e-3
    refused = run_cli("train", "configs/synthetic/vq-vae.yaml", f"run.dir={tmp_path / 'no'}", "~objective.vq-vae",
                      "objective.mi-kl.estimator=vimco")  # fmt: skip
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert "objective mi-kl trains latent-variable models" in refused.stderr
