"""SentenceMIM Tables 2, 6 and 7 at a CPU scale: evaluate the runs of experiments/smim_ptb_cpu.sh
and print the markdown table of docs/results.md (paper numbers beside ours).

    python experiments/smim_ptb_table2.py --runs runs/smim-ptb-cpu --seeds 0 --samples 20 --sentences 1000

For each seed, sMIM / sVAE / AE are scored on the first ``--sentences`` PTB test sentences (0: all
of them) with ``infolm.evaluation.latent_report`` (IWAE-K bound with the model's prior, KL, MI,
active units, BLEU-1 of greedy reconstructions, Kraskov entropy of the codes, and MELBO apart); the
sentence LSTM LM on the same sentences with its task's evaluation. Each run's report is saved as
``<run>/report-test-iwae<K>-<N>.json`` (``<run>/report-test-<N>.json`` for the LM; N is ``all`` for
the whole split) and reused only for the same K and N.

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

from infolm.errors import InfolmError
from infolm.report import format_mean_std as mean_std
from infolm.training.checkpoint import write_json_atomic
from infolm.training.records import archive_run, is_record

RECORDS = Path(__file__).resolve().parents[1] / "experiments" / "records" / "smim-ptb-cpu"

LATENT = {
    "smim": "sMIM (A-MIM)",
    "svae": "sVAE (ELBO)",
    "svae-kl": "sVAE + kl (linear annealing over 10k steps)",
    "ae": "AE",
    "smim-z128": "sMIM, latent 128",
    "ae-z128": "AE, latent 128",
    "smim-z512": "sMIM, latent 512",
    "ae-z512": "AE, latent 512",
}
LMS = {  # sentence LMs, scored exactly by their task
    "sentence-lstm": "sentence LSTM LM",
    "gru-lm": "sentence GRU LM (sMIM's decoder without z)",
}
PAPER = {  # Table 2 (PTB, latent 16), Table 6 (entropy, 16D) and Table 7 (BLEU-1, 16D)
    "smim": {"nll": "≤ 98.35 (MELBO)", "kl": "–", "bleu": "0.35", "entropy": "11.54"},
    "svae": {"nll": "≤ 106.84 (ELBO)", "kl": "1.6", "bleu": "0.124", "entropy": "–"},
    # no PTB "+ kl" row: "due to the small size of PTB, annealing produced over-fitting" (Sec. 4.3)
    "svae-kl": {"nll": "–", "kl": "–", "bleu": "–", "entropy": "–"},
    "ae": {"nll": "–", "kl": "–", "bleu": "0.348", "entropy": "35.95"},
    "sentence-lstm": {"nll": "–", "kl": "–", "bleu": "–", "entropy": "–"},
    "gru-lm": {"nll": "–", "kl": "–", "bleu": "–", "entropy": "–"},
    # Table 2 (MELBO NLL), Table 7 (BLEU-1) and Table 6 (entropy, 128D only) at latent 128 and 512
    "smim-z128": {"nll": "≤ 75.58 (MELBO)", "kl": "–", "bleu": "0.61", "entropy": "53.73"},
    "ae-z128": {"nll": "–", "kl": "–", "bleu": "0.589", "entropy": "259.34"},
    "smim-z512": {"nll": "≤ 67.46 (MELBO)", "kl": "–", "bleu": "0.679", "entropy": "–"},
    "ae-z512": {"nll": "–", "kl": "–", "bleu": "0.637", "entropy": "–"},
}


def report_path(run: Path, sentences: int, samples: int | None = None) -> Path:
    """Where a run's test report for these settings is kept (``samples``: None for the LM's exact score)."""
    scope = str(sentences) if sentences else "all"
    return run / (f"report-test-{scope}.json" if samples is None else f"report-test-iwae{samples}-{scope}.json")


def latent_run_report(run: Path, samples: int, sentences: int, floors: list[float] | None = None) -> dict[str, Any]:
    """The run's test report for these settings (cached), with the IWAE bound under each widened proposal
    of ``floors`` (log-variance floors; the model itself is unchanged) under ``widened``."""
    from infolm.build import load_run
    from infolm.objectives.base import deterministic_latent

    if is_record(run):
        return recorded(run, report_path(run, sentences, samples), floors)
    config, corpus, model = load_run(run, "cpu", full_splits=True)
    deterministic = deterministic_latent(config.objective)
    saved = report_path(run, sentences, samples)
    report: dict[str, Any] | None = None
    if fresh(saved, run):
        cached = dict(json.loads(saved.read_text()))
        current = "bleu1_authors" in cached.get("reconstruction", {})  # else: an older report's format
        if current and bool(cached["bounds"].get("deterministic")) == deterministic:
            report = cached
    if report is None:
        report = new_report(model, corpus, samples, sentences, deterministic)
        write_json_atomic(saved, report)
    widened = report.setdefault("widened", {})
    missing = [floor for floor in floors or [] if f"{floor:g}" not in widened]
    if missing and not deterministic:
        from infolm.evaluation.latent_report import proposal_floor_binds, widened_floor, widened_proposal_bound

        scored = list(corpus.sentences("test"))[: sentences or None]
        for floor in missing:
            if not proposal_floor_binds(model, scored, floor, corpus.vocab.eos_id, batch_size=20):
                # every posterior's log-variance is above the floor: the widened proposal is q itself, so the
                # bound is the report's own (the same estimator; the same number, as the draws and batches
                # are the report's), not computed a second time
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
            else:
                bound = widened_proposal_bound(
                    model, scored, floor, corpus.vocab.eos_id, samples, chunk=max(1, min(samples, 10)), batch_size=20
                )
            widened[f"{floor:g}"] = bound
        write_json_atomic(saved, report)
    return report


def new_report(model: Any, corpus: Any, samples: int, sentences: int, deterministic: bool) -> dict[str, Any]:
    from infolm.evaluation.latent_report import latent_report

    return latent_report(
        model,
        corpus,
        "test",
        samples=samples,
        chunk=max(1, min(samples, 10)),
        batch_size=20,
        max_sentences=sentences or None,
        mode="mean" if deterministic else "sample",
        melbo=True,
        deterministic=deterministic,
    )


def recorded(run: Path, saved: Path, floors: list[float] | None = None) -> dict[str, Any]:
    """A record's report for these settings, as it is (a record has no checkpoint to score again)."""
    if not saved.is_file():
        raise SystemExit(f"{run} is a record without {saved.name}: it has no checkpoint to score")
    report = dict(json.loads(saved.read_text()))
    missing = [floor for floor in floors or [] if f"{floor:g}" not in report.get("widened", {})]
    if missing and not report["bounds"].get("deterministic"):
        raise SystemExit(f"{run} is a record without the bounds of proposal floors {missing}")
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
    parser.add_argument("--seeds", default="0", help="comma-separated seeds")
    parser.add_argument("--samples", type=int, default=20, help="K of the IWAE bound")
    parser.add_argument("--sentences", type=int, default=1000, help="first N test sentences (0: all)")
    parser.add_argument(
        "--proposal-floors",
        type=float,
        nargs="*",
        default=[],
        help="also bound each latent model with its proposal's log-variance floor raised to these (e.g. -6 -4 -2)",
    )
    parser.add_argument("--records", default=str(RECORDS), help="a folder of archived runs read beside --runs")
    parser.add_argument("--archive", action="store_true", help="keep each run in --records as soon as it is scored")
    args = parser.parse_args()
    if args.samples < 1 or args.sentences < 0:
        raise SystemExit(f"--samples must be at least 1 and --sentences 0 or more: {args.samples}, {args.sentences}")
    seeds = [int(s) for s in args.seeds.split(",")]
    root, records = Path(args.runs), Path(args.records)
    rows = []

    def keep(run: Path) -> None:
        """With ``--archive``, the run just scored is kept as a record at once (before the next is scored)."""
        if args.archive and not is_record(run):
            try:
                print(f"{run.name}: archived in {archive_run(run, records)}", file=sys.stderr)
            except InfolmError as failure:
                raise SystemExit(str(failure)) from None

    for name, label in [*LATENT.items(), *LMS.items()]:
        runs = [found for seed in seeds if (found := locate(root, records, f"{name}-s{seed}")) is not None]
        runs = [run for run in runs if finished(run)]
        if not runs:
            continue
        keys = (
            "nll",
            "tightest",
            "words",
            "ppl",
            "kl",
            "mi",
            "au",
            "bleu",
            "bleu_authors",
            "ent",
            "melbo",
            "melbo_words",
        )
        cols: dict[str, list[float]] = {k: [] for k in keys}
        for run in runs:
            if name in LMS:
                values = lm_run_report(run, args.sentences)["values"]
                keep(run)
                cols["nll"].append(values["sentence_nll"])
                cols["tightest"].append(values["sentence_nll"])  # exact
                if "nll_without_eos" in values:  # per word: back to nats per sentence
                    words = values["tokens"] - values["sentences"]
                    cols["words"].append(values["nll_without_eos"] * words / values["sentences"])
                cols["ppl"].append(values["ppl"])
                continue
            report = latent_run_report(run, args.samples, args.sentences, args.proposal_floors)
            keep(run)
            bounds = report["bounds"]
            cols["au"].append(bounds["active_units"])
            cols["bleu"].append(report["reconstruction"]["bleu1"])
            cols["bleu_authors"].append(report["reconstruction"]["bleu1_authors"])
            if report["latent_entropy"]["entropy"] is not None:
                cols["ent"].append(report["latent_entropy"]["entropy"])
            if bounds.get("deterministic"):  # an auto-encoder: no bound, rate, MI or MELBO to report
                continue
            cols["nll"].append(bounds["nll"])
            widened = [report["widened"][f"{floor:g}"]["nll"] for floor in args.proposal_floors]
            cols["tightest"].append(min([bounds["nll"], *widened]))
            if bounds.get("nll_words") is not None:  # reports scored before the column have no such bound
                widened_words = [report["widened"][f"{floor:g}"].get("nll_words") for floor in args.proposal_floors]
                if all(value is not None for value in widened_words):
                    cols["words"].append(min([bounds["nll_words"], *widened_words]))
            cols["ppl"].append(bounds["ppl"])
            cols["kl"].append(bounds["rate"])
            cols["mi"].append(bounds["mutual_information"])
            cols["melbo"].append(report["melbo"]["nll"])
            if report["melbo"].get("nll_words") is not None:
                cols["melbo_words"].append(report["melbo"]["nll_words"])
        paper = PAPER[name]
        rows.append(
            f"| {label} | {len(runs)} | {mean_std(cols['nll'])} | {mean_std(cols['tightest'])} "
            f"| {counted(cols['words'], len(runs))} "
            f"| {mean_std(cols['ppl'])} | {mean_std(cols['kl'])} "
            f"| {mean_std(cols['mi'])} | {mean_std(cols['au'], 0)} | {mean_std(cols['bleu'], 3)} "
            f"| {mean_std(cols['bleu_authors'], 3)} "
            f"| {mean_std(cols['ent'])} "
            f"| {mean_std(cols['melbo'])} | {counted(cols['melbo_words'], len(runs))} "
            f"| {paper['nll']} | {paper['kl']} | {paper['bleu']} | {paper['entropy']} |"
        )
    print(
        f"| model | seeds | NLL (IWAE-{args.samples}, nats/sentence) "
        f"| NLL, the tightest with proposal floors {args.proposal_floors or '–'} too "
        "| the same without <eos> (the paper removes it, Sec. 4.3) "
        "| PPL (per token, <eos> counted) | KL | MI "
        "| active units | BLEU-1 | BLEU-1, the authors' scoring (sentence mean, <eos> kept) "
        "| latent entropy (N(0, I): 1.419 d; 22.70 at d = 16) "
        "| MELBO NLL (not a bound for new data) | MELBO without <eos> "
        "| paper NLL | paper KL | paper BLEU-1 | paper entropy |"
    )
    print("| --- " * 18 + "|")
    for row in rows:
        print(row)


def counted(values: list[float], runs: int) -> str:
    """A cell over the runs that have the value; the number of them when that is not every run."""
    cell = mean_std(values)
    return cell if len(values) in (0, runs) else f"{cell} ({len(values)} of {runs} runs)"


def locate(root: Path, records: Path, name: str) -> Path | None:
    """The run ``name``: its run directory under ``root``, else its record, else None."""
    for folder in (root, records):
        if (folder / name / "config.yaml").is_file():
            return folder / name
    return None


if __name__ == "__main__":
    main()
