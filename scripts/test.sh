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
# one test process per core (INFOLM_TEST_WORKERS: a number, or 0 for one process), one thread each
OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" python -m pytest -n "${INFOLM_TEST_WORKERS:-auto}"
