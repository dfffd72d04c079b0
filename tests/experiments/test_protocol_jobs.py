"""protocol_jobs: a cell's figures are the library's run, and the report compares each run with
the exact solve of its skew."""

from __future__ import annotations

from pathlib import Path

import pytest

import experiments.studies.protocol_jobs as study
from psdsf_dist.jobs.allocated import PROTOCOL


def test_cells_run_the_protocol_against_the_exact_solve_and_imf(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch
                                                                 ) -> None:
    cells = [study.Cell(1.0, study.EXACT), study.Cell(1.0, "imf"),
             study.Cell(1.0, PROTOCOL, 1.0)]
    rows = [study.run_cell(40, c)[1] for c in cells]
    exact, imf, protocol = rows
    assert exact["rounds"] == imf["rounds"] == 0 and exact["certified_fraction"] == ""
    assert protocol["rounds"] > 0 and 0 < protocol["certified_fraction"] <= 1
    assert protocol["policy"] == "protocol T=1 s" and exact["policy"] == "PS-DSF exact"
    md = study.report(rows, 40, 0.1)
    line = next(ln for ln in md.splitlines() if "| protocol T=1 s |" in ln)
    ratio = protocol["mean_response_s"] / exact["mean_response_s"]
    assert f"| {ratio:.3f} |" in line
    assert "| PS-DSF exact | " in md and "| 1.000 | " in md
    monkeypatch.setattr(study, "RESULTS", tmp_path)
    monkeypatch.setattr(study, "ZIPFS", (1.0,))
    assert (tmp_path / study.plot(rows)).stat().st_size > 0
