"""Where the experiments read and write: every path of the experiments in one place."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
"""The repository."""
EXPERIMENTS = ROOT / "experiments"
RESULTS = EXPERIMENTS / "results"
"""Every experiment's output: tables (``.md``), data (``.csv``) and figures (``.png``)."""
REPORT = RESULTS / "REPORT.md"
"""The papers' evaluations reproduced (``python -m experiments report``)."""
REPORT_DIR = RESULTS / "report"
"""The report's figures and data, linked from :data:`REPORT` relative to it."""
README = EXPERIMENTS / "README.md"
EXAMPLES = ROOT / "psdsf_dist" / "examples"
CLUSTER_CONFIGS = ROOT / "cluster_configs"
SHARED = ROOT.parent / "shared"
"""The shared data beside the repository (the Google 2011 machines, the SWIM traces)."""
SWIM_FB2010 = SHARED / "data" / "swim" / "FB-2010_samples_24_times_1hr_0.tsv"
GOOGLE_MACHINES = SHARED / "data" / "google2011_machines.csv"
