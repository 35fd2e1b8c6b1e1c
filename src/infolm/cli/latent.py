"""``infolm latent reconstruct|interpolate|sample|evaluate RUN``: a trained sentence latent-variable
model from the command line (SentenceMIM Sec. 4.7, App. D; the evaluation of Tables 2, 6, 7)."""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

from infolm.errors import InfolmError

MODES = ("mean", "sample", "perturb")


def add_latent_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("latent", help="reconstruct, interpolate, sample or evaluate a latent-variable run")
    sub = p.add_subparsers(dest="latent_command", required=True, parser_class=type(p))

    q = sub.add_parser("reconstruct", help="greedy reconstructions of sentences")
    q.add_argument("run_dir", help="a latent-variable run directory written by infolm train")
    q.add_argument("sentences", nargs="+", help="sentences (whitespace-tokenized, quoted)")
    q.add_argument(
        "--mode", choices=MODES, default=None, help="latent code: mean, sample (default) or perturb (10 sigma)"
    )
    q.add_argument("--seed", type=int, default=0, help="seed of the latent draws and sampling")
    q.add_argument("--json", action="store_true", help="print the results as JSON")
    q.set_defaults(func=cmd_reconstruct)

    q = sub.add_parser("interpolate", help="decode codes on the segment between two sentences' codes")
    q.add_argument("run_dir", help="a latent-variable run directory written by infolm train")
    q.add_argument("start", help="first sentence")
    q.add_argument("end", help="last sentence")
    q.add_argument("--steps", type=int, default=10, help="codes from start to end, both included")
    q.add_argument("--mode", choices=MODES, default=None, help="codes of the two sentences (default: sample)")
    # Sec. 4.7 writes x ~ p(x|z_alpha) without saying how words are picked; greedy is the default here, as
    # for reconstruct and sample
    q.add_argument("--sampled", action="store_true", help="sample every token (default: greedy)")
    q.add_argument("--seed", type=int, default=0, help="seed of the latent draws and sampling")
    q.add_argument("--json", action="store_true", help="print the results as JSON")
    q.set_defaults(func=cmd_interpolate)

    q = sub.add_parser("sample", help="sentences decoded from z ~ N(0, std^2 I)")
    q.add_argument("run_dir", help="a latent-variable run directory written by infolm train")
    q.add_argument("--count", type=int, default=5, help="sentences to sample")
    q.add_argument("--std", type=float, default=0.1, help="standard deviation of z (App. D.3: 0.1)")
    q.add_argument("--sampled", action="store_true", help="sample every token (default: greedy)")
    q.add_argument("--max-length", type=int, default=50, help="longest sentence in tokens")
    q.add_argument("--seed", type=int, default=0, help="seed of the latent draws and sampling")
    q.add_argument("--json", action="store_true", help="print the results as JSON")
    q.set_defaults(func=cmd_sample)

    q = sub.add_parser(
        "evaluate", help="IWAE-K NLL, KL, MI, active units, BLEU-1, latent entropy; MELBO, aggregated prior on request"
    )
    q.add_argument("run_dir", help="a latent-variable run directory written by infolm train")
    q.add_argument("--split", choices=("train", "valid", "test"), default="test", help="split to score")
    q.add_argument("--samples", type=int, default=500, help="K draws of the IWAE bound (valid 100, test 500)")
    q.add_argument("--chunk", type=int, default=50, help="draws per decoder pass (memory)")
    q.add_argument("--batch-size", type=int, default=20, help="sentences per batch")
    q.add_argument("--max-sentences", type=int, default=0, help="score only the first N sentences (0: all)")
    q.add_argument("--mode", choices=MODES, default=None, help="codes for BLEU and entropy (default: sample)")
    q.add_argument("--melbo", action="store_true", help="also MELBO (Eq. 16), printed apart with its caveat")
    q.add_argument(
        "--bleu-decoding",
        choices=("sampled", "greedy"),
        nargs="+",
        default=["sampled"],
        help="reconstructions for BLEU-1: every word sampled from p(x|z) (the paper's, default) and/or greedy",
    )
    q.add_argument(
        "--aggregate-prior",
        action="store_true",
        help="also the IWAE bound under the aggregated posterior of the training split (Eq. 9), for held-out splits",
    )
    q.add_argument(
        "--aggregate-components",
        type=int,
        default=0,
        help="mixture components of that prior: a seeded subsample of the training sentences (0: all)",
    )
    q.add_argument(
        "--aggregate-neighbors",
        type=int,
        nargs=2,
        default=[0, 1],
        metavar=("M", "D"),
        help="that bound's proposal adds D draws from each of the M training posteriors nearest q's mean "
        "(a valid, tighter bound of the same model when posteriors are sharp; 0 1: q alone)",
    )
    q.add_argument("--seed", type=int, default=0, help="seed of the latent draws and sampling")
    q.add_argument("--json", action="store_true", help="print the results as JSON")
    q.set_defaults(func=cmd_evaluate)


def _load(run_dir: str) -> tuple[Any, Any, Any]:
    from infolm.build import load_run
    from infolm.latent.base import LatentVariableModel

    config, corpus, model = load_run(run_dir, "cpu")
    if not isinstance(model, LatentVariableModel):
        raise InfolmError(f"{run_dir} holds a {config.model['name']} model, not a latent-variable model")
    return config, corpus, model


def _load_sentence_model(run_dir: str) -> tuple[Any, Any, Any]:
    """A run whose decoder writes sentences (reconstruct, interpolate and sample need one)."""
    config, corpus, model = _load(run_dir)
    if not hasattr(model, "eos_id"):
        raise InfolmError(f"{run_dir} holds a {config.model['name']} model, which decodes no sentences")
    return config, corpus, model


def _deterministic(config: Any) -> bool:
    """Whether the run's objectives make its codes deterministic (an auto-encoder)."""
    from infolm.objectives.base import deterministic_latent

    return deterministic_latent(config.objective)


def _mode(config: Any, requested: str | None) -> str:
    """A deterministic run (an auto-encoder) has only ``mean`` codes."""
    if _deterministic(config):
        if requested not in (None, "mean"):
            raise InfolmError(f"--mode {requested}: this run is a deterministic auto-encoder; its codes are means")
        return "mean"
    return requested or "sample"


def _shortened(text: str, limit: int = 60) -> str:
    """``text`` cut to about ``limit`` characters, for an error line."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text.split())} words)"


def _encode_sentence(corpus: Any, text: str, run_dir: str) -> list[int]:
    from infolm.data.vocab import UNK

    words = text.split()
    if not words:
        raise InfolmError("a sentence to encode is empty")
    vocab = corpus.vocab
    known = [w for w in words if w in vocab and w != UNK]
    if not known:
        raise InfolmError(f"sentence {_shortened(text)!r} has no word in the vocabulary of {run_dir}")
    if UNK not in vocab:
        missing = [w for w in words if w not in vocab]
        if missing:
            raise InfolmError(f"word {missing[0]!r} is not in the vocabulary of {run_dir} (which has no {UNK})")
    return vocab.encode(words, unk_ok=True)


def _words(corpus: Any, ids: list[int]) -> str:
    return " ".join(corpus.vocab.decode(ids))


def _emit(lines: list[str], key: str, as_json: bool) -> None:
    if as_json:
        print(json.dumps({key: lines}))
    else:
        print("\n".join(lines))


def _generator(seed: int) -> Any:
    import torch

    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


def cmd_reconstruct(args: argparse.Namespace) -> int:
    from infolm.evaluation.reconstruction import reconstruct

    config, corpus, model = _load_sentence_model(args.run_dir)
    mode = _mode(config, args.mode)
    ids = [_encode_sentence(corpus, s, args.run_dir) for s in args.sentences]
    out = reconstruct(model, ids, mode, max_length=2 * max(map(len, ids)) + 10, generator=_generator(args.seed))
    _emit([_words(corpus, s) for s in out], "reconstructions", args.json)
    return 0


def cmd_interpolate(args: argparse.Namespace) -> int:
    from infolm.evaluation.reconstruction import interpolate

    if args.steps < 2:
        raise InfolmError(f"--steps must be at least 2 (the two ends), got {args.steps}")
    config, corpus, model = _load_sentence_model(args.run_dir)
    mode = _mode(config, args.mode)
    start = _encode_sentence(corpus, args.start, args.run_dir)
    end = _encode_sentence(corpus, args.end, args.run_dir)
    limit = 2 * max(len(start), len(end)) + 10
    out = interpolate(model, start, end, args.steps, mode, limit, _generator(args.seed), greedy=not args.sampled)
    _emit([_words(corpus, s) for s in out], "interpolation", args.json)
    return 0


def cmd_sample(args: argparse.Namespace) -> int:
    from infolm.evaluation.reconstruction import sample_sentences

    if args.count < 1:
        raise InfolmError(f"--count must be positive, got {args.count}")
    if not (args.std > 0 and math.isfinite(args.std)):
        raise InfolmError(f"--std must be positive, got {args.std}")
    if args.max_length < 1:
        raise InfolmError(f"--max-length must be positive, got {args.max_length}")
    _, corpus, model = _load_sentence_model(args.run_dir)
    out = sample_sentences(model, args.count, args.std, not args.sampled, args.max_length, _generator(args.seed))
    _emit([_words(corpus, s) for s in out], "samples", args.json)
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    from infolm.evaluation.latent_report import latent_report

    if args.samples < 1:
        raise InfolmError(f"--samples (K) must be at least 1, got {args.samples}")
    for key in ("chunk", "batch_size"):
        if getattr(args, key) < 1:
            raise InfolmError(f"--{key.replace('_', '-')} must be positive, got {getattr(args, key)}")
    if args.aggregate_components < 0:
        raise InfolmError(f"--aggregate-components must be 0 (all) or positive, got {args.aggregate_components}")
    if args.aggregate_neighbors[0] < 0 or args.aggregate_neighbors[1] < 1:
        raise InfolmError(f"--aggregate-neighbors M D needs M >= 0 and D >= 1, got {args.aggregate_neighbors}")
    config, corpus, model = _load(args.run_dir)
    mode = _mode(config, args.mode)
    report = latent_report(
        model,
        corpus,
        args.split,
        samples=args.samples,
        chunk=args.chunk,
        batch_size=args.batch_size,
        max_sentences=args.max_sentences or None,
        mode=mode,
        melbo=args.melbo,
        seed=args.seed,
        deterministic=_deterministic(config),
        decodings=tuple(dict.fromkeys(args.bleu_decoding)),
        aggregate_prior=args.aggregate_prior,
        aggregate_components=args.aggregate_components or None,
        aggregate_neighbors=(args.aggregate_neighbors[0], args.aggregate_neighbors[1]),
    )
    if args.json:
        print(json.dumps(report))
    else:
        for section, values in report.items():
            if isinstance(values, dict):
                print(f"{section}:")
                for key, value in values.items():
                    print(f"  {key}: {value:.4f}" if isinstance(value, float) else f"  {key}: {value}")
            else:
                print(f"{section}: {values}")
    return 0
