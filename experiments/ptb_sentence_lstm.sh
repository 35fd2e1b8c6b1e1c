#!/usr/bin/env bash
# The plain sentence-level LSTM LM on PTB (configs/ptb/sentence-lstm.yaml): the baseline of the
# sentence latent-variable models (Melis thesis Table 5.1, SentenceMIM). Trains to early stopping
# (rerunning the same command resumes a killed run where it stopped), then scores valid and test:
# per-token NLL and perplexity with <eos> counted, per-sentence NLL, and the numbers without <eos>.
#
#   OMP_NUM_THREADS=1 bash experiments/ptb_sentence_lstm.sh [RUN_DIR]
set -euo pipefail
run_dir=${1:-runs/ptb-sentence-lstm}
infolm train configs/ptb/sentence-lstm.yaml "run.dir=$run_dir" train.progress=false --json
for split in valid test; do
  infolm evaluate "$run_dir" --split "$split" --json | tee "$run_dir/eval-$split.json"
done
