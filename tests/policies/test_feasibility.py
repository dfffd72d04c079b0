"""The feasible set with task groups (group_model) and the group fit, against hand counts."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from scipy.optimize import linprog

from psdsf_dist.model.scenario import Scenario
from psdsf_dist.policies.feasibility import fit_to_groups, group_model, task_model


def jobs(users: list[dict[str, Any]]) -> Scenario:
    return Scenario.from_dict({
        "resources": ["slots"],
        "servers": [{"name": f"S{j}", "capacity": {"slots": 2}} for j in (1, 2, 3)],
        "users": [{"name": f"J{n}", "demand": {"slots": 1}, **u} for n, u in enumerate(users)],
    })


def test_without_groups_it_is_the_task_model(fig1: Scenario) -> None:
    gm = group_model(fig1, "rdm")
    base = task_model(fig1, "rdm")
    assert (gm.model.A != base.A).nnz == 0
    assert gm.capacity_rows == base.A.shape[0] and (gm.group == -1).all()


def test_group_variables_rows_and_totals() -> None:
    sc = jobs([{"task_groups": [{"servers": ["S1", "S2"], "tasks": 3},
                                {"servers": ["S2"], "tasks": 0}]},
               {}])
    gm = group_model(sc, "rdm")
    m = gm.model
    # J1 unbound: one variable per server; J0: its group of 3 on S1 and S2, the empty one none
    triples = zip(m.user.tolist(), m.server.tolist(), gm.group.tolist(), strict=True)
    assert sorted(triples) == [
        (0, 0, 0), (0, 1, 0), (1, 0, -1), (1, 1, -1), (1, 2, -1)]
    assert m.A.shape[0] == gm.capacity_rows + 1
    # the most the model lets J0 run is its 3 tasks; J1 the 6 slots
    for n, best in ((0, 3.0), (1, 6.0)):
        res = linprog(-np.asarray(m.totals[n].todense()).ravel(), A_ub=m.A, b_ub=m.b,
                      bounds=(0, None), method="highs")
        assert -res.fun == pytest.approx(best)


def test_fit_to_groups_by_hand() -> None:
    sc = jobs([{"server_tasks": {"S1": 1, "S2": 4}},
               {"task_groups": [{"servers": ["S1", "S2"], "tasks": 3},
                                {"servers": ["S3"], "tasks": 1}]},
               {}])
    # one-server groups: sum_i min(given_i, d_i)
    assert fit_to_groups(sc, 0, np.array([2.0, 2.0, 5.0])) == pytest.approx(1 + 2)
    # groups: 3 of S1+S2's 4, 1 of S3's 2
    assert fit_to_groups(sc, 1, np.array([2.0, 2.0, 2.0])) == pytest.approx(4.0)
    assert fit_to_groups(sc, 1, np.array([0.5, 0.0, 0.0])) == pytest.approx(0.5)
    # unbound: everything
    assert fit_to_groups(sc, 2, np.array([2.0, 2.0, 2.0])) == pytest.approx(6.0)
