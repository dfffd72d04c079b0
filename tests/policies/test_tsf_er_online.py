"""Algorithm 2 (online TSF-ER, indivisible tasks) against a line-by-line transcription of the
paper's pseudo-code, on Fig. 2 and random event sequences; and the rounded MNW/CRU scheduler."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from hypothesis import given, settings
from hypothesis import strategies as st

from psdsf_dist.model.scenario import Scenario
from psdsf_dist.policies.tsf_er import monopoly_tasks
from psdsf_dist.policies.tsf_er_online import OnlineTsfEr, RoundedFluid
from tests.conftest import example_scenario as example

FloatArray = npt.NDArray[np.float64]


def transcription(sc: Scenario, queued: list[int]) -> list[tuple[int, int]]:
    """AllocateFromQueues from empty servers, written out from the pseudo-code with plain
    loops: (user, server) in placement order."""
    eta = monopoly_tasks(sc)
    a = sc.capacity.astype(float).copy()
    ext = sc.external_capacity.astype(float).copy()
    s = [0.0] * len(queued)
    count = [0] * len(queued)
    left = list(queued)
    out: list[tuple[int, int]] = []

    def fits(j: int, m: int) -> bool:
        return bool((sc.demand[j] <= a[m] + 1e-9 * sc.capacity[m]).all()
                    and (sc.external_demand[j] <= ext + 1e-9 * sc.external_capacity).all())

    while True:
        feas = [j for j in range(len(left)) if left[j] and any(fits(j, m)
                                                                for m in range(len(a)))]
        if not feas:
            return out
        smin = min(count[j] / eta[j] for j in feas)
        jmin = [j for j in feas if count[j] / eta[j] <= smin * (1 + 1e-12)]
        j = min(jmin, key=lambda k: (1 / eta[k], k))
        ms = [m for m in range(len(a)) if fits(j, m)]
        m = min(ms, key=lambda m: (float(((a[m] - sc.demand[j]) ** 2).sum()), m))
        a[m] -= sc.demand[j]
        ext -= sc.external_demand[j]
        left[j] -= 1
        count[j] += 1
        s[j] += 1 / eta[j]
        out.append((j, m))


def test_fig2_reallocation() -> None:
    """Fig. 2 (eta = 6, 7.5): u2 goes first (equal shares, the smaller step 1/7.5), each to
    the server whose residual is nearest its demand; 4 tasks each, u1 [1, 3], u2 [3, 1]."""
    sc = example("tsfer_fig2")
    online = OnlineTsfEr(sc)
    np.testing.assert_allclose(online.eta, [6, 7.5])
    first = online.arrive(0, list(range(10)))
    assert len(first) == 6  # alone, u1 takes the link's 6 tasks
    assert online.arrive(1, list(range(10))) == []  # nothing is revoked on arrival
    suspended, placed = online.reallocate()
    assert sorted(suspended) == [(0, t) for t in range(6)]
    assert [(p.user, p.server) for p in placed] == transcription(sc, [10, 10])
    assert (placed[0].user, placed[0].server) == (1, 0)
    np.testing.assert_array_equal(online.allocation, [[1, 3], [3, 1]])
    # suspended tasks resume first, in id order
    assert [p.task for p in placed if p.user == 0] == [0, 1, 2, 3]


def random_scenario(data: st.DataObject) -> Scenario:
    K, N = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 4))
    cap = st.integers(5, 20).map(float)
    return Scenario.from_dict({
        "resources": ["cpu", "mem"],
        "external": {"bw": float(data.draw(st.integers(3, 20)))},
        "servers": [{"name": f"s{i}", "capacity": {"cpu": data.draw(cap), "mem": data.draw(cap)}}
                    for i in range(K)],
        "users": [{"name": f"u{n}", "demand": {"cpu": float(data.draw(st.integers(1, 5))),
                                               "mem": float(data.draw(st.integers(1, 5)))},
                   "external_demand": {"bw": float(data.draw(st.integers(0, 3)))}}
                  for n in range(N)],
    })


@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_reallocation_is_the_transcription(data: st.DataObject) -> None:
    sc = random_scenario(data)
    queued = [data.draw(st.integers(0, 12)) for _ in range(sc.num_users)]
    online = OnlineTsfEr(sc)
    for j, q in enumerate(queued):
        online.queues[j].extend(range(q))
    _, placed = online.reallocate()
    assert [(p.user, p.server) for p in placed] == transcription(sc, queued)


@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_events_keep_it_feasible_maximal_and_lose_no_task(data: st.DataObject) -> None:
    """Any sequence of arrivals, departures and reallocations: within every capacity and the
    link, every task queued, running or done exactly once, and after each step no queued task
    fits anywhere (AllocateFromQueues runs until J_feas is empty)."""
    sc = random_scenario(data)
    online = OnlineTsfEr(sc)
    arrived = [0] * sc.num_users
    done: set[tuple[int, int]] = set()
    for _ in range(data.draw(st.integers(1, 12))):
        kind = data.draw(st.sampled_from(["arrive", "depart", "reallocate"]))
        if kind == "arrive":
            j, k = data.draw(st.integers(0, sc.num_users - 1)), data.draw(st.integers(1, 6))
            online.arrive(j, list(range(arrived[j], arrived[j] + k)))
            arrived[j] += k
        elif kind == "depart" and online.where:
            keys = sorted(online.where)
            pick = data.draw(st.lists(st.sampled_from(keys), min_size=1, unique=True))
            online.depart(pick)
            done.update(pick)
        else:
            online.reallocate()
        X = online.allocation
        used = X.T @ sc.demand
        assert (used <= sc.capacity + 1e-9).all()
        assert X.sum(axis=1) @ sc.external_demand[:, 0] <= sc.external_capacity[0] + 1e-9
        np.testing.assert_allclose(online.residual, sc.capacity - used, atol=1e-9)
        queued = np.array([len(q) > 0 for q in online.queues])
        assert not (online.fits() & queued[:, None]).any()
        for j in range(sc.num_users):
            ids = (list(online.queues[j]) + [t for (u, t) in online.where if u == j]
                   + [t for (u, t) in done if u == j])
            assert sorted(ids) == list(range(arrived[j]))


def test_rounded_fluid_waits_for_the_slot_then_rounds_down_and_fills() -> None:
    sc = example("tsfer_fig2")
    half = np.array([[1.6, 2.5], [2.9, 0.4]])
    rounded = RoundedFluid(sc, lambda active: half, np.random.default_rng(0))
    assert rounded.arrive(0, list(range(3))) == []  # nothing before the reallocation
    assert rounded.arrive(1, list(range(9))) == []
    _, placed = rounded.reallocate()
    rounded_down = [(p.user, p.server) for p in placed[:5]]
    assert sorted(rounded_down) == [(0, 0), (0, 1), (0, 1), (1, 0), (1, 0)]
    # a user arrived in the slot: the rest is filled at random until nothing fits
    queued = np.array([len(q) > 0 for q in rounded.queues])
    assert not (rounded.fits() & queued[:, None]).any()
    # a finished task leaves its resources idle until the next reallocation
    free = rounded.residual.copy()
    assert rounded.depart([(placed[0].user, placed[0].task)]) == []
    assert (rounded.residual >= free).all()
