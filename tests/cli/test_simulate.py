"""``psdsf-dist simulate``: per event, rounds to within 5 % / 1 % / 0.1 % of fair."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from psdsf_dist.cli.main import main
from tests.conftest import EXAMPLES


def churn_file(tmp_path: Path) -> Path:
    doc: dict[str, Any] = yaml.safe_load((EXAMPLES / "paper_fig1.yaml").read_text())
    doc["events"] = [{"at": 15, "user_leaves": "u2"}]
    path = tmp_path / "fig1_churn.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_json_reports_the_distance_per_round_and_the_rounds_within_per_event(
        tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    status = main(["simulate", str(churn_file(tmp_path)), "--rounds", "30", "--hold", "5",
                   "--quiet", "--json", "-o", str(out)])
    assert status == 0
    doc = json.loads(out.read_text())
    assert all(isinstance(o["distance"], float) for o in doc["trace"])
    assert doc["trace"][-1]["distance"] < 1e-3  # converged: every total at its PS-DSF total
    for event in doc["events"]:
        within = event["rounds_within"]
        assert set(within) == {"0.05", "0.01", "0.001"}
        assert all(isinstance(r, int) for r in within.values())
        # a tighter threshold is reached no earlier
        assert within["0.05"] <= within["0.01"] <= within["0.001"]


def test_text_names_the_thresholds_per_event(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["simulate", str(churn_file(tmp_path)), "--rounds", "30", "--hold", "5"])
    out, err = capsys.readouterr()
    assert status == 0
    lines = [ln for ln in out.splitlines() if ln.startswith("  t=")]
    assert len(lines) == 2 and "user u2 leaves" in lines[1]
    for line in lines:
        assert "within 5 % after" in line and "1 % after" in line and "0.1 % after" in line
    assert "distance " in err
