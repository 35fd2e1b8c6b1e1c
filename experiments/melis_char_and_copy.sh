#!/usr/bin/env bash
# Melis thesis tasks at CPU scale: character-level runs (bits per character) on ptb-char and Tiny Shakespeare, and
# the reverse copy task (an encoder-decoder, Sec. 2.3.3), each with an LSTM and a Mogrifier cell of equal parameter
# count, one seed.
#   bash experiments/melis_char_and_copy.sh char    # 4 runs, then valid / test bpc of each
#   bash experiments/melis_char_and_copy.sh copy    # writes the copy-task files, 2 runs, then valid / test nats per
#                                                   # copied symbol and greedy-copy accuracy
#   bash experiments/melis_char_and_copy.sh copy10  # the same with 10 symbols (configs/copy/*.yaml + data overrides)
# Every command's JSON result and wall time go to runs/melis-char-and-copy/<run>.<step>.json; rerunning skips what is
# done (training resumes from its last checkpoint).
set -euo pipefail
cd "$(dirname "$0")/.."
. .venv/bin/activate
export OMP_NUM_THREADS=1
OUT=runs/melis-char-and-copy
mkdir -p "$OUT"

step() {  # step NAME COMMAND...: run once, keep stdout's last line (JSON) and the wall time
  local name=$1
  shift
  if [[ -s "$OUT/$name.json" ]]; then
    echo "[skip] $name"
    return
  fi
  echo "[run ] $name: $*"
  local start end
  start=$(date +%s.%N)
  "$@" > "$OUT/$name.out"
  end=$(date +%s.%N)
  python - "$OUT/$name.out" "$start" "$end" "$*" > "$OUT/$name.json.tmp" <<'PY'
import json, sys
out, start, end, command = sys.argv[1:]
result = json.loads(open(out).read().strip().splitlines()[-1])
print(json.dumps({"command": command, "wall_s": float(end) - float(start), "result": result}))
PY
  mv "$OUT/$name.json.tmp" "$OUT/$name.json"
}

run_config() {  # run_config CONFIG RUN_NAME [OVERRIDE ...]
  local config=$1 name=$2
  shift 2
  step "$name.train" infolm train "$config" "run.dir=runs/melis-char-and-copy/$name" "$@" --json
  for split in valid test; do
    step "$name.$split" infolm evaluate "runs/melis-char-and-copy/$name" --split "$split" --json
  done
}

case "${1:-}" in
  char)
    for config in configs/char/{tinyshakespeare,ptb-char}-{lstm,mogrifier}.yaml; do
      run_config "$config" "$(basename "$config" .yaml)"
    done
    ;;
  copy)
    if [[ ! -s runs/data/reverse-copy-20/test.txt ]]; then
      python -m infolm.data.copy_task runs/data/reverse-copy-20 --length 20 --vocab-size 100 \
        --train 20000 --valid 1000 --test 1000
    fi
    for config in configs/copy/reverse-20-{lstm,mogrifier}.yaml; do
      run_config "$config" "$(basename "$config" .yaml)"
    done
    ;;
  copy10)
    data=runs/data/reverse-copy-10
    if [[ ! -s $data/test.txt ]]; then
      python -m infolm.data.copy_task $data --length 10 --vocab-size 100 --train 20000 --valid 1000 --test 1000
    fi
    for cell in lstm mogrifier; do
      run_config "configs/copy/reverse-20-$cell.yaml" "reverse-10-$cell" "data.train=$data/train.txt" \
        "data.valid=$data/valid.txt" "data.test=$data/test.txt"
    done
    ;;
  *)
    echo "usage: bash experiments/melis_char_and_copy.sh char|copy|copy10" >&2
    exit 2
    ;;
esac
