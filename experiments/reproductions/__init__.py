"""Reproductions of the papers' evaluations, one section of ``experiments/results/REPORT.md``
each (``python -m experiments report`` writes them all)."""
