"""Frontier comparisons: curves read at equal MI only where measured (``frontier`` in a protocol)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.reproduce.frontier import GAP, OUTSIDE, pareto_front, read_at
from experiments.reproduce.protocol import ProtocolError, load_pages, runs_of
from experiments.reproduce.render import evaluate, render_page

PROTOCOL = """
paper: demo
title: Demo
comparisons:
  - id: front
    claim: curve B has a lower NLL than curve A at equal MI
    protocol: two curves of three points each
    records: demo
    seeds: [0, 1, 2]
    metrics:
      - {name: NLL, path: valid.loss, better: lower, digits: 3}
      - {name: MI, path: valid.mi, better: higher, digits: 2}
    frontier:
      x: MI
      y: NLL
      at: [2.0, 3.5, 5.5]
      control: A
      expect: lower
      curves:
        A: [a-lam0, a-lam1, a-lam2]
        B: [b-lam0, b-lam1, b-lam2]
"""

# (MI, NLL) per arm: A's points at MI 1, 3, 5 (NLL rising); B is A lowered by 0.1 + 0.01 * seed, and at
# seed 2 its middle point is missing, leaving a gap of 4 nats that the reading at 3.5 must not bridge
POINTS = {
    "a-lam0": (1.0, 7.0),
    "a-lam1": (3.0, 7.2),
    "a-lam2": (5.0, 7.6),
    "b-lam0": (1.0, 6.9),
    "b-lam1": (3.0, 7.1),
    "b-lam2": (5.0, 7.5),
}


def _project(tmp_path: Path, protocol: str = PROTOCOL) -> tuple[Path, Path]:
    protocols, records = tmp_path / "protocols", tmp_path / "records"
    protocols.mkdir()
    (protocols / "demo.yaml").write_text(protocol)
    for arm, (mi, nll) in POINTS.items():
        for seed in range(3):
            if arm == "b-lam1" and seed == 2:
                continue
            folder = records / "demo" / f"{arm}-s{seed}"
            folder.mkdir(parents=True)
            shift = 0.01 * seed if arm.startswith("b") else 0.0
            line = {"step": 10, "epoch": 1, "split": "valid", "loss": nll - shift, "mi": mi}
            (folder / "metrics.jsonl").write_text(json.dumps(line) + "\n")
    return protocols, records


def test_the_front_keeps_only_undominated_points() -> None:
    points = [(1.0, 7.0), (3.0, 7.2), (2.0, 7.3), (5.0, 7.6), (4.0, 7.7), (1.0, 7.0)]
    # (2, 7.3) is dominated by (3, 7.2): more MI and a lower NLL; (4, 7.7) by (5, 7.6)
    assert pareto_front(points, "higher", "lower") == [(1.0, 7.0), (3.0, 7.2), (5.0, 7.6)]


def test_a_reading_is_a_point_a_line_between_near_points_or_nothing() -> None:
    front = [(1.0, 7.0), (3.0, 7.2), (5.0, 7.6)]
    assert read_at(front, 3.0, 1.0).value == pytest.approx(7.2)  # a measured point, whatever the gaps beside it
    assert read_at(front, 2.5, 2.0).value == pytest.approx(7.15)  # on the line between (1, 7.0) and (3, 7.2)
    gap = read_at(front, 2.5, 1.0)
    assert gap.value is None and gap.reason == GAP and (gap.low, gap.high) == (1.0, 3.0)
    assert read_at(front, 5.5, 9.0).reason == OUTSIDE and read_at(front, 0.5, 9.0).reason == OUTSIDE


def test_curves_pair_at_equal_mi_and_gap_readings_are_named(tmp_path: Path) -> None:
    protocols, records = _project(tmp_path)
    page = load_pages(protocols)["demo"]
    result = evaluate(page.comparisons[0], records)
    (curve,) = result.arms
    assert result.control is not None and result.control.arm.label == "A" and curve.arm.label == "B"
    at_2, at_35, at_55 = (m.name for m in result.comparison.metrics)
    # the max gap is 1 nat by default: A's points are 2 apart, so no reading between them is kept
    assert result.control.values.get(at_2, {}) == {} and result.control.values.get(at_35, {}) == {}
    assert at_55 not in result.control.values  # beyond MI 5: outside every curve
    text = render_page(page, [result])
    assert "A at MI 2, seed 0: between measured points at 1.00 and 3.00 (a gap wider than 1)" in text
    assert "B at MI 5.5, seed 1: outside the span of its frontier, 1.00-5.00" in text
    assert "no record" in curve.verdict  # nothing was read, so nothing is claimed


def test_readings_within_the_gap_pair_by_seed(tmp_path: Path) -> None:
    protocols, records = _project(tmp_path, PROTOCOL.replace("expect: lower", "expect: lower\n      max_gap: 2.5"))
    page = load_pages(protocols)["demo"]
    result = evaluate(page.comparisons[0], records)
    (curve,) = result.arms
    at_2 = result.comparison.metrics[0].name
    assert result.control is not None and result.control.values[at_2] == pytest.approx({0: 7.1, 1: 7.1, 2: 7.1})
    # B at seed 2 has points at MI 1 and 5 only: 4 nats apart, wider than 2.5, so that seed is left out
    assert curve.values[at_2] == pytest.approx({0: 7.0, 1: 6.99})
    assert curve.paired[at_2].diffs == pytest.approx([-0.1, -0.11])
    assert curve.verdict.startswith("at MI 2 reproduced")
    text = render_page(page, [result])
    assert "B at MI 2, seed 2: between measured points at 1.00 and 5.00" in text
    assert "| a-lam0-s0 | 7.000 | 1.00 |" in text  # the runs table holds the measured points


def test_a_frontier_protocol_names_its_runs_and_refuses_what_it_cannot_read(tmp_path: Path) -> None:
    protocols, _ = _project(tmp_path)
    page = load_pages(protocols)["demo"]
    assert ("b-lam2", 2) in runs_of(page) and len(runs_of(page)) == 18
    for old, new, message in (
        ("x: MI", "x: KL", "frontier axis 'KL' is no metric"),
        ("control: A", "control: C", "frontier control 'C' must be one of"),
        ("      expect: lower\n", "      expect: sideways\n", "frontier expect is lower or higher"),
        (
            "    frontier:\n",
            "    arms: [{arm: a-lam0, label: A}]\n    frontier:\n",
            "names its arms in frontier.curves",
        ),
    ):
        (protocols / "demo.yaml").write_text(PROTOCOL.replace(old, new))
        with pytest.raises(ProtocolError, match=message):
            load_pages(protocols)


def test_a_measured_only_curve_is_read_at_its_own_points_even_dominated_ones(tmp_path: Path) -> None:
    # B as separate models at fixed MI, read at 3, 4 and 5 beside A's frontier at the same MI
    protocol = PROTOCOL.replace("at: [2.0, 3.5, 5.5]", "at: [3.0, 4.0, 5.0]").replace(
        "      curves:\n", "      measured_only: [B]\n      max_gap: 2.5\n      curves:\n"
    )
    protocols, records = _project(tmp_path, protocol)
    for seed in range(3):  # B's MI-5 point below its MI-3 point: (3, 7.1) is now dominated
        path = records / "demo" / f"b-lam2-s{seed}" / "metrics.jsonl"
        path.write_text(json.dumps({"step": 10, "epoch": 1, "split": "valid", "loss": 7.0, "mi": 5.004}) + "\n")
    page = load_pages(protocols)["demo"]
    result = evaluate(page.comparisons[0], records)
    (curve,) = result.arms
    at_3, at_4, at_5 = (m.name for m in result.comparison.metrics)
    assert curve.values[at_3] == pytest.approx({0: 7.1, 1: 7.09})  # dominated, still read; seed 2 has no point
    assert curve.values[at_5] == pytest.approx({0: 7.0, 1: 7.0, 2: 7.0})  # 5.004 shows as 5.00 at 2 digits
    assert at_4 not in curve.values  # no line between B's points
    assert result.control is not None and result.control.values[at_4] == pytest.approx({0: 7.4, 1: 7.4, 2: 7.4})
    text = render_page(page, [result])
    assert "B at MI 4, seed 0: no point of its own there (read at its points only)" in text
    assert "(B at its own points only, no frontier or line)" in text
    (protocols / "demo.yaml").write_text(protocol.replace("measured_only: [B]", "measured_only: [C]"))
    with pytest.raises(ProtocolError, match="measured_only names no curve: C"):
        load_pages(protocols)
