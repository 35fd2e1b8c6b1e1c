#!/usr/bin/env bash
# One SentenceMIM run of experiments/protocols/smim.yaml, trained and scored on a 2-core machine in one go:
#   bash experiments/smim_run_and_score.sh ARM SEED      (e.g. smim 0, smim-floor-6 0, svae 1)
# trains runs/smim-ptb-cpu/ARM-sSEED with the protocol's config and overrides (TRAIN_THREADS threads, default 1;
# resumed when run again), scores its importance-sampled passes in two shards at once (one core each), merges them
# into the report with the other sections, archives the record (replacing an earlier record of the run) and
# rebuilds the page. Cost for sMIM on PTB: about 100 min of training (30 epochs, one core), and for the scoring,
# measured on 40 test sentences with three processes sharing two cores: 36 s for IWAE-500 with its own prior,
# 8 s more for the aggregated prior (42,068 components) from the same draws (with q alone; its proposal now adds
# 2 draws from each of 50 nearest training posteriors, 100 decodings per sentence more: about a fifth more), 29 s
# for the widened proposal, so about 115 core-minutes over the 3,761 test sentences under that load (less alone),
# about an hour with the two shards, plus a few minutes for MELBO, BLEU-1 and the entropy: about two hours a run with TRAIN_THREADS=2.
# Measured for smim-s0 (2-core AMD EPYC, one other process beside it): training 3.5 min per epoch on one
# thread, the two shards 50-55 min each, the merge with MELBO, BLEU-1 and the entropy 2 min.
set -euo pipefail
cd "$(dirname "$0")/.."
arm=${1:?usage: smim_run_and_score.sh ARM SEED}
seed=${2:?usage: smim_run_and_score.sh ARM SEED}
out=${OUT:-runs/smim-ptb-cpu}
run="$out/${arm}-s${seed}"
mkdir -p "$out"
if [[ ! -f "$run/train-summary.json" ]]; then
  read -r -a train <<< "$(python experiments/smim_ptb_table2.py --train-args "$arm")"
  OMP_NUM_THREADS=${TRAIN_THREADS:-1} python -m infolm train "${train[@]}" "run.dir=$run" "run.seed=$seed" --json > "$run.summary.tmp"
  mv "$run.summary.tmp" "$run/train-summary.json"
fi
score=(experiments/smim_ptb_table2.py --runs "$out" --arms "$arm" --seeds "$seed" --samples 500 --sentences 0
       --proposal-floors -4)
# the bound under the aggregated posterior of the training split is sMIM's model prior (Eq. 9); the page reads it
# for the A-MIM arms only (the sVAE's model prior is N(0, I)), so the other arms skip its cost (about a fifth)
[[ $arm == smim* ]] && score+=(--aggregate-prior)
OMP_NUM_THREADS=1 python "${score[@]}" --part 1/2 &
first=$!
OMP_NUM_THREADS=1 python "${score[@]}" --part 2/2
wait "$first"
OMP_NUM_THREADS=1 python "${score[@]}" --archive
python -m experiments.report smim
