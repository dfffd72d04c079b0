#!/usr/bin/env bash
# Set everything up and run the whole test suite plus ruff and mypy.
# `scripts/test.sh --quick` leaves out the test modules that use Ray (a few minutes, for working);
# other arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
select=()
if [ "${1:-}" = "--quick" ]; then shift; select=(-m "not ray"); fi
scripts/setup.sh test plots
echo "== ruff"; .venv/bin/ruff check psdsf_dist tests experiments
echo "== mypy"; .venv/bin/mypy
# Debian's prometheus for tests/test_metrics_prometheus.py; the tests start their own server on
# free loopback ports, so a packaged service (started where there is an init system) is stopped
# only so that it does not scrape or listen needlessly.
if [ ! -x /usr/bin/prometheus ]; then
  echo "== installing prometheus"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    prometheus >/dev/null
  $SUDO service prometheus stop >/dev/null 2>&1 || true
fi
# Two workers (pytest-xdist): the tests of modules that use Ray stay together in one of them, in
# order, on one Ray session (tests/conftest.py); the other runs the rest.
echo "== pytest"; .venv/bin/python -m pytest -q -n 2 --dist loadgroup "${select[@]}" "$@"
