"""Allocation reports: the ``solve --json`` object, utilisation and the readable table."""

from __future__ import annotations

import json

import numpy as np
import pytest

from psdsf_dist.core.certificate import certificate
from psdsf_dist.core.report import allocation_json, allocation_table, utilization
from psdsf_dist.model.scenario import Scenario

FIG2_RDM_X = np.array([[3.6, 0], [3.6, 0], [0, 8], [0, 8]])
KEYS = {"policy", "mode", "resources", "servers", "users", "allocation", "tasks", "utilization",
        "certificate"}


def test_utilization_of_fig2(fig2: Scenario) -> None:
    util = utilization(fig2, FIG2_RDM_X)
    # s1: cpu 3.6*1.5 + 3.6 = 9 of 9, mem 3.6 + 7.2 = 10.8 of 12, bw 72 of 100
    np.testing.assert_allclose(util[0], [1.0, 0.9, 0.72])
    # s2: cpu 4 + 8 = 12 of 12, mem 8 + 4 = 12 of 12, no bandwidth at all
    np.testing.assert_allclose(util[1], [1.0, 1.0, 0.0])


def test_utilization_uses_the_scaled_demand_where_gamma_is_given() -> None:
    scenario = Scenario.from_dict({
        "resources": ["cpu"],
        "servers": [{"name": "s", "capacity": {"cpu": 10}}],
        "users": [{"name": "u", "demand": {"cpu": 1}, "gamma": {"s": 4}}],
    })
    # alone the user runs 4 tasks and fills the server
    np.testing.assert_allclose(utilization(scenario, np.array([[4.0]])), [[1.0]])


def test_allocation_json_keys_and_values(fig2: Scenario) -> None:
    X = FIG2_RDM_X.copy()
    X[0, 1] = 1e-15  # dust is left out of the allocation listing
    cert = certificate(fig2, X)
    out = allocation_json(fig2, X, policy="psdsf", mode="rdm", certificate=cert,
                          extra={"solver": {"sweeps": 1}})
    assert set(out) >= KEYS
    assert out["policy"] == "psdsf" and out["mode"] == "rdm"
    assert out["resources"] == ["cpu", "mem", "bw"]
    assert out["servers"] == ["s1", "s2"]
    assert out["users"] == ["u1", "u2", "u3", "u4"]
    assert out["allocation"] == {"u1": {"s1": 3.6}, "u2": {"s1": 3.6}, "u3": {"s2": 8.0},
                                 "u4": {"s2": 8.0}}
    assert out["tasks"]["u3"] == 8.0
    assert out["utilization"]["s1"]["mem"] == pytest.approx(0.9)
    assert out["certificate"] == {"holds": True, "residual": cert.residual}
    assert cert.residual < 1e-12
    assert out["solver"] == {"sweeps": 1}
    json.dumps(out, allow_nan=False)  # plain JSON types only


def test_allocation_json_without_certificate(fig2: Scenario) -> None:
    out = allocation_json(fig2, FIG2_RDM_X, policy="drf", mode="rdm", certificate=None)
    assert out["certificate"] is None


def test_table_names_classes_tasks_and_the_verdict(cluster: Scenario) -> None:
    per_server = {"A": [5, 2.5, 0, 0], "B": [2.5, 1.25, 0, 0], "C": [0, 0, 2.5, 0],
                  "D": [0, 0, 0, 2.5]}
    X = np.array([per_server[c] for c in cluster.server_class], dtype=float).T
    text = allocation_table(cluster, X, policy="psdsf", mode="rdm",
                            certificate=certificate(cluster, X))
    assert "120 servers in 4 classes, 4 users" in text
    rows = {line.split()[0]: line.split() for line in text.splitlines() if line.startswith("  u")}
    assert rows["u1"][1:] == ["2", "40", "170", "0", "0", "210"]
    assert rows["u3"][1:] == ["1", "0", "0", "82.5", "0", "82.5"]
    assert "certificate (Theorem 1): holds" in text


def test_table_lists_violations_when_the_certificate_fails(fig2: Scenario) -> None:
    X = FIG2_RDM_X * 0.5
    text = allocation_table(fig2, X, policy="psdsf", mode="rdm", certificate=certificate(fig2, X))
    assert "FAILS" in text and "no bottleneck" in text
