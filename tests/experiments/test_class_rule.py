"""class_rule's csv: a rerun replaces the rows it measures again and keeps every other row."""

from __future__ import annotations

from pathlib import Path

import pytest

import experiments.studies.class_rule as class_rule


def row(case: str, seed: int, setting: str, rounds: int) -> dict[str, object]:
    return {k: "" for k in class_rule.FIELDS} | {
        "case": case, "seed": seed, "phase": "from zero", "setting": setting, "rounds": rounds}


def test_a_rerun_replaces_its_own_rows_and_keeps_the_others(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(class_rule, "CSV", tmp_path / "class_rule.csv")
    full = row("google K=12583", 0, "runtime class", 100)  # made alone, by another command
    class_rule.merge([full, row("google K=100", 0, "runtime class", 40)])
    class_rule.merge([row("google K=100", 0, "runtime class", 30),
                      row("google K=100", 1, "runtime class", 50)])
    got = {(r["case"], r["seed"]): r["rounds"] for r in class_rule.read()}
    assert got == {("google K=12583", "0"): "100", ("google K=100", "0"): "30",
                   ("google K=100", "1"): "50"}
    before = (tmp_path / "class_rule.csv").read_bytes()
    class_rule.merge([])
    assert (tmp_path / "class_rule.csv").read_bytes() == before
