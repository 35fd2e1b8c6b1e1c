"""The one-line before/after summaries that end each extra evaluation of ``infolm evaluate``."""

import json
import math

import pytest

from infolm.cli.summaries import before_after, extra_summaries
from tests.conftest import run_in_process


def test_before_after_in_perplexity_and_bits_per_character():
    assert before_after("test", math.log(100.0), math.log(85.0), "word") == "test ppl 100.00 -> 85.00 (-15.0%)"
    two_bits, one_bit = 2 * math.log(2), math.log(2)
    assert before_after("test", one_bit, two_bits, "char") == "test bpc 1.000 -> 2.000 (+100.0%)"


def test_each_extra_gets_its_line_from_its_own_numbers():
    result = {
        "split": "valid",
        "ppl": 90.0,
        "dynamic": {"static_test_nll": math.log(80.0), "test_nll": math.log(60.0), "lr": 1e-4, "decay": 0.001}
        | {"epsilon": 1e-5, "bptt": 10},
        "temperature": {"test_nll_t1": math.log(80.0), "test_nll": math.log(79.2), "temperature": 1.0512},
        "mc_dropout": {"standard_test_nll": math.log(80.0), "test_nll": math.log(76.0), "samples": 50}
        | {"rate_scale": 0.6, "temperature": 0.95, "tuned_on_valid_tokens": 300.0},
        "induced": {"valid": {"induced_ppl": 1.0, "kn_ppl": 2.0}, "test": {"induced_ppl": 150.0, "kn_ppl": 200.0}},
        "reverse_ppl": {"test_ppl": 250.0, "valid_ppl": 260.0, "heldout_ppl": 90.0, "generated_tokens": 10000.0},
        "mi": {"generated": {"mean": 0.1, "std": 0.01}, "real": {"mean": 0.2, "std": 0.02}, "tokens": 5000},
        "interpolate": {"split": "test", "tuned_on": "valid", "order": 2, "alpha": 0.12345}
        | {"model_nll": math.log(80.0), "mixed_nll": math.log(72.0), "ngram_nll": math.log(150.0)},
    }
    lines = extra_summaries(result, "word", induced_order=2)
    assert list(lines) == ["induced", "temperature", "mc_dropout", "dynamic", "reverse_ppl", "mi", "interpolate"]
    assert lines["interpolate"] == (
        "2-gram interpolation: test ppl 80.00 -> 72.00 (-10.0%), alpha=0.1235 tuned on valid "
        "(the 2-gram alone: ppl 150.00)"
    )
    in_bits = {**result["interpolate"], "model_nll": math.log(2), "mixed_nll": 0.5 * math.log(2)}
    assert extra_summaries({"interpolate": in_bits | {"ngram_nll": 3 * math.log(2)}}, "char")["interpolate"] == (
        "2-gram interpolation: test bpc 1.000 -> 0.500 (-50.0%), alpha=0.1235 tuned on valid "
        "(the 2-gram alone: bpc 3.000)"
    )
    assert lines["dynamic"] == (
        "dynamic evaluation: test ppl 80.00 -> 60.00 (-25.0%), tuned on valid: lr=0.0001, lambda=0.001, "
        "epsilon=1e-05, max_time_steps=10"
    )
    assert lines["temperature"] == "softmax temperature: test ppl 80.00 -> 79.20 (-1.0%), T=1.051 tuned on valid"
    assert lines["mc_dropout"] == (
        "MC dropout (50 masks vs dropout off): test ppl 80.00 -> 76.00 (-5.0%), dropout rate x0.6, T=0.95, "
        "tuned on valid"
    )
    assert (
        lines["induced"]
        == "induced 2-gram: test ppl 150.00 (the model's) vs 200.00 (Kneser-Ney 2-gram of train) (-25.0%)"
    )
    assert lines["reverse_ppl"].startswith("reverse perplexity: test 250.00, valid 260.00 (a fresh LM trained on 10000")
    assert lines["mi"].startswith(
        "segment MI: sampled text 0.100 ± 0.010 nats vs real text 0.200 ± 0.020 nats (-50.0%)"
    )
    untuned = extra_summaries({"mc_dropout": {**result["mc_dropout"], "tuned_on_valid_tokens": 0.0}}, "word")
    assert untuned["mc_dropout"].endswith("T=0.95 (not tuned)")
    assert extra_summaries({"split": "valid", "ppl": 90.0}, "word") == {}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("run")
    result = run_in_process("train", "configs/tiny.yaml", f"run.dir={path}", "train.max_steps=10", "train.eval_every=5")
    assert result.returncode == 0, result.stderr
    return path


def test_evaluate_ends_each_extra_with_its_summary(run_dir):
    extras = ["--tune-temperature", "--dynamic", "--dynamic-tune-tokens", "300", "--dynamic-ms-tokens", "2000"]
    extras += ["--dynamic-bptt", "5", "--dynamic-ms-batch", "16", "--as-trained"]  # the run's short splits
    text = run_in_process("evaluate", str(run_dir), "--split", "test", *extras)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    at = {line.split(":")[0]: i for i, line in enumerate(lines)}
    assert lines[at["temperature"] + 1] == lines[at["softmax temperature"]]
    assert at["softmax temperature"] == at["temperature"] + 1 and at["dynamic evaluation"] == at["dynamic"] + 1
    assert lines[-1].startswith("dynamic evaluation: test ppl ")

    payload = json.loads(run_in_process("evaluate", str(run_dir), "--split", "test", "--json", *extras).stdout)
    assert set(payload["summaries"]) == {"temperature", "dynamic"}
    assert payload["summaries"]["dynamic"] == lines[-1]  # the same line in both modes
    assert payload["summaries"]["temperature"] == lines[at["softmax temperature"]]
    temperature = payload["temperature"]
    before, after = math.exp(temperature["test_nll_t1"]), math.exp(temperature["test_nll"])
    assert (
        f"test ppl {before:.2f} -> {after:.2f} ({100 * (after - before) / before:+.1f}%)"
        in lines[at["softmax temperature"]]
    )
