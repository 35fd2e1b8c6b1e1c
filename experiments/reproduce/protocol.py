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
    times: str | None = None  # optional dotted path: the value is multiplied by the record's number there
    over: str | None = None  # optional dotted path: ... and divided by this one (per sentence -> per token)


@dataclass
class Arm:
    arm: str
    label: str
    paper: dict[str, Any] = field(default_factory=dict)  # metric name -> the paper's number (or text)
    expect: str | None = None  # lower | higher: the paper's direction when it gives no number
    config: str | None = None  # the arm's training config, for the driver
    overrides: list[str] = field(default_factory=list)  # dotted overrides on top of config, for the driver
    paths: dict[str, str] = field(default_factory=dict)  # metric name -> this arm's own path (a within-run arm)
    # an arm chosen per seed among these arms, by the best value of the metric ``select_by`` (held-out data)
    select: list[str] = field(default_factory=list)
    select_by: str | None = None


@dataclass
class FrontierSpec:
    """Curves read at equal x where they were measured (``frontier.py``; format: README.md here)."""

    x: str  # the metric the curves are read at (the MI estimate)
    y: str  # the metric read (the NLL bound)
    at: list[float]  # the x values at which every curve is read, declared before the runs are read
    curves: dict[str, list[str]]  # curve label -> its arms (one run per arm and seed)
    control: str  # the curve the others are paired with
    expect: str | None = None  # lower | higher: the paper's direction of curve - control in y
    max_gap: float = 1.0  # the widest x gap a reading may bridge (nats of MI)
    # curves read at their own points only (no frontier, no line): a model whose x is set by its design
    measured_only: list[str] = field(default_factory=list)


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
    frontier: FrontierSpec | None = None

    def run_name(self, arm: str, seed: int) -> str:
        return f"{arm}-s{seed}"


@dataclass
class Page:
    paper: str
    title: str
    short: str = ""  # the paper's name in the index (default: the title up to its first colon or comma)
    order: int = 100  # the page's place in the index (then by paper name)
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
    overrides = raw.get("overrides") or []
    if not isinstance(overrides, list):
        raise ProtocolError(f"{where}: overrides is a list of key=value strings")
    select = raw.get("select")
    among: list[str] = []
    by: str | None = None
    if select is not None:
        if not isinstance(select, dict) or not isinstance(select.get("among"), list) or len(select["among"]) < 2:
            raise ProtocolError(f"{where}: select is a mapping with 'among' (two arms or more) and 'by' (a metric)")
        among, by = [str(name) for name in select["among"]], str(_need(select, "by", f"{where} select"))
    return Arm(
        arm=arm,
        label=str(raw.get("label", arm)),
        paper=dict(paper),
        expect=expect,
        config=raw.get("config"),
        overrides=[str(o) for o in overrides],
        paths={str(k): str(v) for k, v in (raw.get("paths") or {}).items()},
        select=among,
        select_by=by,
    )


def _metric(raw: Any, where: str) -> Metric:
    if not isinstance(raw, dict):
        raise ProtocolError(f"{where}: a metric is a mapping with 'name' and 'path'")
    metric = Metric(
        name=str(_need(raw, "name", where)),
        path=str(_need(raw, "path", where)),
        better=str(raw.get("better", "lower")),
        transform=raw.get("transform"),
        digits=int(raw.get("digits", 2)),
        times=None if raw.get("times") is None else str(raw["times"]),
        over=None if raw.get("over") is None else str(raw["over"]),
    )
    if metric.better not in ("lower", "higher"):
        raise ProtocolError(f"{where}: better is lower or higher, not {metric.better!r}")
    if metric.transform is not None and metric.transform not in TRANSFORMS:
        raise ProtocolError(f"{where}: transform is one of {', '.join(TRANSFORMS)}, not {metric.transform!r}")
    return metric


def _frontier(raw: Any, names: set[str], where: str) -> FrontierSpec:
    if not isinstance(raw, dict):
        raise ProtocolError(f"{where}: frontier is a mapping with x, y, at, curves and control")
    missing = [key for key in ("x", "y", "at", "curves", "control") if key not in raw]
    if missing:
        raise ProtocolError(f"{where}: frontier misses {', '.join(missing)}")
    if not isinstance(raw["curves"], dict) or not isinstance(raw["at"], list):
        raise ProtocolError(f"{where}: frontier curves maps a label to its arms, and at is a list of numbers")
    spec = FrontierSpec(
        x=str(raw["x"]),
        y=str(raw["y"]),
        at=[float(v) for v in raw["at"]],
        curves={str(label): [str(a) for a in arms] for label, arms in raw["curves"].items()},
        control=str(raw["control"]),
        expect=raw.get("expect"),
        max_gap=float(raw.get("max_gap", 1.0)),
        measured_only=[str(label) for label in raw.get("measured_only") or []],
    )
    for axis in (spec.x, spec.y):
        if axis not in names:
            raise ProtocolError(f"{where}: frontier axis '{axis}' is no metric of the comparison")
    if spec.control not in spec.curves or len(spec.curves) < 2:
        raise ProtocolError(f"{where}: frontier control '{spec.control}' must be one of two curves or more")
    unknown = [label for label in spec.measured_only if label not in spec.curves]
    if unknown:
        raise ProtocolError(f"{where}: frontier measured_only names no curve: {', '.join(unknown)}")
    if spec.expect not in (None, "lower", "higher"):
        raise ProtocolError(f"{where}: frontier expect is lower or higher, not {spec.expect!r}")
    if not spec.at or spec.max_gap <= 0:
        raise ProtocolError(f"{where}: frontier needs at least one 'at' value and a positive max_gap")
    return spec


def _comparison(raw: Any, where: str, driver: str) -> Comparison:
    if not isinstance(raw, dict):
        raise ProtocolError(f"{where}: a comparison is a mapping")
    cid = str(_need(raw, "id", where))
    where = f"{where} '{cid}'"
    metrics = [_metric(m, f"{where} metrics") for m in _need(raw, "metrics", where)]
    if not metrics:
        raise ProtocolError(f"{where}: at least one metric")
    names = {metric.name for metric in metrics}
    frontier = _frontier(raw["frontier"], names, where) if raw.get("frontier") is not None else None
    if frontier is not None and (raw.get("control") or raw.get("arms")):
        raise ProtocolError(f"{where}: a frontier comparison names its arms in frontier.curves, no control or arms")
    control = _arm(raw["control"], f"{where} control") if raw.get("control") else None
    if frontier is not None:  # every point of every curve, labelled with its curve
        arms = [Arm(arm=name, label=f"{label}: {name}") for label, group in frontier.curves.items() for name in group]
    else:
        arms = [_arm(a, f"{where} arms") for a in _need(raw, "arms", where)]
    for arm in [*arms, *([control] if control else [])]:
        if arm.select and arm.select_by not in names:
            raise ProtocolError(f"{where}: arm '{arm.arm}' selects by '{arm.select_by}', which is no metric of it")
        for key, given in (("paths", arm.paths), ("paper", arm.paper)):
            unknown = sorted(set(given) - names)
            if unknown:
                raise ProtocolError(f"{where} arm '{arm.arm}': {key} names no metric: {', '.join(unknown)}")
    return Comparison(
        id=cid,
        title=str(raw.get("title", cid)),
        claim=str(_need(raw, "claim", where)).strip(),
        protocol=str(_need(raw, "protocol", where)).strip(),
        records=str(_need(raw, "records", where)),
        seeds=[int(s) for s in _need(raw, "seeds", where)],
        metrics=metrics,
        arms=arms,
        control=control,
        headline=bool(raw.get("headline", False)),
        tolerance=None if raw.get("tolerance") is None else float(raw["tolerance"]),
        matched_epochs=raw.get("matched_epochs"),
        curve=raw.get("curve"),
        notes=str(raw.get("notes") or "").strip(),
        command=str(raw.get("command") or driver) or None,
        frontier=frontier,
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
    """Every page declared in ``folder``, by paper name; files naming one paper join after the page's own
    file (``<paper>.yaml``) in file-name order."""
    pages: dict[str, Page] = {}
    # a page's own file (<paper>.yaml, which holds its title) comes first, then the files that add to it
    paths = sorted(folder.glob("*.yaml"), key=lambda p: (str(read_file(p)["paper"]) != p.stem, p.name))
    for path in paths:
        raw = read_file(path)
        paper = str(raw["paper"])
        page = pages.setdefault(paper, Page(paper=paper, title=paper))
        page.files.append(path.name)
        if raw.get("title") and page.title == paper:
            page.title = str(raw["title"])
            page.short = str(raw.get("short") or "")
            page.order = int(raw.get("order", 100))
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


def arms_of(page: Page, records: str | None = None) -> dict[str, Arm]:
    """Every arm a page reads (controls included), by name, optionally of one record folder; for drivers.
    An arm that selects among others is left out: it has no runs of its own."""
    found: dict[str, Arm] = {}
    for comparison in page.comparisons:
        if records is None or comparison.records == records:
            for arm in ([comparison.control] if comparison.control else []) + comparison.arms:
                if arm.select:
                    continue
                if arm.arm not in found or (found[arm.arm].config is None and arm.config is not None):
                    found[arm.arm] = arm
    return found


def runs_of(page: Page, records: str | None = None) -> list[tuple[str, int]]:
    """The (arm, seed) pairs a page reads, controls included, optionally of one record folder; for drivers.
    An arm that selects among others stands for those others (it has no runs of its own)."""
    seen: list[tuple[str, int]] = []
    for comparison in page.comparisons:
        if records is not None and comparison.records != records:
            continue
        arms = ([comparison.control] if comparison.control else []) + comparison.arms
        for arm in arms:
            for name in arm.select or [arm.arm]:
                for seed in comparison.seeds:
                    if (name, seed) not in seen:
                        seen.append((name, seed))
    return seen
