#!/usr/bin/env bash
# experiments/imm_ptb_table2_converged.py on one GPU machine (16 CPU cores): every arm and seed at
# once, one process per run at one CPU thread, all sharing the GPU, stopped at a deadline; archives
# the runs that ended and were scored into OUT_DIR/records (copy them into experiments/records/, then
# `python -m experiments.report imm`), packs the run directories without their checkpoints into
# OUT_DIR/imm-ptb-table2-converged.tar.gz, and each baseline's best weights (not for version control)
# into OUT_DIR/baseline-sSEED-best.tar.gz.
#   bash experiments/imm_ptb_table2_converged_gpu.sh OUT_DIR DEADLINE_S
set -uo pipefail
out=${1:?OUT_DIR}
deadline=${2:-540}
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 INFOLM_OFFLINE=1
runs=/tmp/imm-ptb-table2-converged
nvidia-smi -L
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"
python3 experiments/imm_ptb_table2_converged.py train --out "$runs" --seeds 0 1 2 --jobs 15 \
  --deadline-s "$deadline" --eval-reserve-s 110 2>&1 | tee "$out/driver.log"
python3 experiments/imm_ptb_table2_converged.py archive --out "$runs" --records "$out/records" --parked "$out/parked"
tar -C "$(dirname "$runs")" -czf "$out/imm-ptb-table2-converged.tar.gz" --exclude=checkpoints "$(basename "$runs")"
for seed in 0 1 2; do  # the baselines' best weights, so that the continuations can be rerun elsewhere
  [ -d "$runs/baseline-s$seed/checkpoints/best" ] && tar -C "$(dirname "$runs")" -czf "$out/baseline-s$seed-best.tar.gz" \
    "$(basename "$runs")/baseline-s$seed/checkpoints/best" "$(basename "$runs")/baseline-s$seed/vocab.json"
done
ls -la "$out"
