"""The experiments' one entry point: every experiment is listed, importable and takes argv."""

from __future__ import annotations

import importlib
import inspect

import pytest

from experiments.__main__ import GROUPS, catalogue, main


def test_every_experiment_is_listed_once_and_imports_with_a_main_taking_argv() -> None:
    found = catalogue()
    assert {e.group for e in found.values()} == set(GROUPS)
    assert "reproduce" in found and "bench_tenants" in found
    for e in found.values():
        assert e.summary, e.name
        module = importlib.import_module(e.module)
        params = list(inspect.signature(module.main).parameters)
        assert params == ["argv"], e.name


def test_list_prints_every_experiment(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in catalogue())


def test_run_passes_its_arguments_to_the_experiment(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["run", "bench_limits", "--help"])
    assert stop.value.code == 0
    assert "python -m experiments run bench_limits" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [["run"], ["run", "no_such_experiment"], ["frobnicate"]])
def test_bad_use_is_one_clear_line_and_exit_2(argv: list[str],
                                              capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("python -m experiments: error:")
