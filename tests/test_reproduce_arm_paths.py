"""An arm whose records keep a metric elsewhere (a language model's exact score beside a latent model's
bound) names that path in ``paths``; the generator reads each arm at its own path."""

from __future__ import annotations

import json
from pathlib import Path

from experiments.reproduce.protocol import load_pages
from experiments.reproduce.render import evaluate, render_comparison

PROTOCOL = """
paper: demo
title: "Demo"
comparisons:
  - id: nll
    title: "NLL"
    claim: "the latent model is below the LM"
    protocol: "two seeds"
    records: demo
    seeds: [0, 1]
    metrics:
      - {name: NLL, path: report.melbo.nll, better: lower}
    control:
      arm: lm
      label: LM
      paths: {NLL: score.values.sentence_nll}
    arms:
      - {arm: latent, label: latent, expect: lower}
"""


def write(folder: Path, name: str, payload: dict[str, object]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(json.dumps(payload))


def test_each_arm_is_read_at_its_own_path(tmp_path: Path) -> None:
    protocols, records = tmp_path / "protocols", tmp_path / "records" / "demo"
    protocols.mkdir()
    (protocols / "demo.yaml").write_text(PROTOCOL)
    for seed, (bound, exact) in enumerate([(1.0, 3.0), (2.0, 5.0)]):
        write(records / f"latent-s{seed}", "report.json", {"melbo": {"nll": bound}})
        write(records / f"lm-s{seed}", "score.json", {"values": {"sentence_nll": exact}})
    comparison = load_pages(protocols)["demo"].comparisons[0]
    assert comparison.control is not None and comparison.control.paths == {"NLL": "score.values.sentence_nll"}
    result = evaluate(comparison, tmp_path / "records")
    assert result.control is not None and result.control.values["NLL"] == {0: 3.0, 1: 5.0}
    assert result.arms[0].values["NLL"] == {0: 1.0, 1: 2.0}
    assert result.arms[0].paired["NLL"].diffs == [-2.0, -3.0]
    runs = "\n".join(render_comparison(result, "demo"))
    assert "| lm-s1 (LM) | 5.00 |" in runs and "| latent-s1 | 2.00 |" in runs  # the per-run table reads the same paths


def test_an_arm_whose_runs_diverged_says_so(tmp_path: Path) -> None:
    """A record kept for a run the divergence rule ended (``diverged.json``, no evaluation) is not "no record"."""
    protocols, records = tmp_path / "protocols", tmp_path / "records" / "demo"
    protocols.mkdir()
    (protocols / "demo.yaml").write_text(PROTOCOL.replace("control:\n      arm: lm", "old_control:\n      arm: lm"))
    text = (protocols / "demo.yaml").read_text()
    (protocols / "demo.yaml").write_text(
        text.split("    old_control:")[0] + "    arms:\n      - {arm: latent, label: latent}\n"
    )
    for seed in (0, 1):
        write(records / f"latent-s{seed}", "diverged.json", {"error": "infolm: error: training diverged"})
    result = evaluate(load_pages(protocols)["demo"].comparisons[0], tmp_path / "records")
    assert result.arms[0].verdict == "diverged: no point"
    assert "| NLL ↓ | latent | — | diverged | — | diverged: no point |" in render_comparison(result, "demo")
    write(records / "latent-s1", "report.json", {"melbo": {"nll": 2.0}})  # one seed with a value: read as usual
    result = evaluate(load_pages(protocols)["demo"].comparisons[0], tmp_path / "records")
    assert result.arms[0].verdict != "diverged: no point" and result.arms[0].values["NLL"] == {1: 2.0}
