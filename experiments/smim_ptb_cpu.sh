#!/usr/bin/env bash
# SentenceMIM Table 2 / 6 / 7 at a CPU scale, trained to a 30-epoch cap (sMIM still improves there): the arms that
# experiments/protocols/smim.yaml compares (sMIM, sVAE, sVAE + KL annealing, AE, a sentence LSTM LM and a
# sentence GRU LM, sMIM's decoder without z; configs/ptb/{smim,svae,ae,sentence-lstm,gru-lm}-cpu.yaml) on PTB,
# one after the other, for the seeds given (default: 0). A stopped run resumes when the script is run again; a
# finished one is skipped. Then
#   python experiments/smim_ptb_table2.py --seeds 0 --samples 500 --sentences 0 --proposal-floors -4 --aggregate-prior --archive
# scores and archives the runs, and `python -m experiments.report smim` rebuilds docs/reproductions/smim.md.
# The importance-sampled passes of a latent run (IWAE-500 with its own prior and the aggregated prior, and the
# widened proposal) take about 2 core-hours for sMIM on PTB's test split: the same line with --part 1/2 and with
# --part 2/2, run at once (one core each), scores them in halves; the line without --part then merges them.
# experiments/smim_run_and_score.sh ARM SEED does all of it for one run (train, two shards, merge, archive).
# The runs are the protocol's at the seeds given (an arm that only seed 0 reads, as the log-variance floors, is
# trained at seed 0 alone), each with the config and overrides the protocol gives it. ARMS="smim-z128 ae-z128 smim-z512 ae-z512"
# bash experiments/smim_ptb_cpu.sh 0 trains the larger latents of the paper's Table 7 instead (-zN: the arm's
# config with model.latent=N). OUT=DIR puts the runs
# there instead of runs/smim-ptb-cpu (then: smim_ptb_table2.py --runs DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
seeds=${*:-0}
out=${OUT:-runs/smim-ptb-cpu}
mkdir -p "$out"
if [[ -n ${ARMS:-} ]]; then  # these arms at every seed given
  names=$(for seed in $seeds; do for arm in $ARMS; do echo "${arm}-s${seed}"; done; done)
else  # the protocol's runs at the seeds given (an arm read at seed 0 alone, such as a floor, is trained there)
  names=$(python experiments/smim_ptb_table2.py --list-runs --seeds "$(echo $seeds | tr ' ' ,)")
fi
for name in $names; do
  arm=${name%-s*}
  seed=${name##*-s}
  run="${out}/${name}"
  [[ -f "$run/train-summary.json" ]] && continue
  # archived by `smim_ptb_table2.py --archive` (the run ended and was scored): done
  [[ -f "experiments/records/smim-ptb-cpu/${arm}-s${seed}/train-summary.json" ]] && continue
  # the arm's config and overrides, as experiments/protocols/smim.yaml declares them (BASE-zN: BASE's, latent N)
  read -r -a train <<< "$(python experiments/smim_ptb_table2.py --train-args "$arm")"
  # the summary is written only when training ends by itself (early stopping or the epoch limit)
  OMP_NUM_THREADS=1 python -m infolm train "${train[@]}" "run.dir=$run" "run.seed=${seed}" --json > "$run.summary.tmp"
  mv "$run.summary.tmp" "$run/train-summary.json"
done
