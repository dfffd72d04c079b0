#!/usr/bin/env bash
# Set everything up and run the main job: the paper's 120-server cluster.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/psdsf-dist solve psdsf_dist/examples/paper_cluster.yaml "$@"
