#!/usr/bin/env bash
# Set everything up and run the whole test suite plus ruff and mypy.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh test plots
echo "== ruff"; .venv/bin/ruff check psdsf_dist tests experiments
echo "== mypy"; .venv/bin/mypy
echo "== pytest"; .venv/bin/python -m pytest -q "$@"
