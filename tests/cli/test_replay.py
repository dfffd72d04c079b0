"""``psdsf-dist replay``: Table 3.1 from its CSV, and bad input as one line, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from psdsf_dist.cli.main import main
from tests.conftest import EXAMPLES

TABLE_31 = str(EXAMPLES / "guan_table31.csv")


def test_json_gives_the_thesis_averages(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", TABLE_31, "--slots", "1", "--scheduler", "ata", "scta", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    got = {r["scheduler"]: r["mean_response_s"] for r in doc["results"]}
    assert got == pytest.approx({"ata": 17 / 3, "scta": 19 / 3})


def test_table_output(tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    assert main(["replay", TABLE_31, "--slots", "1", "--scheduler", "btawj", "--order", "fifo",
                 "-o", str(out)]) == 0
    text = out.read_text()
    assert "3 jobs, 29 tasks on 3 sites" in text and "7.333" in text


def test_a_run_of_one_instant_prints_valid_json(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """Every job submitted at one instant: the offered load has no finite value (and a short
    run's event rate may not either); --json says null instead of failing on inf."""
    trace = tmp_path / "t.csv"
    trace.write_text("job,submit_s,tasks,duration_s\nj0,0.5,3,0.5\n")
    assert main(["replay", str(trace), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["results"][0]["offered_utilisation"] is None


@pytest.mark.parametrize(("argv", "message"), [
    (["missing.csv"], "missing.csv: no such file"),
    ([TABLE_31, "--zipf", "-1"], "--zipf: must be a number in [0, 100], got -1"),
    ([TABLE_31, "--sites", "1000000000"], "--sites: must be in 1..1,000"),
    ([TABLE_31, "--slots", "1e12"], "--slots: must be a whole number in 1..1,000,000"),
    ([TABLE_31, "--utilisation", "inf"], "--utilisation: must be a number in (0, 100]"),
    ([TABLE_31, "--pareto", "1.2", "1e300"], "--pareto: must be a number in (0, 1e+06]"),
    ([TABLE_31, "--seed", "-5"], "--seed: must be in 0.."),
    (["/dev/zero"], "unknown trace format"),
    ([TABLE_31, "--available", "3", "--sites", "2"], "--available: must be between 1 and"),
    ([TABLE_31, "--pareto", "1", "2"], "--pareto: need SHAPE > 1"),
    ([TABLE_31, "--scheduler", "ata", "--order", "fifo"], "--order fifo: only for"),
    ([TABLE_31, "--scheduler", "nope"], "invalid choice"),
])
def test_bad_input_is_one_line_exit_2(argv: list[str], message: str,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err
