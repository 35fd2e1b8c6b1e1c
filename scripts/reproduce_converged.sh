#!/usr/bin/env bash
# The runs of the comparisons at convergence (docs/reproductions/), on a 2-core CPU, as two lanes of one thread each:
#
#   nohup bash scripts/reproduce_converged.sh a > runs/lane-a.log 2>&1 &
#   nohup bash scripts/reproduce_converged.sh b > runs/lane-b.log 2>&1 &
#
# Lane a: the Melis thesis comparison (experiments/melis_ptb_word.py converged: LSTM and Mogrifier of
# seeds 0-2, then the tail-averaging LSTM of seeds 0-2; each run trained, tested, its extras run and
# archived), then the IMM Table 2 protocol: seed 2's baseline and its MLE and noising continuations, seed 0's IMM
# continuation, then the rest of seed 2's and seed 1's. Lane b: SentenceMIM Table 2 at the CPU scale seed by seed (the
# LSTM and GRU sentence LMs, sMIM, sVAE, AE and the KL-annealed sVAE; after each arm the seed is scored and what ended
# is archived), then seed 0's MLE and noising continuations, the IMM
# continuations of seeds 1 and 2, then the rest of seeds 0 and 1. The three Table 2 rows (MLE, noising, IMM) of every seed
# come first, the released recipe and its matched control after, then IMM on 8 positions with ∇IMM unclipped (the
# paper's clip shrinks the mean step of 8 positions to about a third of the default's); a seed's continuations
# start from their seed's baseline run (records keep no weights: a continuation whose baseline is only a record is
# skipped with a message; `train --retrain-baselines` trains that baseline again), and wait for a baseline that the other lane is training
# (a lane that comes to one not started yet skips them, and the next call of the lane runs them).
#
# Every step resumes a stopped run from its last checkpoint and skips what ended or is a record
# (experiments/records/), so the same two commands continue the work after any stop. On a new machine
# (runs/ is not carried over) an IMM run starts again unless it was parked before the stop: stop both lanes,
# then `python experiments/imm_ptb_table2_converged.py park` and copy experiments/parked/ to the next machine
# (git-ignored: it holds weights, which git history never keeps); the next call lays the parked runs out again and resumes them. A step that fails is reported on stderr and the
# lane goes on with the next.
set -uo pipefail
cd "$(dirname "$0")/.."
lane=${1:-}
if [[ $lane != a && $lane != b ]]; then
  echo "usage: bash scripts/reproduce_converged.sh a|b (the lane: a = Melis, then IMM seed 2 and half of seed 1; b = SentenceMIM, then IMM seed 0 and half of seed 1)" >&2
  exit 2
fi
[[ -x .venv/bin/python ]] || bash scripts/setup.sh dev
. .venv/bin/activate
export OMP_NUM_THREADS=1
mkdir -p runs

step() {  # one step of the lane: its command, its start and end on stderr; a failure does not stop the lane
  echo "[$(date -u +%FT%TZ)] start: $*" >&2
  "$@"
  local rc=$?
  echo "[$(date -u +%FT%TZ)] end (rc $rc): $*" >&2
  return 0
}

imm() {  # the IMM Table 2 protocol for one seed: baseline to early stopping, then the continuations given
  local seed=$1
  shift
  step python experiments/imm_ptb_table2_converged.py train --out runs/imm-ptb-table2-converged --seeds "$seed" \
    --arms "$@" --jobs 1
  step python experiments/imm_ptb_table2_converged.py archive --out runs/imm-ptb-table2-converged
}

if [[ $lane == a ]]; then
  for seed in 0 1 2; do
    step python experiments/melis_ptb_word.py converged --arms lstm mogrifier --seeds "$seed"
  done
  for seed in 0 1 2; do
    step python experiments/melis_ptb_word.py converged --arms lstm-tail --seeds "$seed"
  done
  imm 2 none noising
  imm 0 imm-positions-8
  imm 2 imm-released-positions-8 none-halve-reload
  imm 1 imm-released-positions-8
  imm 0 imm-positions-8-unclipped
  imm 2 imm-positions-8-unclipped
else
  for seed in 0 1 2; do
    for arm in sentence-lstm gru-lm smim svae ae svae-kl; do
      OUT=runs/smim-ptb-cpu ARMS=$arm step bash experiments/smim_ptb_cpu.sh "$seed"
      step python experiments/smim_ptb_table2.py --runs runs/smim-ptb-cpu --seeds "$seed" --samples 500 \
        --sentences 0 --proposal-floors -4 --archive
    done
  done
  imm 0 none noising
  imm 1 noising imm-positions-8
  imm 2 imm-positions-8
  imm 0 imm-released-positions-8 none-halve-reload
  imm 1 none-halve-reload
  imm 1 imm-positions-8-unclipped
fi
echo "[$(date -u +%FT%TZ)] lane $lane: every step has run" >&2
