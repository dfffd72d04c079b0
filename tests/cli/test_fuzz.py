"""The command line under hostile input (:mod:`tests.cli.fuzz_cases`): every outcome is a
result that checks out or one line with exit 2, in bounded time.  A short budget here; the long
run is ``experiments/studies/fuzz_inputs.py``."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from tests.cli.fuzz_cases import Case, cases, run_case, verdict

SECONDS = 20.0
"""Time bound of one case here (small documents, small option values; a loaded machine)."""


@settings(max_examples=80, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(case=cases())
def test_every_command_gives_a_checked_result_or_one_line(
        case: Case, tmp_path_factory: pytest.TempPathFactory) -> None:
    outcome = run_case(case, tmp_path_factory.mktemp("fuzz"))
    problem = verdict(case, outcome, SECONDS)
    assert problem is None, (problem, case)
