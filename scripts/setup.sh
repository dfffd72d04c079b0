#!/usr/bin/env bash
# Create .venv (if missing) and install psdsf-dist into it, with extras given as arguments
# (e.g. `scripts/setup.sh test`). Idempotent; safe to run on a fresh machine with Python 3.11.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip 2>/dev/null || true
extras=""
if [ "$#" -gt 0 ]; then extras="[$(IFS=,; echo "$*")]"; fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".${extras}" 2>&1 \
  | grep -v "^WARNING: Location" || true
.venv/bin/python -c "import psdsf_dist" >/dev/null
