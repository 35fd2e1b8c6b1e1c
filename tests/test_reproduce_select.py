"""An arm that selects, per seed, among other arms by a held-out metric (``select`` in a protocol)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.reproduce.protocol import ProtocolError, load_pages, runs_of
from experiments.reproduce.render import evaluate, render_page

PROTOCOL = """
paper: demo
title: Demo
comparisons:
  - id: pick
    claim: the chosen setting beats the control
    protocol: two settings, chosen per seed on held-out data
    records: demo
    seeds: [0, 1, 2]
    metrics:
      - {name: test, path: score.test, better: higher, digits: 1}
      - {name: held-out, path: score.valid, better: higher, digits: 1}
    control: {arm: base, label: Base, paper: {test: 50.0}}
    arms:
      - {arm: a, label: A}
      - {arm: b, label: B}
      - arm: chosen
        label: Chosen on held-out
        select: {among: [a, b], by: held-out}
        paper: {test: 53.0}
"""

# (valid, test) per run: held-out picks b at seed 0 (its test is lower than a's), a at seed 1, a at seed 2 (tie)
SCORES = {
    "base": [(1.0, 10.0), (1.0, 11.0), (1.0, 12.0)],
    "a": [(2.0, 20.0), (5.0, 21.0), (3.0, 22.0)],
    "b": [(4.0, 15.0), (3.0, 30.0), (3.0, 31.0)],
}


def _project(tmp_path: Path, protocol: str = PROTOCOL, skip: tuple[str, ...] = ()) -> tuple[Path, Path]:
    protocols, records = tmp_path / "protocols", tmp_path / "records"
    protocols.mkdir()
    (protocols / "demo.yaml").write_text(protocol)
    for arm, rows in SCORES.items():
        for seed, (valid, test) in enumerate(rows):
            if f"{arm}-s{seed}" in skip:
                continue
            folder = records / "demo" / f"{arm}-s{seed}"
            folder.mkdir(parents=True)
            (folder / "score.json").write_text(json.dumps({"valid": valid, "test": test}))
    return protocols, records


def test_the_selected_arm_reads_the_run_best_on_the_held_out_metric(tmp_path: Path) -> None:
    protocols, records = _project(tmp_path)
    page = load_pages(protocols)["demo"]
    result = evaluate(page.comparisons[0], records)
    chosen = result.arms[2]
    assert [record.name for record in chosen.records] == ["b-s0", "a-s1", "a-s2"]  # the tie goes to a, listed first
    assert chosen.values["test"] == {0: 15.0, 1: 21.0, 2: 22.0}  # never the best test of the two
    assert chosen.paired["test"].diffs == [5.0, 10.0, 10.0]
    text = render_page(page, [result])
    assert "| chosen: b-s0 |" in text and "No record" not in text
    # drivers train the arms it chooses among, not an arm of its own name
    assert ("chosen", 0) not in runs_of(page) and ("b", 2) in runs_of(page)


def test_a_seed_missing_one_choice_is_left_out_and_named(tmp_path: Path) -> None:
    protocols, records = _project(tmp_path, skip=("b-s1",))
    page = load_pages(protocols)["demo"]
    result = evaluate(page.comparisons[0], records)
    assert [record.name for record in result.arms[2].records] == ["b-s0", "a-s2"]
    text = render_page(page, [result])
    assert "No record: `b-s1`." in text and "chosen-s1" not in text


def test_select_must_name_a_metric_of_the_comparison(tmp_path: Path) -> None:
    protocols, _ = _project(tmp_path, PROTOCOL.replace("by: held-out", "by: dev"))
    with pytest.raises(ProtocolError, match="selects by 'dev'"):
        load_pages(protocols)
