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
