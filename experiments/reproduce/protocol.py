"""Each paper's comparisons, declared once in ``experiments/protocols/*.yaml`` and read by the drivers
(which runs to train and score) and by the generator (which tables to write). Format: README.md here."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
PROTOCOLS = ROOT / "experiments" / "protocols"
TRANSFORMS = ("exp", "x100", "bits", "neg")


class ProtocolError(ValueError):
    """A protocol file that cannot be read as declared; the message names the file and the field."""


@dataclass
class Metric:
    name: str
    path: str
    better: str = "lower"  # lower | higher
    transform: str | None = None
    digits: int = 2


@dataclass
class Arm:
    arm: str
    label: str
    paper: dict[str, Any] = field(default_factory=dict)  # metric name -> the paper's number (or text)
    expect: str | None = None  # lower | higher: the paper's direction when it gives no number


@dataclass
class Comparison:
    id: str
    title: str
    claim: str
    protocol: str
    records: str
    seeds: list[int]
    metrics: list[Metric]
    arms: list[Arm]
    control: Arm | None = None
    headline: bool = False
    tolerance: float | None = None
    matched_epochs: dict[str, Any] | None = None
    curve: dict[str, Any] | None = None
    notes: str = ""
    command: str | None = None

    def run_name(self, arm: str, seed: int) -> str:
        return f"{arm}-s{seed}"


@dataclass
class Page:
    paper: str
    title: str
    source: str = ""
    driver: str = ""
    intro: str = ""
    comparisons: list[Comparison] = field(default_factory=list)
    files: list[str] = field(default_factory=list)


def _need(raw: dict[str, Any], key: str, where: str) -> Any:
    if key not in raw:
        raise ProtocolError(f"{where}: missing '{key}'")
    return raw[key]


def _arm(raw: Any, where: str) -> Arm:
    if not isinstance(raw, dict):
        raise ProtocolError(f"{where}: an arm is a mapping with 'arm' and 'label'")
    expect = raw.get("expect")
    if expect not in (None, "lower", "higher"):
        raise ProtocolError(f"{where}: expect is lower or higher, not {expect!r}")
    paper = raw.get("paper") or {}
    if not isinstance(paper, dict):
        raise ProtocolError(f"{where}: paper is a mapping from metric name to the paper's number")
    arm = str(_need(raw, "arm", where))
    return Arm(arm=arm, label=str(raw.get("label", arm)), paper=dict(paper), expect=expect)


def _metric(raw: Any, where: str) -> Metric:
    if not isinstance(raw, dict):
        raise ProtocolError(f"{where}: a metric is a mapping with 'name' and 'path'")
    metric = Metric(
        name=str(_need(raw, "name", where)),
        path=str(_need(raw, "path", where)),
        better=str(raw.get("better", "lower")),
        transform=raw.get("transform"),
        digits=int(raw.get("digits", 2)),
    )
    if metric.better not in ("lower", "higher"):
        raise ProtocolError(f"{where}: better is lower or higher, not {metric.better!r}")
    if metric.transform is not None and metric.transform not in TRANSFORMS:
        raise ProtocolError(f"{where}: transform is one of {', '.join(TRANSFORMS)}, not {metric.transform!r}")
    return metric


def _comparison(raw: Any, where: str, driver: str) -> Comparison:
    if not isinstance(raw, dict):
        raise ProtocolError(f"{where}: a comparison is a mapping")
    cid = str(_need(raw, "id", where))
    where = f"{where} '{cid}'"
    metrics = [_metric(m, f"{where} metrics") for m in _need(raw, "metrics", where)]
    if not metrics:
        raise ProtocolError(f"{where}: at least one metric")
    control = _arm(raw["control"], f"{where} control") if raw.get("control") else None
    return Comparison(
        id=cid,
        title=str(raw.get("title", cid)),
        claim=str(_need(raw, "claim", where)).strip(),
        protocol=str(_need(raw, "protocol", where)).strip(),
        records=str(_need(raw, "records", where)),
        seeds=[int(s) for s in _need(raw, "seeds", where)],
        metrics=metrics,
        arms=[_arm(a, f"{where} arms") for a in _need(raw, "arms", where)],
        control=control,
        headline=bool(raw.get("headline", False)),
        tolerance=None if raw.get("tolerance") is None else float(raw["tolerance"]),
        matched_epochs=raw.get("matched_epochs"),
        curve=raw.get("curve"),
        notes=str(raw.get("notes") or "").strip(),
        command=str(raw.get("command") or driver) or None,
    )


def read_file(path: Path) -> dict[str, Any]:
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as error:
        raise ProtocolError(f"{path.name}: not YAML ({error})") from None
    if not isinstance(raw, dict) or "paper" not in raw:
        raise ProtocolError(f"{path.name}: a protocol is a mapping with 'paper'")
    return raw


def load_pages(folder: Path = PROTOCOLS) -> dict[str, Page]:
    """Every page declared in ``folder``, by paper name; files naming one paper join in file-name order."""
    pages: dict[str, Page] = {}
    for path in sorted(folder.glob("*.yaml")):
        raw = read_file(path)
        paper = str(raw["paper"])
        page = pages.setdefault(paper, Page(paper=paper, title=paper))
        page.files.append(path.name)
        if raw.get("title") and page.title == paper:
            page.title = str(raw["title"])
            page.source = str(raw.get("source") or "")
            page.driver = str(raw.get("driver") or "")
            page.intro = str(raw.get("intro") or "").strip()
        for item in raw.get("comparisons") or []:
            comparison = _comparison(item, path.name, str(raw.get("driver") or ""))
            if any(c.id == comparison.id for c in page.comparisons):
                raise ProtocolError(f"{path.name}: comparison id '{comparison.id}' twice on page '{paper}'")
            page.comparisons.append(comparison)
    return pages


def load_protocol(paper: str, folder: Path = PROTOCOLS) -> Page:
    """One paper's declarations, for a driver: its comparisons' arms, controls, seeds and record folders."""
    pages = load_pages(folder)
    if paper not in pages:
        raise ProtocolError(f"no protocol for '{paper}' (known: {', '.join(sorted(pages)) or 'none'})")
    return pages[paper]


def runs_of(page: Page, records: str | None = None) -> list[tuple[str, int]]:
    """The (arm, seed) pairs a page reads, controls included, optionally of one record folder; for drivers."""
    seen: list[tuple[str, int]] = []
    for comparison in page.comparisons:
        if records is not None and comparison.records != records:
            continue
        arms = ([comparison.control] if comparison.control else []) + comparison.arms
        for arm in arms:
            for seed in comparison.seeds:
                if (arm.arm, seed) not in seen:
                    seen.append((arm.arm, seed))
    return seen
