#!/usr/bin/env bash
# IMM experiments: baseline / noising / IMM on the same model, 3 seeds, then the induced-bigram table.
# Usage: bash experiments/imm_ptb_table2.sh OUT_DIR   (runs one job at a time, one thread each)
set -euo pipefail
OUT="${1:-runs/imm-ptb-table2}"
export OMP_NUM_THREADS=1
mkdir -p "$OUT"
for seed in 0 1 2; do
  for name in imm-baseline imm-noising imm; do
    run="$OUT/$name-s$seed"
    start=$(date +%s)
    infolm train "configs/ptb/$name.yaml" "run.dir=$run" "run.seed=$seed" > "$run.train.log" 2>&1
    infolm evaluate "$run" --split valid --json > "$run.valid.json"
    infolm evaluate "$run" --split test --json > "$run.test.json"
    echo "{\"run\": \"$name\", \"seed\": $seed, \"wall_s\": $(( $(date +%s) - start ))}" >> "$OUT/wall.jsonl"
  done
done
for name in imm-baseline imm-noising imm; do
  infolm evaluate "$OUT/$name-s0" --split test --json --induced-ngram 2 --induced-max-train-tokens 200000 > "$OUT/$name-s0.induced.json"
done
