#!/usr/bin/env bash
# experiments/thesis_table5_1.py on one GPU machine: the 16-draw columns of Table 5.1 (too slow for a
# CPU: ~78 min per epoch on one core), every run at once sharing the GPU, one CPU thread each, stopped
# at a deadline (a cut run is marked so in the table); then the table (λ picked on validation, IWAE-100
# on valid and IWAE-500 on test) and the run directories without checkpoints in
# OUT_DIR/thesis-table5-1.tar.gz.
#   bash experiments/thesis_table5_1_gpu.sh OUT_DIR DEADLINE_S ["LAMS"] ["SEEDS"] ["ARMS"]
set -uo pipefail
out=${1:?OUT_DIR}
deadline=${2:-300}
lams=${3:-0.3}
seeds=${4:-0}
arms=${5:-dreg-16-kl dreg-16-renyi vimco-16-kl vimco-16-renyi}
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 INFOLM_OFFLINE=1
runs=/tmp/thesis-table5-1
mkdir -p "$out"
jobs=$(( $(wc -w <<< "$arms") * $(wc -w <<< "$lams") * $(wc -w <<< "$seeds") ))
nvidia-smi -L
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"
# shellcheck disable=SC2086  # the lists are word lists
python3 experiments/thesis_table5_1.py train --out "$runs" --arms $arms --lams $lams --seeds $seeds \
  --jobs "$jobs" --deadline-s "$deadline" --set run.device=cuda 2>&1 | tee "$out/driver.log"
python3 experiments/thesis_table5_1.py table --out "$runs" 2>&1 | tee "$out/table.md"
tar -C "$(dirname "$runs")" -czf "$out/thesis-table5-1.tar.gz" --exclude=checkpoints "$(basename "$runs")"
ls -la "$out"
