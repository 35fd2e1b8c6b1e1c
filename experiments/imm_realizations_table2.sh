#!/usr/bin/env bash
# IMM Table 2 at convergence, the faithful default against its approximations: Xie et al.'s 2x1500 LSTM
# (configs/ptb/imm-xie-table2.yaml) trained with
#   imm-every-position   the default: fresh samples through the current parameters at every position
#   imm-positions-8      8 positions drawn uniformly per batch (the same expected gradient, ~1.5x MLE on CPU)
#   imm-state-bank-32    the old state bank: banked (stale) states, 32 positions, a one-step gradient
#   imm-in-batch         the batch's own positions sharing a short context as the samples (~2x MLE on CPU)
#   none / noising       the paper's baselines (IMM weight 0; KN-bigram noising in place of MLE)
# then valid / test perplexity and the induced bigram (Table 1) of each. Needs a GPU: each run is days
# on a CPU. Usage: bash experiments/imm_realizations_table2.sh OUT_DIR [SEEDS...]
set -euo pipefail
OUT="${1:-runs/imm-realizations-table2}"
shift || true
SEEDS=("${@:-0}")
CONFIG=configs/ptb/imm-xie-table2.yaml
declare -A ARMS=(
  [imm-every-position]=""
  [imm-positions-8]="objective.imm.positions_per_batch=8 objective.imm.sample_chunk=10"
  [imm-state-bank-32]="objective.imm.realization=state-bank objective.imm.positions_per_batch=32 objective.imm.sample_chunk=10"
  [imm-in-batch]="objective.imm.realization=in-batch"
  [none]="objective.imm.weight=0"
  # the config's terms removed (an override merges into the objective section), noising alone
  [noising]="~objective.mle ~objective.imm objective.noising.gamma0=0.2 objective.noising.mode=bigram-kn"
)
mkdir -p "$OUT"
for seed in "${SEEDS[@]}"; do
  for arm in imm-every-position imm-positions-8 imm-state-bank-32 imm-in-batch none noising; do
    run="$OUT/$arm-s$seed"
    start=$(date +%s)
    # shellcheck disable=SC2086  # the overrides are separate words (none contains a space)
    infolm train "$CONFIG" "run.dir=$run" "run.seed=$seed" ${ARMS[$arm]} > "$run.train.log" 2>&1
    infolm evaluate "$run" --split valid --json > "$run.valid.json"
    infolm evaluate "$run" --split test --json --induced-ngram 2 > "$run.test.json"
    echo "{\"run\": \"$arm\", \"seed\": $seed, \"wall_s\": $(( $(date +%s) - start ))}" >> "$OUT/wall.jsonl"
  done
done
