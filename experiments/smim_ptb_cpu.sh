#!/usr/bin/env bash
# SentenceMIM Table 2 / 7 at a CPU scale: sMIM, sVAE, AE and a sentence LSTM LM on PTB, trained one
# after the other (3,000 steps each), for the seeds given (default: 0). Then
#   python experiments/smim_ptb_table2.py --seeds 0
# evaluates the runs and prints the table of docs/results.md.
set -euo pipefail
cd "$(dirname "$0")/.."
seeds=${*:-0}
for seed in $seeds; do
  for name in smim svae ae sentence-lstm; do
    OMP_NUM_THREADS=1 python -m infolm train "configs/ptb/${name}-cpu.yaml" \
      "run.dir=runs/smim-ptb-cpu/${name}-s${seed}" "run.seed=${seed}"
  done
done
