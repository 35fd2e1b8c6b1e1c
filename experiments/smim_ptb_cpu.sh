#!/usr/bin/env bash
# SentenceMIM Table 2 / 6 / 7 at a CPU scale, trained to convergence: the arms that
# experiments/protocols/smim.yaml compares (sMIM, sVAE, sVAE + KL annealing, AE, a sentence LSTM LM and a
# sentence GRU LM, sMIM's decoder without z; configs/ptb/{smim,svae,ae,sentence-lstm,gru-lm}-cpu.yaml) on PTB,
# one after the other, for the seeds given (default: 0). A stopped run resumes when the script is run again; a
# finished one is skipped. Then
#   python experiments/smim_ptb_table2.py --seeds 0 --samples 500 --sentences 0 --proposal-floors -4 --archive
# scores and archives the runs, and `python -m experiments.report smim` rebuilds docs/reproductions/smim.md.
# ARMS="smim-z128 ae-z128 smim-z512 ae-z512" bash experiments/smim_ptb_cpu.sh 0 trains the larger latents of
# the paper's Table 7 instead (-zN: model.latent=N, everything else as the config). OUT=DIR puts the runs
# there instead of runs/smim-ptb-cpu (then: smim_ptb_table2.py --runs DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
seeds=${*:-0}
arms=${ARMS:-$(python experiments/smim_ptb_table2.py --list-arms)}
out=${OUT:-runs/smim-ptb-cpu}
mkdir -p "$out"
for seed in $seeds; do
  for arm in $arms; do
    run="${out}/${arm}-s${seed}"
    [[ -f "$run/train-summary.json" ]] && continue
    # archived by `smim_ptb_table2.py --archive` (the run ended and was scored): done
    [[ -f "experiments/records/smim-ptb-cpu/${arm}-s${seed}/train-summary.json" ]] && continue
    base=${arm%-kl}
    base=${base%-z*}
    config="configs/ptb/${base}-cpu.yaml"
    extra=()
    [[ $arm == *-z* ]] && extra=("model.latent=${arm##*-z}")
    # "+ kl": the KL weight "increased from 0 to 1 over 10k mini-batches" (Sec. 4.2): linear; until it reaches
    # 1 the validation loss (the β = 1 negative ELBO) neither decays the rate nor stops the run. The authors'
    # demo anneals logistically instead (objective.elbo.anneal=logistic: k = 0.0025, x0 = 10,000; 0.99 at 11,838)
    [[ $arm == svae-kl ]] && extra=("objective.elbo.anneal=linear" "objective.elbo.anneal_steps=10000" "train.patience_from_step=10000")
    # the summary is written only when training ends by itself (early stopping or the epoch limit)
    OMP_NUM_THREADS=1 python -m infolm train "$config" "run.dir=$run" "run.seed=${seed}" \
      ${extra[@]+"${extra[@]}"} --json > "$run.summary.tmp"
    mv "$run.summary.tmp" "$run/train-summary.json"
  done
done
