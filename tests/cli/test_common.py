"""Helpers shared by the commands: the caps line of the text report."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from psdsf_dist.cli.common import cap_line
from psdsf_dist.cli.main import main
from psdsf_dist.protocol.convergence import Observation


def capped(round_: int, excess: float) -> Observation:
    return Observation(round_, float(round_), 1.0, False, True, 1.0, 0.0, 0.0, 0.0, 0.0, 1,
                       cap_excess=excess)


def test_the_caps_line_says_none_was_exceeded_or_by_how_much_and_when() -> None:
    assert cap_line([capped(0, 0.0)]) == "caps: no user's total exceeded its max_tasks"
    line = cap_line([capped(0, 0.0), capped(3, 0.25), capped(4, 0.1)])
    assert "by up to 25.00% (round 3" in line


SMALL = str(Path(__file__).resolve().parents[2] / "psdsf_dist" / "examples" / "paper_fig1.yaml")


@pytest.mark.parametrize(("argv", "needle"), [
    (["simulate", SMALL, "--rounds", "100000000000000000000"],
     "--rounds: must be in 1..1,000,000"),
    (["simulate", SMALL, "--rounds", "1e20"], "--rounds: must be a whole number"),
    (["properties", SMALL, "--trials", "1000000000000"], "--trials: must be in 0..100,000"),
    (["compare", SMALL, "--trials", "1e12"], "--trials: must be a whole number"),
    (["simulate", SMALL, "--delay", "1e300"], "--delay: must be between 0 and 1e+06 seconds"),
    (["simulate", SMALL, "--delay", "1e300r"], "--delay: must be between 0 and 1e+06 seconds"),
    (["observe", SMALL, "--period", "1e300"], "--period: must be a number in [0.001, 1e+06]"),
    (["observe", SMALL, "--pace", "nan"], "--pace: must be a number in [0, 1e+06]"),
    (["simulate", SMALL, "--rtol", "inf"], "--rtol: must be a number in (0, 1)"),
    (["simulate", SMALL, "--loss", "nan"], "--loss: must be a number in [0, 1)"),
    (["simulate", SMALL, "--fanout", "10000000"], "--fanout: must be in 1..1,000"),
    (["simulate", SMALL, "--seed", "-1"], "--seed: must be in 0..9,223,372,036,854,775,807"),
    (["solve", SMALL, "--seed", "\ud800"], "--seed: must be a whole number"),
    (["run", SMALL, "--duration", "1e300"], "--duration: must be a number in (0, 1e+06]"),
    (["run", SMALL, "--time-scale", "inf"], "--time-scale: must be a number in (0, 1e+06]"),
    (["run", SMALL, "--num-cpus", "0"], "--num-cpus: must be in 1..4,096"),
])
def test_numeric_options_have_ranges_in_every_command(argv: list[str], needle: str,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and needle in err, err


def test_work_beyond_the_limit_is_refused_before_it_starts(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("PSDSF_LIMITS", "work=50000")
    for argv, option in ((["simulate", SMALL, "--rounds", "60"], "--rounds"),
                         (["properties", SMALL, "--trials", "60"], "--trials"),
                         (["compare", SMALL, "--trials", "30", "--policies", "drf", "tsf"],
                          "--trials")):
        began = time.perf_counter()
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert f"{option}: " in err and "more than the work limit of 50,000" in err, err
        assert time.perf_counter() - began < 2


def test_work_is_refused_on_the_document_before_anything_is_built(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # 50 users x 1,000,000 servers (the cells limit): building it alone takes GBs
    path = tmp_path / "cells.json"
    path.write_text(json.dumps({
        "resources": ["cpu"], "servers": [{"name": "s", "count": 1_000_000,
                                           "capacity": {"cpu": 4}}],
        "users": [{"name": f"u{n}", "demand": {"cpu": 1}} for n in range(50)]}))
    began = time.perf_counter()
    assert main(["simulate", str(path), "--rounds", "1"]) == 2
    assert time.perf_counter() - began < 2
    assert "50,000,000 user x server cells x 1 rounds" in capsys.readouterr().err


def test_output_to_a_device_or_pipe_is_refused_and_the_node_kept(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``-o`` writes by a rename over the target, which would replace a device or FIFO node
    itself (as root, ``-o /dev/full`` did): such a target is refused in one line, left as it
    was."""
    import os
    import stat

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    scenario = Path(__file__).resolve().parents[2] / "psdsf_dist" / "examples" / "paper_fig1.yaml"
    assert main(["solve", str(scenario), "-o", str(fifo)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "not a regular file" in err, err
    assert stat.S_ISFIFO(fifo.stat().st_mode)
