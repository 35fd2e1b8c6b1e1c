#!/usr/bin/env bash
# Set up with the dev extras, then lint, type-check and run the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh dev
. .venv/bin/activate
export INFOLM_OFFLINE=1
ruff check src tests benchmarks examples experiments
ruff format --check src tests benchmarks examples experiments
mypy src experiments
OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" python -m pytest
