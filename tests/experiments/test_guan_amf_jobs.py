"""guan_amf_jobs: each claim counted over the cells it covers, per run length."""

from __future__ import annotations

from typing import Any

import experiments.studies.guan_amf_jobs as study


def rows_where(jobs: int, better_std: bool, better_response: bool) -> dict[study.Key, Any]:
    """Runs in which every AMF policy (at one site) and every GAMF policy (at two) beats its
    reference in balance iff ``better_std`` and in response iff ``better_response``."""
    rows: dict[study.Key, Any] = {}
    for t in study.TRACES:
        for z in study.ZIPFS:
            for avail, policies, references in ((1, study.ONE_SITE, ("IMF",)),
                                                (2, study.TWO_SITES, ("AMF", "SIG-AMF"))):
                for p in policies:
                    ref = p.label in references
                    std = 10.0 if ref else (9.0 if better_std else 11.0)
                    resp = 5.0 if ref else (4.0 if better_response else 6.0)
                    rows[(jobs, t, z, avail, p.label)] = {
                        "mean_std": str(std), "mean_response_s": str(resp),
                        "competing_fraction": "0.9", "cpu_seconds": "1"}
    return rows


def test_claims_are_counted_per_cell_and_per_run_length() -> None:
    rows = rows_where(200, better_std=True, better_response=False)
    rows.update(rows_where(1000, better_std=False, better_response=True))
    assert study.holds(rows, 200) == [(c[0], n, 12) for c, n in zip(study.CLAIMS, (12, 0, 12, 0),
                                                                       strict=True)]
    assert [h[1] for h in study.holds(rows, 1000)] == [0, 12, 0, 12]
    del rows[(1000, study.TRACES[1], 2.0, 1, "IMF")]  # a missing reference drops its 2 cells
    assert [h[2] for h in study.holds(rows, 1000)] == [10, 10, 12, 12]
    md = study.report(rows, [200, 1000, 5000])
    line = next(ln for ln in md.splitlines() if ln.startswith("| AMF policies more balanced"))
    assert line.split("|")[2:4] == [" 12 of 12 ", " 0 of 10 "]
    assert "5,000 jobs" not in md  # a run length with no rows gets no column
