"""Summarize experiments/imm_ptb_table2.sh: valid/test perplexity per config (mean ± std over seeds) and the
induced-bigram table, as Markdown."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

NAMES = {
    "imm-baseline": "baseline (MLE)",
    "imm-noising": "noising (KN bigram, γ0=0.2)",
    "imm": "IMM (λ=0.2, k=10, j=5)",
}


def main(out: Path) -> None:
    print("| config | seeds | valid ppl | test ppl | per seed (valid / test) |")
    print("| --- | --- | --- | --- | --- |")
    for name, label in NAMES.items():
        valid, test = [], []
        for seed in range(3):
            v, t = out / f"{name}-s{seed}.valid.json", out / f"{name}-s{seed}.test.json"
            if v.exists() and t.exists():
                valid.append(json.loads(v.read_text())["ppl"])
                test.append(json.loads(t.read_text())["ppl"])
        if not valid:
            continue

        def fmt(xs: list[float]) -> str:
            return f"{statistics.mean(xs):.1f} ± {statistics.stdev(xs):.1f}" if len(xs) > 1 else f"{xs[0]:.1f}"

        pairs = ", ".join(f"{a:.1f} / {b:.1f}" for a, b in zip(valid, test))
        print(f"| {label} | {len(valid)} | {fmt(valid)} | {fmt(test)} | {pairs} |")
    print()
    print("| config (seed 0) | induced bigram train | valid | test | KN bigram train | valid | test |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, label in NAMES.items():
        path = out / f"{name}-s0.induced.json"
        if not path.exists():
            continue
        induced = json.loads(path.read_text())["induced"]
        row = [f"{induced[s]['induced_ppl']:.1f}" for s in ("train", "valid", "test")]
        row += [f"{induced[s]['kn_ppl']:.2f}" for s in ("train", "valid", "test")]
        print(f"| {label} | " + " | ".join(row) + " |")
    walls = (
        [json.loads(line) for line in (out / "wall.jsonl").read_text().splitlines()]
        if (out / "wall.jsonl").exists()
        else []
    )
    if walls:
        print()
        print(
            "Wall time per run (train + valid/test evaluation): "
            + ", ".join(f"{w['run']} s{w['seed']} {w['wall_s']} s" for w in walls)
        )


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "runs/imm-ptb-table2"))
