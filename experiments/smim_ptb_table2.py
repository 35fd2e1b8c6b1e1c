"""SentenceMIM on PTB at a CPU scale: score the runs of experiments/smim_ptb_cpu.sh that the protocol
``experiments/protocols/smim.yaml`` compares, and keep each as a record; the page
``docs/reproductions/smim.md`` is then rebuilt from the records by ``python -m experiments.report smim``.

    python experiments/smim_ptb_table2.py --samples 500 --sentences 0 --proposal-floors -4 --archive

The runs are the protocol's, each arm at the seeds its comparisons read (``--arms`` and ``--seeds`` score
others, e.g. ``smim-z128``; ``--list-runs`` prints the protocol's runs, ``--list-arms`` its arms and
``--train-args ARM`` an arm's config and overrides, for ``smim_ptb_cpu.sh``). A latent run (task ``sentence-latent``:
sMIM, sVAE, AE) is scored on the first ``--sentences`` PTB test sentences (0: all of them; the page reads
the IWAE-500 reports of the whole split) with ``infolm.evaluation.latent_report`` (IWAE-K bound with the
N(0, I) prior, KL, MI, active units, BLEU-1 of reconstructions with every word sampled from p(x|z), the
paper's, under ``reconstruction_sampled``, and of greedy ones under ``reconstruction``, which older reports
and records hold alone; Kraskov entropy of the codes, MELBO, the bound under each widened proposal of
``--proposal-floors``, and with ``--aggregate-prior`` the IWAE-K bound under sMIM's own prior, the aggregated
posterior of the training split, under ``aggregate_prior``); a sentence LM (task ``sentence-lm``)
exactly, by its task's evaluation. Each run's report is saved as ``<run>/report-test-iwae<K>-<N>.json``
(``<run>/report-test-<N>.json`` for an LM; N is ``all`` for the whole split) and reused only for the same K
and N; one line per run says what was scored.

``--archive`` copies each run's config, log, summary and reports (no checkpoint) into
``experiments/records/smim-ptb-cpu/``, kept in the repository, as soon as the run is scored (a lost
machine keeps what was scored); a run found there and not under ``--runs`` is read from its record
(its reports are final: a record cannot be scored again), and ``smim_ptb_cpu.sh`` does not train it
again.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from infolm.errors import InfolmError
from infolm.training.checkpoint import write_json_atomic
from infolm.training.records import archive_run, is_record

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script: the repository root holds the protocols' package
from experiments.reproduce.protocol import arms_of, load_protocol, runs_of  # noqa: E402

RECORDS = ROOT / "experiments" / "records" / "smim-ptb-cpu"
PAPER = "smim"  # experiments/protocols/smim.yaml


def protocol_pairs() -> list[tuple[str, int]]:
    """The (arm, seed) runs the protocol's comparisons read from this driver's records, controls first."""
    return runs_of(load_protocol(PAPER), RECORDS.name)


def protocol_runs() -> tuple[list[str], list[int]]:
    """The arms (controls first, in the protocol's order) and the seeds the protocol's comparisons read
    from this driver's records."""
    pairs = protocol_pairs()
    arms = list(dict.fromkeys(arm for arm, _ in pairs))
    seeds = sorted({seed for _, seed in pairs})
    return arms, seeds


def train_args(name: str) -> list[str]:
    """An arm's training config and overrides, as the protocol declares them; an arm ``BASE-zN`` not in the
    protocol (the larger latents of Table 7) is BASE's with ``model.latent=N``."""
    arms = arms_of(load_protocol(PAPER), RECORDS.name)
    base, _, latent = name.rpartition("-z") if "-z" in name and name not in arms else (name, "", "")
    arm = arms.get(base)
    if arm is None or not arm.config or (latent and not latent.isdigit()):
        raise SystemExit(f"{name}: not an arm of experiments/protocols/{PAPER}.yaml (known: {', '.join(arms)})")
    return [arm.config, *arm.overrides, *([f"model.latent={latent}"] if latent else [])]


def run_jobs(run: Path) -> dict[str, Any]:
    """What a record of ``run`` says of the jobs that made it: the training command (the arm's config and
    overrides as the protocol declares them, the run's directory and seed) with its wall time (the
    cumulative ``elapsed`` of ``train-summary.json``, resumed parts included), and this scoring call; the
    commit and machine they ran on."""
    from experiments.reproduce.jobs import shown
    from experiments.reproduce.provenance import git_commit, machine_line

    arm, _, seed = run.name.rpartition("-s")
    jobs: list[dict[str, Any]] = []
    summary = run / "train-summary.json"
    if summary.is_file() and arm and seed.isdigit():
        train = [sys.executable, "-m", "infolm", "train", *train_args(arm), f"run.dir={run}", f"run.seed={seed}"]
        elapsed = json.loads(summary.read_text()).get("elapsed")
        jobs.append({"key": "train", "command": shown(train), **({"wall_s": round(elapsed, 1)} if elapsed else {})})
    jobs.append({"key": "score", "command": shown(["python", *sys.argv])})  # no machine path in a record
    return {"jobs": jobs, "commit": git_commit(), "machine": machine_line()}


def is_lm(run: Path) -> bool:
    """A sentence LM (scored exactly by its task) rather than a latent model, by the run's config."""
    config = yaml.safe_load((run / "config.yaml").read_text()) or {}
    return (config.get("task") or {}).get("name") == "sentence-lm"


def report_path(run: Path, sentences: int, samples: int | None = None) -> Path:
    """Where a run's test report for these settings is kept (``samples``: None for the LM's exact score)."""
    scope = str(sentences) if sentences else "all"
    return run / (f"report-test-{scope}.json" if samples is None else f"report-test-iwae{samples}-{scope}.json")


def latent_run_report(
    run: Path,
    samples: int,
    sentences: int,
    floors: list[float] | None = None,
    aggregate: bool = False,
    aggregate_components: int | None = None,
    part: tuple[int, int] | None = None,
    neighbors: tuple[int, int] = (0, 1),
) -> dict[str, Any] | None:
    """The run's test report for these settings (cached), with the IWAE bound under each widened proposal
    of ``floors`` (log-variance floors; the model itself is unchanged) under ``widened``, the BLEU-1 of
    sampled reconstructions added to an older report that has the greedy one only, and with ``aggregate``
    the bound under the aggregated posterior of the training split (of at most ``aggregate_components``
    training sentences) under ``aggregate_prior``, its proposal with ``neighbors`` (M, D) D draws from each of
    the M training posteriors nearest q's mean (a report scored with another proposal is scored again).

    The importance-sampled bounds (own proposal, aggregated prior from the same draws, widened proposals) are
    sums over the test batches (``infolm.evaluation.latent_passes``): with ``part`` (I, N) this call scores
    shard I of N of them, saves its sums beside the report and returns None; a later call without ``part``
    merges a complete set of shards instead of scoring the batches itself."""
    from infolm.build import load_run
    from infolm.evaluation.latent_passes import (
        aggregate_section,
        score_passes,
        shard_batches,
        widened_section,
    )
    from infolm.evaluation.latent_report import proposal_floor_binds, widened_floor
    from infolm.objectives.base import deterministic_latent

    if is_record(run):
        if part is not None:
            return None  # a record has no checkpoint: nothing to score
        return recorded(run, report_path(run, sentences, samples), floors, aggregate, neighbors)
    config, corpus, model = load_run(run, "cpu", full_splits=True)
    deterministic = deterministic_latent(config.objective)
    saved = report_path(run, sentences, samples)
    report: dict[str, Any] | None = None
    if fresh(saved, run):
        cached = dict(json.loads(saved.read_text()))
        current = "bleu1_authors" in cached.get("reconstruction", {})  # else: an older report's format
        if current and bool(cached["bounds"].get("deterministic")) == deterministic:
            report = cached
    scored = list(corpus.sentences("test"))[: sentences or None]
    eos = corpus.vocab.eos_id
    # the importance-sampled passes the report still needs (an auto-encoder's report has none)
    need_bounds = report is None and not deterministic
    need_aggregate = aggregate and not deterministic and not same_proposal(report, neighbors)
    widened = {} if report is None else report.get("widened", {})
    missing = [] if deterministic else [floor for floor in floors or [] if f"{floor:g}" not in widened]
    # a floor that binds on no posterior leaves q as it is: its bound is the report's own, not computed again
    binding = [floor for floor in missing if proposal_floor_binds(model, scored, floor, eos, batch_size=BATCH)]
    passes, prior = None, None
    if need_bounds or need_aggregate or binding:
        if need_aggregate:
            from infolm.evaluation.aggregate_prior import aggregate_posterior

            prior = aggregate_posterior(model, list(corpus.sentences("train")), eos, components=aggregate_components)
        settings = {"samples": samples, "sentences": len(scored), "aggregate": need_aggregate, "floors": binding}
        if need_aggregate and neighbors[0] > 0:  # shards of another proposal do not merge into this one
            settings["neighbors"] = list(neighbors)
        chunk = max(1, min(samples, 10))
        if part is not None:
            batches = shard_batches(len(scored), BATCH, *part)
            sums = score_passes(model, scored, eos, samples, chunk, BATCH, batches, prior, binding, 0, *neighbors)
            write_json_atomic(part_path(saved, *part), {"settings": settings, "sums": sums.state()})
            print(f"{run.name}: shard {part[0]}/{part[1]} scored ({len(batches)} batches)", file=sys.stderr)
            return None
        passes = merged_shards(run, saved, settings)
        if passes is None:
            passes = score_passes(model, scored, eos, samples, chunk, BATCH, None, prior, binding, 0, *neighbors)
    elif part is not None:
        return None  # nothing left to score in shards
    if report is None:
        report = new_report(model, corpus, samples, sentences, deterministic, passes)
        write_json_atomic(saved, report)
    if "reconstruction_sampled" not in report:  # a report of greedy BLEU-1 alone: the paper's sampled one added
        from infolm.evaluation.latent_report import reconstruction_section

        bare = [s[:-1].tolist() if int(s[-1]) == eos else s.tolist() for s in scored]
        mode = report["reconstruction"]["mode"]
        report["reconstruction_sampled"] = reconstruction_section(model, bare, corpus.vocab.itos, mode, "sampled")
        write_json_atomic(saved, report)
    if need_aggregate and passes is not None and prior is not None:
        from infolm.evaluation.latent_report import aggregate_prior_section

        report["aggregate_prior"] = aggregate_prior_section(
            model,
            corpus,
            scored,
            "test",
            samples,
            0,
            BATCH,
            aggregate_components,
            prior=prior,
            bound=aggregate_section(passes, prior.components, *neighbors),
            neighbors=neighbors,
        )
        write_json_atomic(saved, report)
    if missing:
        widened = report.setdefault("widened", {})
        for floor in missing:
            if floor in binding and passes is not None:
                widened[f"{floor:g}"] = widened_section(passes, f"{floor:g}", widened_floor(model, floor))
                continue
            own = report["bounds"]
            bound = {  # the floor as widened_proposal_bound records it: never below q's own
                "floor": widened_floor(model, floor),
                "nll": own["nll"],
                "ppl": own["ppl"],
                "rate": own["rate"],
                "binds": False,
            }
            if own.get("nll_words") is not None:
                bound["nll_words"] = own["nll_words"]
            widened[f"{floor:g}"] = bound
        write_json_atomic(saved, report)
    return report


BATCH = 20  # sentences per batch of every pass over the test split
# the aggregated-prior bound's proposal: q(z|x) and D draws from each of the M nearest training posteriors,
# (M, D) chosen by a pilot on validation sentences (the SentenceMIM page's notes)
NEIGHBORS = (50, 2)


def part_path(saved: Path, part: int, parts: int) -> Path:
    """Where shard ``part`` of ``parts`` of a report's passes is kept, beside the report."""
    return saved.with_name(f"{saved.stem}.part-{part}-of-{parts}.json")


def merged_shards(run: Path, saved: Path, settings: dict[str, Any]) -> Any:
    """The passes of a complete set of shards scored with these settings after the run's last training,
    merged; None when there is no such set."""
    from infolm.evaluation.latent_passes import PassSums, merge_passes

    for path in sorted(run.glob(f"{saved.stem}.part-1-of-*.json")):
        parts = int(path.stem.rsplit("-of-", 1)[1])
        paths = [part_path(saved, part, parts) for part in range(1, parts + 1)]
        if not all(fresh(p, run) for p in paths):
            continue
        shards = [json.loads(p.read_text()) for p in paths]
        if any(shard["settings"] != settings for shard in shards):
            continue
        print(f"{run.name}: the passes of {parts} shards, merged", file=sys.stderr)
        return merge_passes([PassSums.from_state(shard["sums"]) for shard in shards])
    return None


def new_report(
    model: Any, corpus: Any, samples: int, sentences: int, deterministic: bool, passes: Any
) -> dict[str, Any]:
    from infolm.evaluation.latent_passes import bounds_section
    from infolm.evaluation.latent_report import latent_report

    return latent_report(
        model,
        corpus,
        "test",
        samples=samples,
        chunk=max(1, min(samples, 10)),
        batch_size=BATCH,
        max_sentences=sentences or None,
        mode="mean" if deterministic else "sample",
        melbo=True,
        deterministic=deterministic,
        decodings=("sampled", "greedy"),  # the paper's sampled words, and the greedy ones older records hold
        bounds=None if passes is None else bounds_section(passes),
    )


def same_proposal(report: dict[str, Any] | None, neighbors: tuple[int, int]) -> bool:
    """Whether ``report`` has the aggregated-prior bound with this proposal (``neighbors`` (M, D); a report
    scored before neighbour draws existed has q alone)."""
    section = None if report is None else report.get("aggregate_prior")
    if section is None:
        return False
    if int(section.get("neighbors", 0)) != neighbors[0]:
        return False
    return neighbors[0] == 0 or int(section.get("neighbor_draws", 0)) == neighbors[1]


def recorded(
    run: Path,
    saved: Path,
    floors: list[float] | None = None,
    aggregate: bool = False,
    neighbors: tuple[int, int] = (0, 1),
) -> dict[str, Any]:
    """A record's report for these settings, as it is (a record has no checkpoint to score again; one
    scored before sampled reconstructions or the aggregated-prior bound existed holds neither, one scored
    with another proposal for that bound holds its own, and the page shows the gap)."""
    if not saved.is_file():
        raise SystemExit(f"{run} is a record without {saved.name}: it has no checkpoint to score")
    report = dict(json.loads(saved.read_text()))
    missing = [floor for floor in floors or [] if f"{floor:g}" not in report.get("widened", {})]
    if missing and not report["bounds"].get("deterministic"):
        raise SystemExit(f"{run} is a record without the bounds of proposal floors {missing}")
    if aggregate and "aggregate_prior" not in report and not report["bounds"].get("deterministic"):
        gap = "a record scored before the aggregated-prior bound existed, read without it"
        print(f"{run.name}: {gap}", file=sys.stderr)
    elif aggregate and "aggregate_prior" in report and not same_proposal(report, neighbors):
        section = report["aggregate_prior"]
        held = f"{int(section.get('neighbors', 0))} neighbours x {int(section.get('neighbor_draws', 0))} draws"
        print(
            f"{run.name}: a record whose aggregated-prior bound has another proposal ({held}), read as it is",
            file=sys.stderr,
        )
    return report


def fresh(report: Path, run: Path) -> bool:
    """A cached report is used only if it is newer than the run's log (a run trained further since is
    scored again)."""
    log = run / "metrics.jsonl"
    return report.is_file() and (not log.is_file() or report.stat().st_mtime >= log.stat().st_mtime)


def lm_run_report(run: Path, sentences: int) -> dict[str, Any]:
    from infolm.build import build_task, load_run

    saved = report_path(run, sentences)
    if is_record(run):
        return recorded(run, saved)
    if fresh(saved, run):
        return dict(json.loads(saved.read_text()))
    config, corpus, model = load_run(run, "cpu", full_splits=True)
    offsets = corpus.sentence_offsets("test")
    if sentences and sentences < len(offsets):
        corpus = corpus.truncated("test", int(offsets[sentences]))
    metrics = build_task(config, corpus).evaluate(model, "test")
    report = {"split": "test", "sentences": int(metrics.values["sentences"]), "values": metrics.values}
    write_json_atomic(saved, report)
    return report


def finished(run: Path) -> bool:
    """The run ended by itself (``smim_ptb_cpu.sh`` writes ``train-summary.json`` then) or reached its
    step budget; a run still training is not evaluated."""
    from infolm.config import load_config

    if (run / "train-summary.json").is_file():
        return True
    config = load_config(run / "config.yaml")
    metrics = run / "metrics.jsonl"
    if config.train.max_steps is None or not metrics.exists():
        return False  # an epoch-limited run is finished only with its summary
    steps = [json.loads(line).get("step", 0) for line in metrics.read_text().splitlines() if line.strip()]
    return max(steps, default=0) >= config.train.max_steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", default="runs/smim-ptb-cpu")
    parser.add_argument("--seeds", default=None, help="comma-separated seeds (default: the protocol's)")
    parser.add_argument("--arms", nargs="*", default=None, help="arms to score (default: the protocol's)")
    parser.add_argument("--list-arms", action="store_true", help="print the protocol's arms and exit")
    parser.add_argument(
        "--list-runs",
        action="store_true",
        help="print the protocol's runs (ARM-sSEED) of --seeds (default: every seed), one a line, and exit",
    )
    parser.add_argument("--train-args", metavar="ARM", help="print the arm's config and overrides and exit")
    parser.add_argument("--samples", type=int, default=20, help="K of the IWAE bound")
    parser.add_argument("--sentences", type=int, default=1000, help="first N test sentences (0: all)")
    parser.add_argument(
        "--proposal-floors",
        type=float,
        nargs="*",
        default=[],
        help="also bound each latent model with its proposal's log-variance floor raised to these (e.g. -6 -4 -2)",
    )
    parser.add_argument(
        "--aggregate-prior",
        action="store_true",
        help="also bound each latent model under the aggregated posterior of the training split (Eq. 9)",
    )
    parser.add_argument(
        "--aggregate-components",
        type=int,
        default=0,
        help="components of that mixture: a seeded subsample of the training sentences (0: all of them)",
    )
    parser.add_argument(
        "--aggregate-neighbors",
        type=int,
        nargs=2,
        default=list(NEIGHBORS),
        metavar=("M", "D"),
        help="that bound's proposal: q(z|x) and D draws from each of the M training posteriors nearest its mean "
        f"(0 1: q alone; default {NEIGHBORS[0]} {NEIGHBORS[1]})",
    )
    parser.add_argument(
        "--part",
        default="",
        metavar="I/N",
        help="score shard I of N of each latent run's importance-sampled passes and keep its sums beside the "
        "report (N processes at once, one per core); a later call without --part merges them and scores the rest",
    )
    parser.add_argument("--records", default=str(RECORDS), help="a folder of archived runs read beside --runs")
    parser.add_argument("--archive", action="store_true", help="keep each run in --records as soon as it is scored")
    args = parser.parse_args()
    if args.aggregate_components < 0:
        raise SystemExit(f"--aggregate-components must be 0 (all) or positive, got {args.aggregate_components}")
    if args.aggregate_neighbors[0] < 0 or args.aggregate_neighbors[1] < 1:
        raise SystemExit(f"--aggregate-neighbors M D needs M >= 0 and D >= 1, got {args.aggregate_neighbors}")
    neighbors = (args.aggregate_neighbors[0], args.aggregate_neighbors[1])
    if args.samples < 1 or args.sentences < 0:
        raise SystemExit(f"--samples must be at least 1 and --sentences 0 or more: {args.samples}, {args.sentences}")
    part = None
    if args.part:
        index, _, count = args.part.partition("/")
        if not (index.isdigit() and count.isdigit() and 1 <= int(index) <= int(count)):
            raise SystemExit(f"--part must be I/N with 1 <= I <= N, got {args.part!r}")
        part = (int(index), int(count))
    if args.train_args:
        print(" ".join(train_args(args.train_args)))
        return
    arms, seeds = protocol_runs()
    if args.list_arms:
        print(" ".join(arms))
        return
    if args.list_runs:
        wanted = {int(s) for s in args.seeds.split(",")} if args.seeds else set(seeds)
        for arm, seed in protocol_pairs():
            if seed in wanted:
                print(f"{arm}-s{seed}")
        return
    pairs = set(protocol_pairs())
    seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else seeds
    root, records = Path(args.runs), Path(args.records)

    def keep(run: Path) -> None:
        """With ``--archive``, the run just scored is kept as a record at once (before the next is scored)."""
        if args.archive and not is_record(run):
            try:
                print(f"{run.name}: archived in {archive_run(run, records, meta=run_jobs(run))}", file=sys.stderr)
            except InfolmError as failure:
                raise SystemExit(str(failure)) from None

    ready, from_records = 0, 0
    for name in args.arms or arms:
        for seed in seeds:
            if not args.arms and (name, seed) not in pairs:
                continue  # an arm the protocol reads at other seeds only (the floor sensitivity's)
            run = locate(root, records, f"{name}-s{seed}")
            if run is None or not finished(run):
                print(f"{name}-s{seed}: {'not trained' if run is None else 'training'}, not scored")
                continue
            where = "record" if is_record(run) else "run"
            if part is not None:  # a shard of the passes: no report, no record yet
                if not is_lm(run):
                    floors, aggregate = args.proposal_floors, args.aggregate_prior
                    components = args.aggregate_components or None
                    latent_run_report(run, args.samples, args.sentences, floors, aggregate, components, part, neighbors)
                continue
            if is_lm(run):
                lm_run_report(run, args.sentences)
                saved = report_path(run, args.sentences)
            else:
                latent_run_report(
                    run,
                    args.samples,
                    args.sentences,
                    args.proposal_floors,
                    args.aggregate_prior,
                    args.aggregate_components or None,
                    neighbors=neighbors,
                )
                saved = report_path(run, args.sentences, args.samples)
            keep(run)
            ready += 1
            from_records += where == "record"
            print(f"{run.name}: {saved.name} ({where})")
    if part is not None:
        shard = f"{part[0]}/{part[1]}"
        print(f"shard {shard} of each run scored; once every shard is, the same line without --part merges them")
        return
    page = f"python -m experiments.report {PAPER}"
    print(f"{ready} runs with their reports ({from_records} of them records); the page: {page}")


def locate(root: Path, records: Path, name: str) -> Path | None:
    """The run ``name``: its run directory under ``root``, else its record, else None."""
    for folder in (root, records):
        if (folder / name / "config.yaml").is_file():
            return folder / name
    return None


if __name__ == "__main__":
    main()
