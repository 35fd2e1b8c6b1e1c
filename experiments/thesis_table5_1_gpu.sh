#!/usr/bin/env bash
# experiments/thesis_table5_1.py on one GPU machine: the 16-draw columns of Table 5.1 (too slow for a
# CPU: ~78 min per epoch on one core), every run at once sharing the GPU, one CPU thread each, stopped
# at a deadline (a cut run is marked so in the table); then the table (λ picked on validation, IWAE-100
# on valid and IWAE-500 on test), given at most SCORE_S seconds.
#   bash experiments/thesis_table5_1_gpu.sh OUT_DIR DEADLINE_S ["LAMS"] ["SEEDS"] ["ARMS"]
# What it leaves in OUT_DIR, written before the scoring starts and again after it (so that a scoring
# cut short loses nothing of the training):
#   thesis-table5-1.tar.gz   the run directories without their step checkpoints or weights (configs,
#                            logs, the best checkpoint's metadata, the cached scores)
#   <run>.best.safetensors.gz  each run's best weights, to score elsewhere: unpack into
#                            <run>/checkpoints/best/model.safetensors
#   driver.log, table.md, gpu.csv (GPU load every 15 s)
# Four runs leave eight files, the most a lease returns: write nothing else under OUT_DIR.
# The GPU image has no omegaconf or platformdirs: carry their wheels and put them on PYTHONPATH first.
# On an H200 the four runs at once kept the GPU 99% busy, about 52 s per epoch each.
# DEVICE (default cuda), SCORE_S (default 120) and EXTRA (more overrides for every run, a word list) come
# from the environment.
set -uo pipefail
out=${1:?OUT_DIR}
deadline=${2:-300}
lams=${3:-0.3}
seeds=${4:-0}
arms=${5:-dreg-16-kl dreg-16-renyi vimco-16-kl vimco-16-renyi}
device=${DEVICE:-cuda}
score_s=${SCORE_S:-120}
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 INFOLM_OFFLINE=1
runs=${RUNS_DIR:-/tmp/thesis-table5-1}
mkdir -p "$out" "$runs"
jobs=$(( $(wc -w <<< "$arms") * $(wc -w <<< "$lams") * $(wc -w <<< "$seeds") ))
python=$(command -v python3 || command -v python)
if [ "$device" = cuda ]; then
  nvidia-smi -L
  nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv -l 15 > "$out/gpu.csv" &
fi
"$python" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"

pack() {  # the run directories (no weights) and each run's best weights, into OUT_DIR
  tar -C "$(dirname "$runs")" -czf "$out/thesis-table5-1.tar.gz" --exclude='step-*' \
    --exclude=model.safetensors "$(basename "$runs")"
  for run in "$runs"/*/; do
    best=$run/checkpoints/best/model.safetensors
    [ -f "$best" ] && gzip -c "$best" > "$out/$(basename "$run").best.safetensors.gz"
  done
}

# shellcheck disable=SC2086  # the lists are word lists
"$python" experiments/thesis_table5_1.py train --out "$runs" --arms $arms --lams $lams --seeds $seeds \
  --jobs "$jobs" --deadline-s "$deadline" --set run.device="$device" ${EXTRA:-} 2>&1 | tee "$out/driver.log"
pack
timeout "$score_s" "$python" experiments/thesis_table5_1.py table --out "$runs" --jobs "$jobs" 2>&1 | tee "$out/table.md"
pack
kill %1 2>/dev/null
ls -la "$out"
