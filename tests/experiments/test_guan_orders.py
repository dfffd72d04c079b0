"""guan_orders: the sign test, the seeds argument and the verdicts of its report."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

import experiments.studies.guan_orders as guan_orders


def test_sign_test_is_the_exact_two_sided_binomial() -> None:
    assert guan_orders.sign_test(8, 8) == 2 / 256
    assert guan_orders.sign_test(0, 8) == 2 / 256
    assert math.isclose(guan_orders.sign_test(7, 8), 2 * 9 / 256)
    assert guan_orders.sign_test(4, 8) == 1.0


def test_seeds_argument_takes_ranges_and_lists() -> None:
    assert guan_orders.seeds_arg("2-5") == [2, 3, 4, 5]
    assert guan_orders.seeds_arg("2,7-8") == [2, 7, 8]


def test_report_calls_a_pair_supported_reversed_or_undecided() -> None:
    means = {"ata": 10.0, "ata-greedy": 10.0, "scta": 12.0, "btaaj": 11.0}
    rows = {}
    for s in range(8):
        for q in guan_orders.PROPOSED:
            # BTAWJ wins over SCTA in odd seeds only: a coin toss
            v = means.get(q, 13.0 if s % 2 else 11.5)
            rows[(0.6, 1.0, s, q)] = {"utilisation": "0.6", "zipf": "1", "seed": str(s),
                                      "scheduler": q,
                                 "mean_response_s": repr(v), "cpu_seconds": "1.0"}
    md = guan_orders.report(rows, [1.0], None)
    lines = {ln.split("|")[3].strip(): ln for ln in md.splitlines()
             if ln.startswith("| 60 % | 1 |") and "<" in ln}
    assert "8 of 8" in lines["ATA <= ATA-Greedy"] and "supported" in lines["ATA <= ATA-Greedy"]
    assert "8 of 8" in lines["ATA-Greedy < SCTA"]
    assert "0 of 8" in lines["SCTA < BTAAJ"] and "reversed" in lines["SCTA < BTAAJ"]
    assert "4 of 8" in lines["SCTA < BTAWJ"] and "cannot tell" in lines["SCTA < BTAWJ"]
    assert "| 60 % | 1 | 8 |" in md and "0 of 8 |" in md  # the whole order fails in every seed


def test_rows_of_the_report_utilisation_read_back_without_the_column(tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs recorded before utilisation was a column were all at the report's 60 %."""
    old = tmp_path / "guan_orders.csv"
    old.write_text("zipf,seed,scheduler,mean_response_s,cpu_seconds\n1,2,ata,10.5,3.0\n")
    monkeypatch.setattr(guan_orders, "CSV", old)
    rows = guan_orders.read()
    assert list(rows) == [(0.6, 1.0, 2, "ata")]
    assert rows[(0.6, 1.0, 2, "ata")]["utilisation"] == "0.6"
    guan_orders.write(rows)
    assert old.read_text().splitlines()[0].startswith("utilisation,zipf,seed")
