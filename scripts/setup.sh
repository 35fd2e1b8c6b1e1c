#!/usr/bin/env bash
# Create .venv (if needed) and install infolm with the given extras. torch first: the CPU wheel on
# local disk (a plain `torch` requirement would pull a multi-GB CUDA build).
set -euo pipefail
cd "$(dirname "$0")/.."
EXTRAS="${1:-}"
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
. .venv/bin/activate
python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
python -c "import torch" 2>/dev/null || pip install -q torch==2.13.0
pip install -q -e ".${EXTRAS:+[$EXTRAS]}"
