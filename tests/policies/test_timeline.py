"""Policy timelines: phases as the membership table sees them, ORACLES 3's churn numbers."""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import numpy.typing as npt
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from psdsf_dist.model.random_scenarios import random_scenario_doc
from psdsf_dist.model.scenario import Scenario, load_scenario
from psdsf_dist.policies import allocate
from psdsf_dist.policies.class_merge import allocate_by_class
from psdsf_dist.policies.properties import feasible
from psdsf_dist.policies.timeline import at_times, phases, policy_timeline

PAPER = "psdsf_dist/examples/paper_cluster.yaml"


def _cpu_use(sc: Scenario, X: npt.NDArray[np.float64], cls: str) -> float:
    m = np.array(sc.server_class) == cls
    return float((X[:, m].T @ sc.demand[:, 0]).sum() / sc.capacity[m, 0].sum())


def test_paper_cluster_has_three_phases() -> None:
    ph = phases(load_scenario(PAPER))
    assert [(p.start, p.end) for p in ph] == [(0.0, 100.0), (100.0, 250.0), (250.0, math.inf)]
    assert [p.description for p in ph] == ["start", "u4 leaves", "u4 joins"]
    assert ph[1].users_present.tolist() == [True, True, True, False]
    assert not ph[1].scenario.eligible[3].any()


def test_oracle_3_baselines_per_phase() -> None:
    # ORACLES 3 totals with everyone present; the split across classes is not unique, so the
    # class C utilisation of Fig. 6 depends on the LP's vertex and is not pinned here
    sc = load_scenario(PAPER)
    for policy, totals in (("tsf", [204.945, 107.527, 58.3425, 35.5525]),
                           ("c-drfh", [210.92, 105.46, 57.69, 35.15])):
        tl = policy_timeline(sc, policy)
        X_all, X_away, X_back = at_times(tl, [50, 100, 250])
        np.testing.assert_allclose(X_all.sum(axis=1), totals, atol=5e-3)
        np.testing.assert_allclose(X_back.sum(axis=1), totals, atol=5e-3)
        assert X_away[3].sum() == 0 and X_away[2].sum() > totals[2]
        for X in (X_all, X_away):
            assert abs(_cpu_use(sc, X, "D") - 1.0) < 1e-6


def test_oracle_3_psdsf_while_u4_is_away() -> None:
    tl = policy_timeline(load_scenario(PAPER), "psdsf", allocator=allocate_by_class)
    np.testing.assert_allclose(tl[1].allocation.totals, [251.25, 125.625, 82.5, 0], atol=1e-6)
    np.testing.assert_allclose(tl[0].allocation.totals, [210, 105, 82.5, 27.5], atol=1e-6)


def test_at_times_reads_the_phase_in_force() -> None:
    tl = policy_timeline(load_scenario(PAPER), "tsf")
    X = at_times(tl, [-1.0, 0.0, 99.999, 100.0, 249.0, 250.0, 1e9])
    ids = [id(x) for x in X]
    first, second, third = (id(p.allocation.allocation) for p in tl)
    assert ids == [first, first, first, second, second, third, third]


@st.composite
def churned(draw: Any) -> Scenario:
    seed = draw(st.integers(0, 10_000))
    rng = np.random.default_rng(seed)
    doc = random_scenario_doc(rng, K=int(rng.integers(2, 12)), N=int(rng.integers(2, 5)), M=2)
    users = [u["name"] for u in doc["users"]]
    present = set(users)
    events = []
    t = 0.0
    for _ in range(draw(st.integers(1, 4))):
        t += float(draw(st.integers(1, 50)))
        u = draw(st.sampled_from(users))
        if u in present and len(present) > 1:
            events.append({"at": t, "user_leaves": u})
            present.discard(u)
        elif u not in present:
            events.append({"at": t, "user_joins": u})
            present.add(u)
    doc["events"] = events
    return Scenario.from_dict(doc, "churned")


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sc=churned(), policy=st.sampled_from(["psdsf", "drfh", "tsf", "per-server-drf"]))
def test_every_phase_is_the_policy_on_who_is_present(sc: Scenario, policy: str) -> None:
    tl = policy_timeline(sc, policy)
    assert tl[0].phase.start == 0.0 and tl[-1].phase.end == math.inf
    for a, b in itertools.pairwise(tl):
        assert a.phase.end == b.phase.start
    for item in tl:
        ph = item.phase
        X = item.allocation.allocation
        assert np.all(X[~ph.users_present] == 0)  # an absent user gets nothing
        assert feasible(sc, X, "rdm").holds  # within every server of the full cluster
        # the same as the policy on the cluster with the absent users' placement removed
        alone = sc.replace_users(placement=sc.placement & ph.users_present[:, None])
        np.testing.assert_allclose(X.sum(axis=1), allocate(alone, policy).totals,
                                   rtol=1e-6, atol=1e-6)
