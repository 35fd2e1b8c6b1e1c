"""``infolm train|evaluate|generate|pilot|ngram|info``. Heavy imports happen inside the subcommands."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
from collections.abc import Iterator, Sequence
from typing import Any, NoReturn

from infolm.errors import InfolmError


class Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(2)


def _finite(value: Any) -> Any:
    """JSON has no Infinity/NaN: non-finite floats become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _positive_int(text: str, flag: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise InfolmError(f"{flag} takes positive integers separated by commas, got {text.strip()!r}")
    return value


def _print(payload: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(_finite(payload), allow_nan=False))
        return
    for key, value in payload.items():
        print(f"{key}: {value:.4f}" if isinstance(value, float) else f"{key}: {value}")


def cmd_train(args: argparse.Namespace) -> int:
    from infolm.build import train
    from infolm.config import load_config, merge_notes
    from infolm.training.distributed import world

    main_process = world()[0] == 0  # under torchrun, rank 0 speaks for the run
    overrides = list(args.overrides)
    config = load_config(args.config, overrides)
    if main_process:
        for note in merge_notes(args.config, overrides):
            sys.stderr.write(f"infolm: note: {note}\n")
    try:
        with _sigterm_as_interrupt():
            summary = train(config, overrides)
    except KeyboardInterrupt as interrupt:
        terminated = isinstance(interrupt, _Terminated) or isinstance(interrupt.__cause__, _Terminated)
        if main_process:
            _say_how_to_resume(args, config.run.dir, interrupt, "terminated (SIGTERM)" if terminated else "interrupted")
        return 143 if terminated else 130
    if main_process:
        _print(summary, args.json)
    return 0


class _Terminated(KeyboardInterrupt):
    """SIGTERM during ``infolm train`` (a scheduler's preemption, ``kill``): unwound as Ctrl-C is."""


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminate(signum: int, frame: Any) -> None:
        raise _Terminated()

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _say_how_to_resume(args: argparse.Namespace, run_dir: str, interrupt: BaseException, what: str) -> None:
    """After an interrupt: the step reached, the step of the newest checkpoint and the command that resumes."""
    import os
    import shlex
    from pathlib import Path

    from infolm.training import TrainingInterrupted
    from infolm.training.checkpoint import latest_checkpoint

    if not (Path(run_dir) / "config.yaml").is_file():  # stopped before the run directory was written
        sys.stderr.write(f"infolm: {what}\n")
        return
    where = f" at step {interrupt.step}" if isinstance(interrupt, TrainingInterrupted) else ""
    latest = latest_checkpoint(Path(run_dir))
    if latest is None:
        saved, verb = "no checkpoint was written yet, so the run starts over", "rerun"
    else:
        step = int(latest.name.removeprefix("step-"))
        saved, verb = f"the newest checkpoint is at step {step}", "resume"
    command = ["infolm", "train"]
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size > 1:
        per_node = os.environ.get("LOCAL_WORLD_SIZE", str(world_size))
        command = ["torchrun", f"--nproc_per_node={per_node}", "-m", "infolm", "train"]
    command += [args.config, *(o for o in args.overrides if not o.startswith("run.dir=")), f"run.dir={run_dir}"]
    if args.json:
        command.append("--json")
    sys.stderr.write(f"infolm: {what}{where}; {saved}\n")
    sys.stderr.write(f"infolm: {verb} with: {shlex.join(command)}\n")


def _seed_list(text: str) -> list[int]:
    try:
        seeds = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--seeds must be comma-separated integers, got {text!r}") from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise argparse.ArgumentTypeError(f"--seeds must name distinct seeds, got {text!r}")
    return seeds


def cmd_export(args: argparse.Namespace) -> int:
    import os
    from pathlib import Path

    from infolm import __version__
    from infolm.build import load_run_model
    from infolm.data.vocab import Vocab
    from infolm.data.wordpiece import WordPiece
    from infolm.model_card import model_card
    from infolm.models.bert_export import export_bert
    from infolm.models.encoder import Encoder

    if Path(args.out).resolve() == Path(args.run_dir).resolve():
        raise InfolmError(f"export writes a new directory; {args.out} is the run directory itself (give another)")
    run_dir = Path(args.run_dir)
    config, model, checkpoint = load_run_model(run_dir)  # the run directory alone: no data is read
    if not isinstance(model, Encoder):
        raise InfolmError(f"{args.run_dir} holds no BERT-style encoder (model.name=bert) to export")
    tokenizer_file = run_dir / "tokenizer.json"
    tokenizer = WordPiece.load(tokenizer_file) if tokenizer_file.is_file() else None
    out = export_bert(model, args.out, tokenizer=tokenizer)
    architecture = "BertForSequenceClassification" if model.classifier is not None else "BertForMaskedLM"
    parameters = sum(p.numel() for p in model.parameters())
    vocab_size = len(Vocab.load(run_dir / "vocab.json"))
    card = model_card(run_dir, config, parameters, vocab_size, checkpoint, architecture, __version__)
    card_tmp = out / ".README.md.tmp"
    card_tmp.write_text(card)
    os.replace(card_tmp, out / "README.md")
    _print({"exported": str(out), "architecture": architecture, "model_card": str(out / "README.md")}, args.json)
    return 0


def cmd_finetune(args: argparse.Namespace) -> int:
    from infolm.finetune import finetune

    summary = finetune(args.config, args.seeds, list(args.overrides), ("valid", "test"))
    for warning in summary["warnings"]:
        sys.stderr.write(f"infolm: warning: {warning}\n")
    _print({"run_dir": str(summary["run_dir"]), **summary["headline"]}, args.json)
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    import torch

    from infolm.build import build_task, load_run

    device = (
        "cuda"
        if args.device == "auto" and torch.cuda.is_available()
        else ("cpu" if args.device == "auto" else args.device)
    )
    for flag, value in (("--batch-size", args.batch_size), ("--bptt", args.bptt)):
        if value < 0:
            raise InfolmError(f"{flag} must be positive (0: the run's own), got {value}")
    # the whole split unless asked: data.max_eval_tokens is a training-time speed setting
    config, corpus, model = load_run(args.run_dir, device, full_splits=not args.as_trained)
    batch_size = config.data.eval_batch_size = args.batch_size or config.data.eval_batch_size
    bptt = config.data.bptt = args.bptt or config.data.bptt
    task = build_task(config, corpus)
    ngram = _interpolation_ngram(args, task, config, corpus) if args.interpolate else None
    if args.samples is not None:
        if args.samples < 1:
            raise InfolmError(f"--samples must be at least 1, got {args.samples}")
        if not hasattr(task.config, "test_samples"):
            raise InfolmError(
                f"--samples sets the IWAE draws of a latent-variable run; {args.run_dir} trains task "
                f"{config.task['name']}, which draws no latents"
            )
        task.config.valid_samples = task.config.test_samples = args.samples
    result: dict[str, Any] = {"split": args.split, **task.evaluate(model, args.split, device).report()}
    if args.as_trained:
        result.update(_evaluation_cut(config, corpus, args.split))
    stream_only = {
        "--induced-ngram": args.induced_ngram,
        "--tune-temperature": args.tune_temperature,
        "--mc-dropout": args.mc_dropout,
        "--dynamic": args.dynamic,
        "--reverse-ppl": args.reverse_ppl,
        "--mi-generated": args.mi_generated,
    }
    asked = [flag for flag, value in stream_only.items() if value]
    if asked and "stream" not in task.provides:
        raise InfolmError(
            f"{asked[0]} evaluates a language model of a running text; {args.run_dir} trains task "
            f"{config.task['name']}, whose rows are not a stream"
        )
    if args.induced_ngram:
        from infolm.evaluation.induced import induced_ngram_report

        options = {"max_train_tokens": args.induced_max_train_tokens} if args.induced_max_train_tokens else {}
        result["induced"] = induced_ngram_report(model, corpus, args.induced_ngram, **options)
    if args.tune_temperature:
        from infolm.evaluation.temperature import run_temperature

        result["temperature"] = run_temperature(model, corpus, batch_size, bptt, device)
    if args.mc_dropout:
        from infolm.evaluation.mc_dropout import MCDropoutConfig, MCDropoutGrid, run_mc_dropout

        mc = MCDropoutConfig(samples=args.mc_dropout, batch_size=batch_size, bptt=bptt, seed=args.seed)
        mc_grid = MCDropoutGrid(max_tokens=args.mc_tune_tokens or None)
        if args.mc_no_tuning:
            mc_grid = MCDropoutGrid((), ())
        result["mc_dropout"] = run_mc_dropout(model, corpus, mc, device, mc_grid)
    if args.dynamic:
        from infolm.evaluation.dynamic import DynamicEvalConfig, DynamicEvalGrid, run_dynamic_eval

        base = DynamicEvalConfig(ms_max_tokens=args.dynamic_ms_tokens or None, ms_batch_size=args.dynamic_ms_batch)
        steps = [_positive_int(v, "--dynamic-bptt") for v in args.dynamic_bptt.split(",") if v.strip()]
        grid = DynamicEvalGrid(max_tokens=args.dynamic_tune_tokens or None, bptt=steps)
        result["dynamic"] = run_dynamic_eval(model, corpus, base, grid, device)
    if args.reverse_ppl:
        from infolm.evaluation.reverse_ppl import ReversePPLConfig, reverse_perplexity

        config_rp = ReversePPLConfig(num_tokens=args.reverse_ppl, seed=args.seed)
        result["reverse_ppl"] = reverse_perplexity(model, corpus, config_rp, device=device)
    if args.mi_generated:
        import dataclasses

        from infolm.evaluation.mi import MIEstimatorConfig, estimate_segment_mi, generate_texts

        generator = torch.Generator(device=device).manual_seed(args.seed)
        layout = MIEstimatorConfig()
        eos = corpus.vocab.eos_id
        generated = generate_texts(model, args.mi_generated, eos, layout.seg_len, layout.gap, 64, generator, device)
        real = corpus.stream("train")[: args.mi_generated]
        result["mi"] = {
            "generated": dataclasses.asdict(estimate_segment_mi(generated, len(corpus.vocab))),
            "real": dataclasses.asdict(estimate_segment_mi(real, len(corpus.vocab))),
            "tokens": args.mi_generated,
        }
    if ngram is not None:
        from infolm.evaluation.interpolation import interpolate_with_ngram

        valid = task.token_scores(model, "valid", device)
        scored = valid if args.split == "valid" else task.token_scores(model, args.split, device)
        report = interpolate_with_ngram(ngram, valid, scored)
        result["interpolate"] = {"arpa": args.interpolate, "split": args.split, "tuned_on": "valid", **report}
    _print_evaluation(result, getattr(corpus, "level", "word"), args)
    return 0


def _interpolation_ngram(args: argparse.Namespace, task: Any, config: Any, corpus: Any) -> Any:
    """The ``--interpolate`` ARPA file read onto the run's vocabulary (before any scoring: a bad file fails
    fast), with a note on stderr naming the run words it lacks."""
    from infolm.ngram.remap import read_ngram_onto

    if not task.scores_tokens:
        raise InfolmError(
            f"--interpolate mixes a causal LM's next-token probabilities with an n-gram's; {args.run_dir} trains "
            f"task {config.task['name']}, which does not score a text token by token"
        )
    ngram = read_ngram_onto(args.interpolate, corpus.vocab)
    if ngram.missing:
        sys.stderr.write(
            f"infolm: note: --interpolate: {len(ngram.missing)} of the run's {len(corpus.vocab)} words are not in "
            f"the n-gram and are read as its <unk> (e.g. {ngram.missing[0]!r})\n"
        )
    return ngram


def _print_evaluation(result: dict[str, Any], level: str, args: argparse.Namespace) -> None:
    """The results; each extra evaluation's raw numbers end with its one-line before/after summary (in JSON,
    the lines are the ``summaries`` field)."""
    from infolm.cli.summaries import extra_summaries

    asked = {
        "induced": args.induced_ngram,
        "temperature": args.tune_temperature,
        "mc_dropout": args.mc_dropout,
        "dynamic": args.dynamic,
        "reverse_ppl": args.reverse_ppl,
        "mi": args.mi_generated,  # a latent run's own "mi" value is not the segment MI of generated text
        "interpolate": args.interpolate,
    }
    extras = {key: result[key] for key, flag in asked.items() if flag and key in result}
    summaries = extra_summaries(extras, level, args.induced_ngram)
    if args.json:
        _print({**result, "summaries": summaries} if summaries else result, True)
        return
    for key, value in result.items():
        _print({key: value}, False)
        if key in summaries:
            print(summaries[key])


def _evaluation_cut(config: Any, data: Any, split: str) -> dict[str, Any]:
    """How much of ``split`` an evaluation under the run's ``data.max_eval_tokens`` scored: the split's size
    and the size kept (tokens of a text corpus, else rows), and ``cut``; said on stderr when it is cut."""
    import dataclasses

    from infolm.build import task_data

    cap = config.data.max_eval_tokens
    if cap is None or split == "train":
        return {"cut": False}
    whole = task_data(dataclasses.replace(config, data=dataclasses.replace(config.data, max_eval_tokens=None)))

    def size(of: Any) -> tuple[str, int]:
        if hasattr(of, "stream"):  # a Corpus: tokens of the running text, <eos> included
            return "tokens", len(of.stream(split))
        return "rows", len(of.sentences[split])

    unit, kept = size(data)
    total = size(whole)[1]
    if kept < total:
        sys.stderr.write(
            f"infolm: warning: scored {kept} of the {total} {unit} of {split} (data.max_eval_tokens={cap}, "
            "--as-trained); without --as-trained the whole split is scored\n"
        )
    return {f"split_{unit}": total, f"kept_{unit}": kept, "max_eval_tokens": cap, "cut": kept < total}


def _check_generates(run_dir: str) -> None:
    """A run of a task that samples no text (masked-lm, classification) is refused before loading."""
    from pathlib import Path

    from infolm.config import load_config
    from infolm.tasks import TASKS

    saved = Path(run_dir) / "config.yaml"
    if not saved.is_file():
        return  # load_run names the problem

    def generates(task: str) -> bool:
        factory: Any = TASKS.get(task).factory  # a Task subclass
        return bool(factory.generates)

    name = load_config(saved).task["name"]
    if not generates(name):
        samplers = ", ".join(n for n in TASKS.names() if generates(n))
        raise InfolmError(f"{run_dir} trains task {name}, which samples no text; generate runs of {samplers}")


def cmd_generate(args: argparse.Namespace) -> int:
    import torch

    from infolm.build import build_task, load_run
    from infolm.data.vocab import EOS, UNK
    from infolm.evaluation.generation import SamplingSettings

    if args.max_tokens < 1:
        raise InfolmError(f"--max-tokens must be positive, got {args.max_tokens}")
    if not args.temperature >= 0:  # NaN too
        raise InfolmError(f"--temperature must be non-negative, got {args.temperature}")
    if not 0.0 < args.top_p <= 1.0:
        raise InfolmError(f"--top-p must be in (0, 1], got {args.top_p}")
    if args.samples < 1:
        raise InfolmError(f"--samples must be positive, got {args.samples}")
    _check_generates(args.run_dir)
    config, corpus, model = load_run(args.run_dir, "cpu")
    vocab = corpus.vocab
    char = corpus.level == "char"
    words = list(args.prompt) if char else args.prompt.split()
    unknown = [w for w in words if w not in vocab]
    if unknown and UNK not in vocab:
        raise InfolmError(f"prompt word {unknown[0]!r} is not in the vocabulary of {args.run_dir}")
    if unknown:
        listed = ", ".join(repr(w) for w in dict.fromkeys(unknown))
        sys.stderr.write(
            f"infolm: warning: prompt words not in the vocabulary of {args.run_dir}, read as {UNK}: {listed}\n"
        )
        words = [w if w in vocab else UNK for w in words]
    task = build_task(config, corpus)
    settings = SamplingSettings(args.max_tokens, args.temperature, args.top_k, args.top_p, args.samples)
    generator = torch.Generator().manual_seed(args.seed)
    torch.manual_seed(args.seed)
    sep = "" if char else " "
    for sequence in task.generate(model, vocab.encode(words), settings, generator):
        tokens = vocab.decode(sequence)
        if tokens and tokens[-1] == EOS:  # a whole sentence: its end is the end of the line
            tokens = tokens[:-1]
        text = sep.join(words + tokens)
        print(text.replace(f"{sep}{EOS}{sep}", "\n").replace(EOS, "\n").rstrip("\n"))
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    from infolm.data.datasets import DATASETS
    from infolm.models import MODELS
    from infolm.objectives import OBJECTIVES
    from infolm.tasks import TASKS

    sections = {
        "datasets": {name: spec.description for name, spec in sorted(DATASETS.items())},
        "tasks": {name: TASKS.get(name).doc for name in TASKS.names()},
        "models": {name: MODELS.get(name).doc for name in MODELS.names()},
        "objectives": {name: OBJECTIVES.get(name).doc for name in OBJECTIVES.names()},
    }
    try:
        from infolm.optim.averaging import AVERAGERS

        sections["averagers"] = {name: AVERAGERS.get(name).doc for name in AVERAGERS.names()}
    except ImportError:
        pass
    if args.json:
        print(json.dumps(sections))
        return 0
    for title, entries in sections.items():
        print(f"{title}:")
        for name, doc in entries.items():
            print(f"  {name:18s} {doc}")
    return 0


def _ngram_corpus(args: argparse.Namespace) -> Any:
    """The corpus of ``--data`` / ``--config``'s data section / ``data.*`` overrides, read as ``infolm train``
    reads it (same vocabulary, same ``<unk>`` rule), with the note on tokens read as ``<unk>``."""
    from infolm.config import DataConfig, build_dataclass, load_raw
    from infolm.data import load_corpus

    others = [item for item in args.overrides if not item.lstrip("~").startswith("data.")]
    if others:
        raise InfolmError(f"infolm ngram takes data.* settings only (as infolm train reads them), got {others[0]!r}")
    data = load_raw(args.config, args.overrides).get("data") or {}
    if not isinstance(data, dict):
        raise InfolmError(f"the data section must be a mapping, got {data!r}")
    if args.data is not None:
        if data.get("name", args.data) != args.data:
            raise InfolmError(f"--data {args.data} and data.name={data['name']} disagree; give one of them")
        data = {**data, "name": args.data}
    corpus = load_corpus(build_dataclass(DataConfig, data, "data"))
    note = corpus.unk_note()
    if note is not None:
        sys.stderr.write(f"infolm: note: data: {note}\n")
    return corpus


def cmd_ngram_build(args: argparse.Namespace) -> int:
    from infolm.ngram.cli import build_command

    if args.order < 1:
        raise InfolmError(f"--order must be positive, got {args.order}")
    result = build_command(_ngram_corpus(args), args.order, args.out, args.method)
    _print(result, args.json)
    return 0


def cmd_ngram_eval(args: argparse.Namespace) -> int:
    from infolm.ngram.cli import eval_command

    result = eval_command(args.arpa, _ngram_corpus(args), args.split)
    _print(result, args.json)
    return 0


def cmd_pareto(args: argparse.Namespace) -> int:
    from pathlib import Path

    from infolm.latent.pareto import collect, write

    labels = [k for k in args.label.split(",") if k]
    points = collect(args.run_dirs, args.nll_key, args.mi_key, labels, at=args.at, split=args.split)
    prefix = "train_" if args.split == "train" else ""
    write(points, Path(args.out), prefix + args.nll_key, prefix + args.mi_key, args.optimum)
    kept = sum(p.on_frontier for p in points)
    _print({"runs": len(points), "on_frontier": kept, "csv": f"{args.out}/pareto.csv"}, args.json)
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from infolm.report import expand_run_dirs, plot_curves, plot_warnings, report, table, to_csv, to_json

    run_dirs, notes = expand_run_dirs(args.run_dirs)
    for note in notes:
        sys.stderr.write(f"infolm report: {note}\n")
    runs, groups = report(run_dirs)
    if args.json:
        print(to_json(groups, runs))
    elif args.csv:
        print(to_csv(groups), end="")
    else:
        print(table(groups))
    if not args.no_plot:
        for warning in plot_warnings(runs):
            sys.stderr.write(f"infolm report: warning: {warning}\n")
        plot_curves(runs, args.plot)
        sys.stderr.write(f"infolm report: learning curves in {args.plot}\n")
    return 0


def make_parser() -> Parser:
    from infolm import __version__

    parser = Parser(prog="infolm", description="Train, regularize and evaluate language models.")
    parser.add_argument("--version", action="version", version=f"infolm {__version__}", help="print the version")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)

    p = sub.add_parser("train", help="train a model from a YAML config with key=value overrides")
    p.add_argument("config", help="YAML config file, e.g. configs/tiny.yaml")
    p.add_argument("overrides", nargs="*", help="dotted overrides, e.g. run.dir=runs/x optim.lr=10")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("export", help="write an encoder run as a Hugging Face transformers BERT directory")
    p.add_argument("run_dir", help="run directory of a model.name=bert run")
    p.add_argument("out", help="directory for config.json, model.safetensors, tokenizer.json and README.md")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("finetune", help="train one run per seed (run.dir/seed-N) and summarize mean ± std")
    p.add_argument("config", help="YAML config file, e.g. configs/cola/finetune-base.yaml")
    p.add_argument("overrides", nargs="*", help="dotted overrides, e.g. run.init_from=runs/pretrained")
    p.add_argument(
        "--seeds", type=_seed_list, default=[1, 2, 3, 4, 5], help="comma-separated run seeds (default: 1,2,3,4,5)"
    )
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=cmd_finetune)

    p = sub.add_parser("evaluate", help="the task's metrics of a trained run (perplexity, bits per character, ...)")
    p.add_argument("run_dir", help="a run directory written by infolm train")
    p.add_argument("--split", choices=("train", "valid", "test"), default="valid", help="split to score")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.add_argument("--batch-size", type=int, default=0, help="parallel streams (default: data.eval_batch_size)")
    p.add_argument("--bptt", type=int, default=0, help="window length (default: data.bptt)")
    p.add_argument(
        "--device", default="auto", choices=("auto", "cpu", "cuda"), help="where to run (auto: cuda if available)"
    )
    p.add_argument(
        "--induced-ngram", type=int, default=0, metavar="N", help="also report the induced N-gram perplexity"
    )
    p.add_argument(
        "--induced-max-train-tokens", type=int, default=0, help="extended contexts from this many train tokens"
    )
    p.add_argument(
        "--tune-temperature", action="store_true", help="softmax temperature tuned on valid, applied to test"
    )
    p.add_argument("--mc-dropout", type=int, default=0, metavar="N", help="also Monte Carlo dropout with N masks")
    p.add_argument("--mc-tune-tokens", type=int, default=0, help="MC dropout: valid tokens for tuning (0: all)")
    p.add_argument(
        "--mc-no-tuning", action="store_true", help="MC dropout without the tuned rate scale and temperature"
    )
    p.add_argument("--dynamic", action="store_true", help="also dynamic evaluation (tuned on valid)")
    p.add_argument("--dynamic-ms-tokens", type=int, default=0, help="train tokens for the MS statistics (0: all)")
    p.add_argument("--dynamic-tune-tokens", type=int, default=0, help="valid tokens for tuning (0: all)")
    p.add_argument("--dynamic-ms-batch", type=int, default=1024, help="rows per batch collecting MS (thesis: 1024)")
    p.add_argument(
        "--dynamic-bptt", default="5,10,20", help="max_time_steps candidates (thesis: up to 20 word, 50 char)"
    )
    p.add_argument("--reverse-ppl", type=int, default=0, metavar="N", help="reverse perplexity from N generated tokens")
    p.add_argument("--mi-generated", type=int, default=0, metavar="N", help="segment MI of N generated vs real tokens")
    p.add_argument(
        "--interpolate",
        default="",
        metavar="ARPA",
        help="also the model mixed with this n-gram (ARPA, e.g. from infolm ngram build), the weight tuned on valid",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of sampling-based evaluations")
    cut = p.add_mutually_exclusive_group()
    cut.add_argument(
        "--as-trained",
        action="store_true",
        help="score only the part of valid/test that data.max_eval_tokens kept in training, and report the cut",
    )
    cut.add_argument("--full-splits", action="store_true", help="score all of valid/test (the default)")
    p.add_argument(
        "--samples", type=int, default=None, metavar="K", help="latent runs: IWAE-K draws (default: the task's)"
    )
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser("generate", help="sample text from a trained run")
    p.add_argument("run_dir", help="a run directory written by infolm train")
    p.add_argument("--prompt", default="", help="text to continue (words outside the vocabulary read as <unk>)")
    p.add_argument("--max-tokens", type=int, default=50, help="tokens to sample")
    p.add_argument("--temperature", type=float, default=1.0, help="softmax temperature (0: greedy)")
    p.add_argument("--top-k", type=int, default=0, help="sample among the k most likely tokens (0: all)")
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling: smallest set with this mass")
    p.add_argument("--samples", type=int, default=1, help="sentences to sample (a sentence LM; a stream LM gives one)")
    p.add_argument("--seed", type=int, default=0, help="seed of the sampler")
    p.set_defaults(func=cmd_generate)

    p = sub.add_parser("report", help="final metrics of runs grouped by config (mean ± std over seeds), curves")
    p.add_argument(
        "run_dirs", nargs="+", help="run directories, or folders of runs (a finetune's seeds, a sweep's trials)"
    )
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print the groups (and their runs) as JSON")
    out.add_argument("--csv", action="store_true", help="print the groups as CSV (mean and std columns)")
    p.add_argument("--plot", default="learning-curves.png", help="PNG of the learning curves to write")
    p.add_argument("--no-plot", action="store_true", help="write no PNG")
    p.set_defaults(func=cmd_report)

    from infolm.sweep import add_sweep_parser

    add_sweep_parser(sub)

    p = sub.add_parser("pareto", help="NLL-vs-MI Pareto frontier of latent-variable runs (PNG and CSV)")
    p.add_argument("run_dirs", nargs="+", help="run directories, or sweep directories (their trial-* runs)")
    p.add_argument("--out", required=True, help="directory for pareto.csv and pareto.png")
    p.add_argument("--nll-key", default="loss", help="NLL field of the evaluation records (sentence-latent: per token)")
    p.add_argument(
        "--mi-key",
        default="mi",
        help="MI field of the evaluation records (sentence-latent: mi per sentence, mi_per_token per token)",
    )
    p.add_argument("--label", default="", help="comma-separated config keys that name a curve (default: objective)")
    p.add_argument(
        "--at",
        choices=("best", "last"),
        default="best",
        help="a run's point: its selected checkpoint's validation record (best) or its last evaluation (last)",
    )
    p.add_argument(
        "--split",
        choices=("valid", "train"),
        default="valid",
        help="valid, or train: the record's train_* estimates (sentence-latent: task.train_eval_sentences > 0)",
    )
    p.add_argument("--optimum", type=float, default=None, help="draw the optimal NLL (synthetic task: 9.2103)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=cmd_pareto)

    from infolm.cli.latent import add_latent_parser

    add_latent_parser(sub)

    from infolm.cli.pilot import add_pilot_parser

    add_pilot_parser(sub)

    p = sub.add_parser("info", help="datasets, tasks, models and objectives known to the registries")
    p.add_argument("--json", action="store_true", help="print the registries as JSON")
    p.set_defaults(func=cmd_info)

    p = sub.add_parser("ngram", help="count-based n-gram models (Kneser-Ney), ARPA files")
    ngram = p.add_subparsers(dest="ngram_command", required=True, parser_class=Parser)
    data_help = "data settings as infolm train reads them, e.g. data.name=path data.train=F data.valid=F data.test=F"
    q = ngram.add_parser("build", help="build an n-gram model and write it as ARPA")
    q.add_argument("overrides", nargs="*", help=data_help)
    q.add_argument("--data", default=None, help="dataset whose training split is counted (default: ptb)")
    q.add_argument("--config", default=None, help="a train config whose data section to read (same vocabulary)")
    q.add_argument("--order", type=int, default=2, help="n of the n-gram model")
    q.add_argument("--out", required=True, help="ARPA file to write")
    q.add_argument(
        "--method",
        default="modified-kn",
        choices=("modified-kn", "kn", "absolute"),
        help="smoothing: interpolated modified Kneser-Ney, Kneser-Ney, or absolute discounting",
    )
    q.add_argument("--json", action="store_true", help="print the summary as JSON")
    q.set_defaults(func=cmd_ngram_build)
    q = ngram.add_parser("eval", help="perplexity of an ARPA model on a split")
    q.add_argument("arpa", help="ARPA file (written by infolm ngram build, or KenLM)")
    q.add_argument("overrides", nargs="*", help=data_help)
    q.add_argument("--data", default=None, help="dataset to score (default: ptb)")
    q.add_argument("--config", default=None, help="a train config whose data section to read (same vocabulary)")
    q.add_argument("--split", choices=("train", "valid", "test"), default="valid", help="split to score")
    q.add_argument("--json", action="store_true", help="print the results as JSON")
    q.set_defaults(func=cmd_ngram_eval)
    return parser


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The arguments; a subcommand's ``key=value`` overrides may come before, between or after its
    options (``infolm finetune CONFIG --seeds 1,2,3 run.init_from=RUN``)."""
    parser = make_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        unknown = [item for item in extra if item.startswith("-")] if hasattr(args, "overrides") else extra
        if unknown:
            parser.error(f"unrecognized arguments: {' '.join(unknown)}")
        args.overrides = [*args.overrides, *extra]
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    try:
        result: int = args.func(args)
        return result
    except InfolmError as error:
        sys.stderr.write(f"infolm: error: {error}\n")
        return 2
    except OSError as error:
        where = f": {error.filename}" if getattr(error, "filename", None) else ""
        sys.stderr.write(f"infolm: error: {error.strerror or error}{where}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("infolm: interrupted\n")
        return 130
