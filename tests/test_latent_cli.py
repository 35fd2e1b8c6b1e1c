"""``infolm latent reconstruct|interpolate|sample|evaluate``: outputs, and one clear line for bad input."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from infolm.cli.main import main
from infolm.config import Config, save_config
from infolm.data import load_corpus
from infolm.models import MODELS
from infolm.training import checkpoint as ckpt

LINES = ["the cat sat on the mat", "a dog ran home", "the dog sat", "a cat ran on the mat", "the mat ran home"]


def make_run(root: Path, name: str, model: dict, objective: dict) -> Path:
    data = root / "data"
    data.mkdir(exist_ok=True)
    for split in ("train", "valid", "test"):
        (data / f"{split}.txt").write_text("\n".join(LINES) + "\n")
    config = Config(
        model=model,
        objective=objective,
    )
    config.data.name, config.data.train, config.data.valid, config.data.test = (
        "path",
        str(data / "train.txt"),
        str(data / "valid.txt"),
        str(data / "test.txt"),
    )
    run = root / name
    run.mkdir()
    config.run.dir = str(run)
    save_config(config, run / "config.yaml")
    corpus = load_corpus(config.data)
    corpus.vocab.save(run / "vocab.json")
    torch.manual_seed(0)
    settings = {k: v for k, v in model.items() if k != "name"}
    ckpt.save_best(run, MODELS.build(model["name"], settings, vocab_size=len(corpus.vocab)), {})
    return run


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("latent-cli")
    gru = {"name": "sentence-gru", "emb": 8, "hidden": 12, "latent": 4}
    return {
        "smim": make_run(root, "smim", gru, {"amim": {}}),
        "ae": make_run(root, "ae", gru, {"ae": {}}),
        "lstm": make_run(root, "lstm", {"name": "lstm", "emb": 8, "hidden": 8, "layers": 1}, {"mle": {}}),
    }


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_reconstruct_interpolate_sample(runs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    smim = str(runs["smim"])
    code, out, _ = run(capsys, "latent", "reconstruct", smim, "the cat sat", "a dog ran", "--mode", "mean", "--json")
    assert code == 0 and len(json.loads(out)["reconstructions"]) == 2
    interpolation = ["latent", "interpolate", smim, "the cat sat", "a dog ran home", "--steps", "4"]
    code, out, _ = run(capsys, *interpolation)
    assert code == 0 and len(out.splitlines()) == 4
    sampled = [*interpolation, "--sampled", "--json"]
    code, out, _ = run(capsys, *sampled)
    assert code == 0 and len(json.loads(out)["interpolation"]) == 4
    assert run(capsys, *sampled)[1] == out  # seeded
    code, out, _ = run(capsys, "latent", "sample", smim, "--count", "3", "--max-length", "6", "--json")
    samples = json.loads(out)["samples"]
    assert code == 0 and len(samples) == 3 and all(len(s.split()) <= 6 for s in samples)
    again = run(capsys, "latent", "sample", smim, "--count", "3", "--max-length", "6", "--json")[1]
    assert json.loads(again)["samples"] == samples  # seeded


def test_evaluate_reports_bounds_bleu_entropy_and_melbo_apart(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "latent", "evaluate", str(runs["smim"]), "--samples", "4", "--melbo", "--json")
    assert code == 0
    report = json.loads(out)
    bounds = report["bounds"]
    assert bounds["examples"] == 5 and bounds["tokens"] == 28 and bounds["samples"] == 4  # 23 words + 5 <eos>
    assert bounds["nll_words_per_word"] == pytest.approx(bounds["nll_words"] * 5 / 23)  # words alone, per word
    assert "nll_per_word" not in bounds  # no NLL with <eos> scored is divided by the words alone
    # BLEU-1 of reconstructions with every word sampled from p(x|z), the paper's protocol, by default
    assert 0.0 <= report["reconstruction_sampled"]["bleu1"] <= 1.0 and "reconstruction" not in report
    assert report["reconstruction_sampled"]["decoding"] == "sampled"
    assert report["latent_entropy"]["dim"] == 4
    assert "caveat" in report["melbo"] and report["melbo"]["log_n"] == pytest.approx(1.6094379)


def test_evaluate_scores_greedy_bleu_and_the_aggregate_prior_bound_on_request(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    smim = str(runs["smim"])
    args = ["latent", "evaluate", smim, "--samples", "3", "--bleu-decoding", "sampled", "greedy", "--json"]
    code, out, _ = run(capsys, *args, "--aggregate-prior", "--aggregate-components", "3")
    report = json.loads(out)
    assert code == 0 and report["reconstruction"]["decoding"] == "greedy"
    assert report["reconstruction_sampled"]["decoding"] == "sampled"
    aggregate = report["aggregate_prior"]
    assert aggregate["components"] == 3 and aggregate["train_sentences"] == 5 and "held-out" in aggregate["note"]
    assert aggregate["mi_aggregate_members"] == 3 and -0.1 <= aggregate["mi_aggregate"] <= math.log(3) + 1e-9
    assert aggregate["nll_aggregate_prior_per_token"] == pytest.approx(aggregate["nll_aggregate_prior"] * 5 / 28)
    assert aggregate["nll_words_aggregate_prior_per_word"] == pytest.approx(
        aggregate["nll_words_aggregate_prior"] * 5 / 23
    )
    code, _, err = run(capsys, "latent", "evaluate", smim, "--aggregate-components", "-1")
    assert code != 0 and "--aggregate-components" in err and "Traceback" not in err
    code, out, _ = run(
        capsys, *args, "--aggregate-prior", "--aggregate-components", "3", "--aggregate-neighbors", "2", "4"
    )
    mixed = json.loads(out)["aggregate_prior"]
    assert code == 0 and mixed["neighbors"] == 2 and mixed["neighbor_draws"] == 4 and "2 nearest" in mixed["note"]
    assert aggregate["neighbors"] == 0 and "proposal q(z|x)" in aggregate["note"]
    code, _, err = run(capsys, "latent", "evaluate", smim, "--aggregate-neighbors", "3", "0")
    assert code != 0 and "--aggregate-neighbors" in err and "Traceback" not in err


def test_auto_encoder_evaluation_reports_reconstruction_not_bounds(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """An auto-encoder's variance head is untrained: no bound, rate, MI or MELBO; the reconstruction NLL
    at the posterior mean, computed here sentence by sentence."""
    from infolm.build import load_run

    code, out, _ = run(capsys, "latent", "evaluate", str(runs["ae"]), "--samples", "3", "--melbo", "--json")
    assert code == 0
    report = json.loads(out)
    bounds = report["bounds"]
    assert bounds["deterministic"] and not {"nll", "rate", "mutual_information", "elbo"} & set(bounds)
    assert "melbo" not in report and report["reconstruction_sampled"]["mode"] == "mean"
    _, corpus, model = load_run(runs["ae"], "cpu")
    model.eval()
    total = 0.0
    with torch.no_grad():
        for sentence in corpus.sentences("test"):
            tokens, lengths = sentence[None], torch.tensor([len(sentence)])
            mean = model.posterior(tokens, lengths).mean
            total -= float(model.log_likelihood(tokens, lengths, mean[None]).sum())
    assert bounds["examples"] == 5 and bounds["reconstruction_nll"] == pytest.approx(total / 5, rel=1e-5)
    assert "reconstruction_nll_per_word" not in bounds  # <eos> is scored: per token (28), not per word
    assert 0 <= bounds["active_units"] <= 4


def test_auto_encoder_runs_use_mean_codes(runs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "latent", "reconstruct", str(runs["ae"]), "the cat", "--mode", "sample")
    assert code == 2 and "deterministic auto-encoder" in err and len(err.splitlines()) == 1
    assert run(capsys, "latent", "reconstruct", str(runs["ae"]), "the cat")[0] == 0


@pytest.mark.parametrize(
    "args,message",
    [
        (["evaluate", "{smim}", "--samples", "0"], "--samples (K) must be at least 1, got 0"),
        (["interpolate", "{smim}", "zebra quokka", "the cat"], "has no word in the vocabulary"),
        (["interpolate", "{smim}", "the cat", "the dog", "--steps", "1"], "--steps must be at least 2"),
        (["reconstruct", "{lstm}", "the cat"], "holds a lstm model, not a latent-variable model"),
        (["sample", "{smim}", "--count", "0"], "--count must be positive"),
    ],
)
def test_bad_input_is_one_clear_line(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    code, out, err = run(capsys, "latent", *[a.format(**{k: str(v) for k, v in runs.items()}) for a in args])
    assert code == 2 and out == "" and message in err and len(err.strip().splitlines()) == 1


def test_latent_size_zero_is_refused_when_the_config_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "smim.yaml"
    config.write_text("model: {name: sentence-gru, latent: 0}\nobjective: {amim: {}}\n")
    code, _, err = run(capsys, "train", str(config), f"run.dir={tmp_path / 'run'}")
    assert code == 2 and "model.latent must be positive, got 0" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("objective", ["amim", "elbo", "ae"])
def test_train_then_evaluate_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str], objective: str) -> None:
    data = tmp_path / "data.txt"
    data.write_text("\n".join(LINES) + "\n")
    config = tmp_path / "run.yaml"
    # each objective's own validation loss selects (SentenceMIM Sec. 4.2)
    selection = {"amim": "amim", "elbo": "elbo", "ae": "reconstruction"}[objective]
    lines = [
        f"data: {{name: path, train: {data}, valid: {data}, test: {data}, batch_size: 2, eval_batch_size: 5}}",
        f"task: {{name: sentence-latent, valid_samples: 2, test_samples: 2, chunk: 2, selection: {selection}}}",
        "model: {name: sentence-gru, emb: 8, hidden: 12, latent: 3}",
        f"objective: {{{objective}: {{}}}}",
        "optim: {name: adam, lr: 0.01}",
        "train: {epochs: 2, max_steps: 4, eval_every: 2, clip: 0, progress: false}",
    ]
    config.write_text("\n".join(lines) + "\n")
    run_dir = tmp_path / "run"
    code, out, err = run(capsys, "train", str(config), f"run.dir={run_dir}", "--json")
    assert code == 0, err
    assert json.loads(out)["step"] == 4
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in records if r.get("split") == "valid"]
    assert len(evals) == 2 and all("kl" in r and "mi" in r for r in evals)
    logged = {"amim": "amim_loss", "elbo": "neg_elbo", "ae": "reconstruction_nll"}[objective]
    assert min(r[logged] for r in evals) == evals[-1][f"best_{logged}"]
    code, out, _ = run(capsys, "latent", "evaluate", str(run_dir), "--samples", "2", "--json")
    assert code == 0 and json.loads(out)["bounds"]["examples"] == 5


def test_the_length_prior_is_fitted_to_the_training_sentences(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from infolm.build import load_run

    data = tmp_path / "data.txt"
    data.write_text("\n".join(LINES) + "\n")  # 6, 4, 3, 6 and 4 words
    config = tmp_path / "run.yaml"
    lines = [
        f"data: {{name: path, train: {data}, valid: {data}, test: {data}, batch_size: 5, eval_batch_size: 5}}",
        "task: {name: sentence-latent, valid_samples: 2, test_samples: 2, chunk: 2}",
        "model: {name: sentence-gru, emb: 8, hidden: 12, latent: 3, length_prior: true, max_length: 8}",
        "objective: {amim: {}}",
        "optim: {name: adam, lr: 0.01}",
        "train: {max_steps: 1, clip: 0, progress: false}",
    ]
    config.write_text("\n".join(lines) + "\n")
    code, _, err = run(capsys, "train", str(config), f"run.dir={tmp_path / 'run'}")
    assert code == 0, err
    model = load_run(tmp_path / "run")[2]
    counts = torch.tensor([0, 1, 1, 2, 3, 1, 3, 1, 1], dtype=torch.float64)  # add-one over 1..8
    torch.testing.assert_close(model.log_length_prior.exp().double(), counts / counts.sum())


@pytest.mark.parametrize(
    ("objective", "selection", "value"), [("amim", "amim", "amim_loss"), ("elbo", "elbo", "neg_elbo")]
)
def test_validation_loss_equals_the_training_objective_on_the_same_draws(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, objective: str, selection: str, value: str
) -> None:
    """``task.selection`` amim / elbo select on the objective's own loss (SentenceMIM Sec. 4.2): with the
    same draws, the task's validation value is the training loss of one batch of the whole split."""
    import numpy as np
    from torch.distributions import Normal

    from infolm.build import build_task
    from infolm.objectives import build_objective

    data = tmp_path / "data.txt"
    data.write_text("\n".join(LINES) + "\n")
    gru = {"emb": 8, "hidden": 12, "latent": 3}
    task_settings = {"valid_samples": 1, "test_samples": 1, "chunk": 1, "selection": selection}
    config = Config(model={"name": "sentence-gru", **gru}, objective={objective: {}})
    config.task = {"name": "sentence-latent", **task_settings}
    config.data.name, config.data.train, config.data.valid, config.data.test = ("path", str(data), str(data), str(data))
    config.data.eval_batch_size = len(LINES)  # one evaluation batch: the whole split
    corpus = load_corpus(config.data)
    task = build_task(config, corpus)
    torch.manual_seed(0)
    model = MODELS.build("sentence-gru", gru, vocab_size=len(corpus.vocab)).eval()
    # evaluation draws with sample(), training with rsample(): the same numbers from the same seed
    monkeypatch.setattr(Normal, "sample", lambda self, shape=(): self.rsample(torch.Size(shape)).detach())
    metrics = task.evaluate(model, "valid")
    assert metrics.selection == value
    sentences = task.sentences("valid")
    batch = sentences.batch(np.argsort(-sentences.lengths, kind="stable"), corpus.vocab.eos_id)  # evaluation's order
    loss = build_objective({objective: {}})
    loss.setup(corpus, model)
    torch.manual_seed(task.seed)
    training = loss(model, batch, None).losses[objective]
    assert metrics.loss == pytest.approx(float(training.detach()), rel=1e-6)


def sentence_latent_run(root: Path, samples: int) -> Path:
    from infolm.config import load_config

    root.mkdir(parents=True, exist_ok=True)
    run_dir = make_run(root, "latent", {"name": "sentence-gru", "emb": 8, "hidden": 12, "latent": 4}, {"amim": {}})
    config = load_config(run_dir / "config.yaml")
    config.task = {"name": "sentence-latent", "valid_samples": samples, "test_samples": samples, "chunk": 2}
    save_config(config, run_dir / "config.yaml")
    return run_dir


def test_evaluate_samples_equals_the_task_setting(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``infolm evaluate --samples K`` scores as a run whose task draws K (same seeded draws)."""
    configured = sentence_latent_run(tmp_path / "a", 3)
    overridden = sentence_latent_run(tmp_path / "b", 7)
    for split in ("valid", "test"):
        code, expected, err = run(capsys, "evaluate", str(configured), "--split", split, "--json")
        assert code == 0, err
        code, got, err = run(capsys, "evaluate", str(overridden), "--split", split, "--samples", "3", "--json")
        assert code == 0, err
        assert json.loads(got) == json.loads(expected) and json.loads(got)["samples"] == 3
        code, seven, _ = run(capsys, "evaluate", str(overridden), "--split", split, "--json")
        assert code == 0 and json.loads(seven)["samples"] == 7 and json.loads(seven)["nll"] != json.loads(got)["nll"]


@pytest.mark.parametrize(
    ("which", "samples", "message"),
    [("latent", "0", "--samples must be at least 1, got 0"), ("lstm", "2", "draws no latents")],
)
def test_evaluate_samples_bad_input_is_one_line(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], which: str, samples: str, message: str
) -> None:
    run_dir = sentence_latent_run(tmp_path, 2) if which == "latent" else runs[which]
    code, out, err = run(capsys, "evaluate", str(run_dir), "--samples", samples)
    assert code == 2 and out == "" and message in err and len(err.strip().splitlines()) == 1


def test_a_model_of_single_symbols_is_evaluated_without_the_sentence_steps(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The thesis's synthetic model scores one symbol per example: `evaluate` gives its bound (no BLEU,
    no latent entropy, no words-only bound); the commands that decode sentences refuse it."""
    model = {"name": "latent-synthetic", "latent": "categorical", "variables": 2, "categories": 3}
    synthetic = str(make_run(tmp_path, "synthetic", {**model, "embedding": 8, "hidden": 8}, {"mi-kl": {}}))
    code, out, err = run(capsys, "latent", "evaluate", synthetic, "--samples", "4", "--json")
    assert code == 0, err
    report = json.loads(out)
    bounds = report["bounds"]
    assert bounds["examples"] == 5 and bounds["tokens"] == 5  # the first symbol of each line
    assert "nll_per_word" not in bounds and bounds.get("nll_words") is None  # no <eos>: its tokens are its words
    assert "reconstruction" not in report and "latent_entropy" not in report
    assert "reconstruction_sampled" not in report
    for args in (["reconstruct", synthetic, "the cat"], ["sample", synthetic], ["interpolate", synthetic, "a", "b"]):
        code, out, err = run(capsys, "latent", *args)
        assert code == 2 and out == "" and "decodes no sentences" in err and len(err.strip().splitlines()) == 1


def test_the_neighbour_proposal_pilot_scores_each_proposal_on_validation(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    from experiments import smim_neighbor_proposal as pilot

    argv = ["smim_neighbor_proposal.py", str(runs["smim"]), "--sentences", "3", "--samples", "4"]
    monkeypatch.setattr(sys, "argv", [*argv, "--proposals", "0x1", "2x3", "--json"])
    pilot.main()
    rows = json.loads(capsys.readouterr().out)
    assert [(row["neighbors"], row["neighbor_draws"]) for row in rows] == [(0, 0), (2, 3)]
    assert all(math.isfinite(row["nll_aggregate_prior"]) and row["sentences"] == 3 for row in rows)
    monkeypatch.setattr(sys, "argv", [*argv, "--proposals", "2x0"])
    with pytest.raises(SystemExit):
        pilot.main()
    assert "a proposal is MxD" in capsys.readouterr().err
