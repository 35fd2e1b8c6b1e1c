"""Pretraining speed and peak memory of infolm's BERT-style encoder against ``transformers.BertForMaskedLM``.

    python benchmarks/encoder_throughput.py --dim 256 --layers 4 --heads 4 --batch 16 --seq 128 --steps 20 --json

Both models have the same size (``export_bert`` copies infolm's initial weights into the Hugging
Face model, so they compute the same function), read the same masked batches (15% token masking,
80/10/10) and take Adam steps on the MLM cross-entropy. Each runs in its own subprocess so that peak
memory is its own: on CUDA ``torch.cuda.max_memory_allocated``, on CPU the process's peak resident
set (``ru_maxrss``) minus the resident set before the model was built. Reports tokens/s (input
positions, padding included, per second of optimizer steps after ``--warmup`` untimed steps) for

* ``infolm``: MLM logits at the masked positions only (what ``objective.mlm`` does);
* ``infolm_all_positions``: logits at every position, then the loss at the masked ones (what
  ``BertForMaskedLM`` does) — the same work as the reference, to compare the encoders alone;
* ``transformers``: ``BertForMaskedLM(input_ids, attention_mask, labels=...)`` (SDPA attention).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from infolm.data.masking import mask_batch
from infolm.models.bert_export import export_bert
from infolm.models.encoder import Encoder, EncoderConfig

VARIANTS = ("infolm", "infolm_all_positions", "transformers")


def batches(args: argparse.Namespace, count: int) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Masked batches [CLS] random subwords [SEP] [PAD]... with lengths from seq/2 to seq."""
    rng = np.random.default_rng(0)
    out = []
    for _ in range(count):
        lengths = rng.integers(args.seq // 2, args.seq + 1, size=args.batch)
        real = torch.from_numpy(np.arange(args.seq)[None, :] < lengths[:, None])
        tokens = torch.from_numpy(rng.integers(5, args.vocab, size=(args.batch, args.seq))).masked_fill(~real, 0)
        tokens[:, 0] = 2
        tokens[torch.arange(args.batch), torch.from_numpy(lengths - 1)] = 3
        maskable = real & (tokens != 2) & (tokens != 3)
        masked = mask_batch(tokens, maskable, maskable, "token", 4, args.vocab, rng)
        out.append((masked.inputs, masked.targets, real))
    return out


def run_variant(args: argparse.Namespace) -> dict[str, Any]:
    device = torch.device(args.device)
    if args.variant == "transformers":
        from transformers import BertForMaskedLM  # imported before the memory baseline: its modules are not the model's
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    torch.manual_seed(0)
    config = EncoderConfig(dim=args.dim, layers=args.layers, heads=args.heads, ff_dim=4 * args.dim, max_len=args.seq)
    encoder = Encoder(config, args.vocab)
    if args.variant == "transformers":
        with tempfile.TemporaryDirectory() as directory:
            export_bert(encoder, directory)
            model: torch.nn.Module = BertForMaskedLM.from_pretrained(directory, attn_implementation="sdpa")
    else:
        model = encoder
    model.to(device).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    data = [tuple(t.to(device) for t in b) for b in batches(args, 4)]
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)

    def step(inputs: torch.Tensor, targets: torch.Tensor, real: torch.Tensor) -> float:
        optimizer.zero_grad(set_to_none=True)
        if args.variant == "transformers":
            loss = model(input_ids=inputs, attention_mask=real.long(), labels=targets).loss
        elif args.variant == "infolm":
            masked = targets != -100
            states = encoder(inputs, padding_mask=real).states[masked]
            loss = F.cross_entropy(encoder.mlm_logits(encoder.mlm_features(states)), targets[masked])
        else:
            logits = encoder.mlm_logits(encoder.mlm_features(encoder(inputs, padding_mask=real).states))
            loss = F.cross_entropy(logits.reshape(-1, args.vocab), targets.reshape(-1), ignore_index=-100)
        loss.backward()
        optimizer.step()
        return float(loss.detach())

    for i in range(args.warmup):
        step(*data[i % len(data)])
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for i in range(args.steps):
        step(*data[i % len(data)])
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    if device.type == "cuda":
        peak_mb = torch.cuda.max_memory_allocated(device) / 2**20
    else:
        peak_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024  # ru_maxrss: KiB
    return {
        "variant": args.variant,
        "tokens_per_s": args.steps * args.batch * args.seq / seconds,
        "peak_mb": peak_mb,
        "parameters": sum(p.numel() for p in model.parameters()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--variant", choices=VARIANTS, help="run one variant in this process (internal)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.variant:
        print(json.dumps(run_variant(args)))
        return
    results: dict[str, Any] = {"device": args.device, "torch": torch.__version__, "threads": torch.get_num_threads()}
    passed = [a for a in sys.argv[1:] if a != "--json"]
    for variant in VARIANTS:
        out = subprocess.run(
            [sys.executable, __file__, *passed, "--variant", variant], capture_output=True, text=True, check=True
        )
        results[variant] = json.loads(out.stdout.strip().splitlines()[-1])
    reference = results["transformers"]["tokens_per_s"]
    results["infolm_vs_transformers"] = results["infolm"]["tokens_per_s"] / reference
    results["infolm_all_positions_vs_transformers"] = results["infolm_all_positions"]["tokens_per_s"] / reference
    if args.json:
        print(json.dumps(results, indent=1))
    else:
        for variant in VARIANTS:
            r = results[variant]
            print(f"{variant:>22}: {r['tokens_per_s']:10.0f} tokens/s  peak {r['peak_mb']:8.1f} MB")
        print(
            f"speed-up vs transformers: {results['infolm_vs_transformers']:.2f}x "
            f"(all positions: {results['infolm_all_positions_vs_transformers']:.2f}x)"
        )


if __name__ == "__main__":
    main()
