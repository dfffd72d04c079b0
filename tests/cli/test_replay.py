"""``psdsf-dist replay``: Table 3.1 from its CSV, allocation policies, and bad input as one line,
exit 2."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from psdsf_dist.cli.main import main
from psdsf_dist.jobs.allocated import PROTOCOL, simulate_allocated
from psdsf_dist.jobs.workload import build_workload, load_trace
from psdsf_dist.protocol.config import ProtocolConfig
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


def test_policies_share_the_slots_as_the_library_does(capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    """--job-policies runs the slots-shared simulator (chapters 4-5) beside any scheduler asked
    for: each result is the library's run of the same workload, recompute mode and
    optimisation."""
    assert main(["replay", TABLE_31, "--slots", "1", "--scheduler", "ata", "--job-policies", "imf",
                 "gamf", "--recompute", "task", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["scheduler"] for r in doc["results"]] == ["ata", "imf", "gamf"]
    w = build_workload(load_trace(TABLE_31), slots=1)
    for r in doc["results"][1:]:
        run = simulate_allocated(w, r["scheduler"], recompute="task")
        assert r["solves"] == run.solves and r["order"] == "task"
        assert r["mean_response_s"] == pytest.approx(float(run.run.response.mean()))
    assert main(["replay", TABLE_31, "--slots", "1", "--job-policies", "amf", "--optimized",
                 "--json"]) == 0
    (got,) = json.loads(capsys.readouterr().out)["results"]  # no scheduler by default then
    assert got["scheduler"] == "amf (optimized)"
    assert got["solves"] == simulate_allocated(w, "amf", optimized=True).solves


def test_the_protocol_shares_the_slots_as_the_library_does(
        capsys: pytest.CaptureFixture[str]) -> None:
    """--job-policies protocol runs the per-server protocol over the jobs with the protocol
    options given (the same names and defaults as in simulate): the library's run, with its
    rounds and how many of them ended PS-DSF."""
    assert main(["replay", TABLE_31, "--slots", "1", "--job-policies", "protocol", "imf",
                 "--period", "0.5", "--rule", "best-response", "--delay", "1r", "--json"]) == 0
    captured = capsys.readouterr()
    got, imf = json.loads(captured.out)["results"]
    w = build_workload(load_trace(TABLE_31), slots=1)
    run = simulate_allocated(w, PROTOCOL, protocol=ProtocolConfig(period=0.5, rule="best-response",
                                                                   delay=0.5))
    assert got["scheduler"] == "protocol" and imf["scheduler"] == "imf" and "rounds" not in imf
    assert got["rounds"] == run.rounds > 0 and got["certified_rounds"] == run.certified_rounds
    assert got["mean_response_s"] == pytest.approx(float(run.run.response.mean()))
    assert f"protocol: 29 tasks, {run.rounds} rounds ({run.certified_rounds} certified" \
        in captured.err


def test_a_protocol_replay_of_too_many_server_updates_is_refused_at_once(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Table 3.1's 29 one-second tasks on 3 sites of one slot keep some job present for at
    least 29 / 3 s: at T = 0.5 s, 20 rounds of 3 servers at least."""
    monkeypatch.setenv("PSDSF_LIMITS", "protocol_updates=59")
    argv = ["replay", TABLE_31, "--slots", "1", "--job-policies", "protocol", "--period", "0.5"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "protocol: at least 60 server updates" in err and "\n" not in err
    assert 'PSDSF_LIMITS="protocol_updates=N"' in err
    monkeypatch.setenv("PSDSF_LIMITS", "protocol_updates=60")
    assert main(argv) == 0


def test_a_policy_replay_of_too_many_jobs_is_refused_at_once(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("PSDSF_LIMITS", "policy_jobs=2")
    assert main(["replay", TABLE_31, "--job-policies", "amf"]) == 2
    err = capsys.readouterr().err.strip()
    assert "guan_table31.csv: 3 jobs, more than the limit of 2 for --job-policies" in err
    assert 'PSDSF_LIMITS="policy_jobs=N"' in err and "\n" not in err
    assert main(["replay", TABLE_31, "--slots", "1", "--scheduler", "ata"]) == 0  # not for these


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
    ([TABLE_31, "--job-policies", "nope"], "invalid choice"),
    ([TABLE_31, "--job-policies", "amf", "drf", "--optimized"],
     "--optimized: only the AMF family (amf, amf-si, gamf, gamf-si) is optimized, not drf"),
    ([TABLE_31, "--optimized"], "--optimized: only with --job-policies"),
    ([TABLE_31, "--recompute", "task"], "--recompute: only with --job-policies"),
    ([TABLE_31, "--job-policies", "amf", "--period", "2"],
     "--period: only with --job-policies protocol"),
    ([TABLE_31, "--delay", "1r"], "--delay: only with --job-policies protocol"),
    ([TABLE_31, "--job-policies", "protocol", "--delay", "x"], "--delay: expected seconds or"),
    ([TABLE_31, "--job-policies", "protocol", "--optimized"],
     "--optimized: only the AMF family (amf, amf-si, gamf, gamf-si) is optimized, not protocol"),
])
def test_bad_input_is_one_line_exit_2(argv: list[str], message: str,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err


def test_a_trace_that_keeps_too_many_jobs_waiting_is_refused_at_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A burst of 3,000 two-task jobs on two one-slot sites would keep thousands of jobs
    waiting through thousands of plans (minutes to hours): refused before the replay, on a
    bound valid under every scheduler, in one line naming the limit."""
    trace = tmp_path / "burst.csv"
    trace.write_text("job,submit_s,tasks,sites,duration_s\n"
                     + "".join(f"j{k},0,2,S1 S2,1\n" for k in range(3000)))
    t0 = time.perf_counter()
    assert main(["replay", str(trace), "--slots", "1", "--scheduler", "ata"]) == 2
    assert time.perf_counter() - t0 < 2
    err = capsys.readouterr().err.strip()
    assert ("burst.csv: at least 2,999 jobs wait at once (t = 0 s) under any scheduler, more "
            "than the limit of 200") in err
    assert 'PSDSF_LIMITS="waiting_jobs=N"' in err and "\n" not in err


def test_a_replay_past_its_work_limits_stops_in_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """What the bound before the replay cannot see is checked at every plan: here every job
    but one needs site S1, so jobs pile up there while S2 idles (the bound counts both
    sites' slots); and the estimates are capped."""
    trace = tmp_path / "one_site.csv"
    trace.write_text("job,submit_s,tasks,sites,duration_s\nj,0,1,S2,1\n"
                     + "".join(f"j{k},{0.6 * k:.1f},1,S1,1\n" for k in range(1, 200)))
    monkeypatch.setenv("PSDSF_LIMITS", "waiting_jobs=30")
    assert main(["replay", str(trace), "--slots", "1", "--scheduler", "swag"]) == 2
    err = capsys.readouterr().err.strip()
    assert "one_site.csv: swag: 31 jobs wait at once, more than the limit of 30" in err
    assert 'PSDSF_LIMITS="waiting_jobs=N"' in err and "\n" not in err
    monkeypatch.setenv("PSDSF_LIMITS", "estimates=100")
    assert main(["replay", TABLE_31, "--slots", "1", "--scheduler", "ata"]) == 0
    capsys.readouterr()
    monkeypatch.setenv("PSDSF_LIMITS", "estimates=2")
    assert main(["replay", TABLE_31, "--slots", "1", "--scheduler", "ata"]) == 2
    err = capsys.readouterr().err.strip()
    assert "guan_table31.csv: ata: the plans need more than 2 job estimates" in err
    assert 'PSDSF_LIMITS="estimates=N"' in err and "\n" not in err
