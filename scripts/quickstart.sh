#!/usr/bin/env bash
# Set everything up and run the main job: the paper's 120-server cluster on a local Ray, one
# actor per server, with its churn (user u4 away during (100, 250) s), showing the certificate
# re-converge after each event.
#
# --paced: time moves one period on as soon as every server has done its part, so the replay is
# as fast as the machine allows and its rounds do not depend on the machine's speed;
# --time-scale 0.6: the events come at rounds 60 and 150.  Gossip: 4 rounds per period, 2 peers
# each (what 120 servers need to converge; see experiments/results/ray.md).  Starting 120 actors
# takes 1-3 minutes on 2 cores; add --servers-per-actor 8 to start 15 processes instead.
# For a real-time run drop --paced (and --time-scale: event times then count in periods).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/psdsf-dist run psdsf_dist/examples/paper_cluster.yaml --paced --time-scale 0.6 --gossip-rate 4 --fanout 2 "$@"
