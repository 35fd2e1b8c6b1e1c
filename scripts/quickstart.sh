#!/usr/bin/env bash
# Set up, then train a small PTB LSTM (one epoch), evaluate it on test and generate a few lines.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
RUN="${RUN_DIR:-runs/quickstart}"
infolm train configs/ptb/quickstart.yaml "run.dir=$RUN" "$@"
infolm evaluate "$RUN" --split test
for prompt in "the company" "in new york" "the market"; do
  infolm generate "$RUN" --prompt "$prompt" --max-tokens 20 --top-p 0.9 --seed 1
done
