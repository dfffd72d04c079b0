"""The flow-network balancing: the least level is the least K whose network carries every
task (checked against scipy's max-flow), and the allocations stay within the groups' sites."""

from __future__ import annotations

from unittest import mock

import numpy as np
import numpy.typing as npt
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import maximum_flow

from psdsf_dist.jobs import balance as balance_module
from psdsf_dist.jobs.balance import (
    _flow,
    _water_fill,
    balance,
    caps,
    greedy,
    greedy_level,
    grid,
    level,
    min_level,
    site_lists,
)

IntArray = npt.NDArray[np.int64]


def scipy_flow(demand: IntArray, sites: list[list[int]], site_caps: IntArray) -> int:
    G, m = len(demand), len(site_caps)
    n = 2 + G + m
    cap = np.zeros((n, n), dtype=np.int32)
    cap[0, 1:1 + G] = demand
    for i, row in enumerate(sites):
        cap[1 + i, [1 + G + j for j in row]] = demand[i]
    cap[1 + G:1 + G + m, n - 1] = site_caps
    return int(maximum_flow(csr_matrix(cap), 0, n - 1).flow_value)


@st.composite
def instances(draw: st.DrawFn) -> tuple[IntArray, IntArray, tuple[tuple[int, ...], ...],
                                         IntArray, IntArray]:
    m = draw(st.integers(1, 7))
    G = draw(st.integers(1, 5))
    group_sites = np.zeros((G, m), dtype=bool)
    for g in range(G):
        chosen = draw(st.lists(st.integers(0, m - 1), min_size=1, max_size=3, unique=True))
        group_sites[g, chosen] = True
    demand = np.array(draw(st.lists(st.integers(0, 30), min_size=G, max_size=G)),
                      dtype=np.int64)
    if draw(st.booleans()):  # equal slots: min_level's closed form
        slots = np.full(m, draw(st.integers(1, 3)), dtype=np.int64)
    else:
        slots = np.array(draw(st.lists(st.integers(1, 3), min_size=m, max_size=m)),
                         dtype=np.int64)
    loads = np.array(draw(st.lists(st.integers(0, 20), min_size=m, max_size=m)), dtype=np.int64)
    return demand, np.arange(G, dtype=np.int64), site_lists(group_sites), slots, loads


@settings(max_examples=200, deadline=None)
@given(instances())
def test_least_level_is_the_least_k_the_network_carries(inst: tuple) -> None:  # type: ignore[type-arg]
    demand, groups, lists, slots, loads = inst
    L = grid(slots)
    K, x = balance(demand, groups, lists, slots, loads, L)
    total = int(demand.sum())
    rows = [list(lists[g]) for g in groups]
    assert scipy_flow(demand, rows, caps(K, slots, loads, L)) == total
    if total:
        assert K == 0 or scipy_flow(demand, rows, caps(K - 1, slots, loads, L)) < total
    # every task placed, only at its group's sites, and the allocation reaches level K
    assert (x.sum(axis=1) == demand).all()
    for i, g in enumerate(groups):
        assert x[i, [j for j in range(len(slots)) if j not in lists[g]]].sum() == 0
    assert level(x.sum(axis=0), slots, loads, L) == K
    # a lower bound only shortens the search
    assert min_level(demand, groups, lists, slots, loads, L, lower=K) == K


@settings(max_examples=150, deadline=None)
@given(instances(), st.lists(st.integers(0, 40), min_size=7, max_size=7))
def test_equal_slots_level_is_the_same_from_any_hint(
        inst: tuple, other: list[int]) -> None:  # type: ignore[type-arg]
    """The closed form of equal slots, started from any subset as the likely binding one
    (the job's last), gives the level it gives with no hint — on the job's loads and on
    other loads — and the subset it names reaches that level."""
    demand, groups, lists, _, loads = inst
    per_list = _per_list(demand, groups, lists)
    h = balance_module._subsets(*per_list) if per_list[0] else None
    if h is None:  # no tasks, or a max-flow decides
        return
    for ld in (loads, np.array(other[:len(loads)], dtype=np.int64)):
        plain, b = balance_module._equal_slots_level(h, ld[h.N], 2)
        assert balance_module._equal_slots_level(h, ld[h.N], 2, b) == (plain, b)
        for hint in range(len(h.need_list)):
            assert balance_module._equal_slots_level(h, ld[h.N], 2, hint)[0] == plain


def _per_list(demand: IntArray, groups: IntArray, lists: tuple[tuple[int, ...], ...]
              ) -> tuple[tuple[tuple[int, ...], ...], tuple[int, ...]]:
    """The tasks per distinct site list, as the least level reads them."""
    per: dict[tuple[int, ...], int] = {}
    for d, g in zip(demand.tolist(), groups.tolist(), strict=True):
        if d > 0:
            per[lists[g]] = per.get(lists[g], 0) + d
    keys = tuple(sorted(per))
    return keys, tuple(per[k] for k in keys)


@settings(max_examples=80, deadline=None)
@given(instances(), st.lists(st.integers(0, 40), min_size=7, max_size=7))
def test_flow_value_matches_scipy(inst: tuple, raw_caps: list[int]) -> None:  # type: ignore[type-arg]
    demand, groups, lists, slots, _ = inst
    site_caps = np.array(raw_caps[:len(slots)], dtype=np.int64)
    value, x = _flow(demand, groups, lists, site_caps)
    assert value == scipy_flow(demand, [list(lists[g]) for g in groups], site_caps)
    assert (x >= 0).all() and (x.sum(axis=0) <= site_caps).all()
    assert (x.sum(axis=1) <= demand).all() and int(x.sum()) == value


@settings(max_examples=80, deadline=None)
@given(instances(), st.integers(0, 3))
def test_least_level_by_max_flow_when_a_job_reaches_many_sites(
        inst: tuple, lower: int) -> None:  # type: ignore[type-arg]
    """Past MAX_HALL_SITES the least level is found by bisection on the max-flow: the same
    level as Hall's condition over the closed connected subsets."""
    demand, groups, lists, slots, loads = inst
    L = grid(slots)
    by_hall = min_level(demand, groups, lists, slots, loads, L, lower)
    with mock.patch.object(balance_module, "MAX_HALL_SITES", 0):
        balance_module._subsets.cache_clear()
        forget()
        by_flow = min_level(demand, groups, lists, slots, loads, L, lower)
    balance_module._subsets.cache_clear()
    forget()
    assert by_flow == by_hall


@settings(max_examples=80, deadline=None)
@given(instances())
def test_greedy_places_every_task_no_better_than_the_flow(inst: tuple) -> None:  # type: ignore[type-arg]
    demand, groups, lists, slots, loads = inst
    L = grid(slots)
    K, x = greedy(demand, groups, lists, slots, loads, L)
    assert (x >= 0).all() and (x.sum(axis=1) == demand).all()
    for i, g in enumerate(groups):
        assert x[i, [j for j in range(len(slots)) if j not in lists[g]]].sum() == 0
    assert K == level(x.sum(axis=0), slots, loads, L)
    assert K >= min_level(demand, groups, lists, slots, loads, L)


def test_greedy_water_fills_one_group_evenly() -> None:
    # Fig. 3.10: loads 1, 3, 6 and 7 tasks -> 5, 5 and 7 (the two least loaded sites first)
    lists = ((0, 1, 2),)
    one = np.ones(3, dtype=np.int64)
    K, x = greedy(np.array([7]), np.array([0]), lists, one, np.array([1, 3, 6]), 1)
    assert x.tolist() == [[4, 3, 0]]
    assert K == 6


def forget() -> None:
    for memo in (balance_module._LEAST, balance_module._BALANCED, balance_module._FILLED):
        memo.clear()


@settings(max_examples=150, deadline=None)
@given(instances(), st.lists(st.integers(0, 20), min_size=7, max_size=7),
       st.lists(st.booleans(), min_size=7, max_size=7), st.integers(1, 3))
def test_remembered_estimates_are_the_ones_computed_afresh(
        inst: tuple, other: list[int], keep: list[bool], more: int) -> None:  # type: ignore[type-arg]
    """The memos key an estimate by all it depends on: after estimating the job on one set of
    loads (and with other slots), estimates on loads that agree only on some sites, or on
    the same loads, are those computed with empty memos."""
    demand, groups, lists, slots, loads = inst
    m = len(slots)
    loads2 = np.where(keep[:m], loads, np.array(other[:m], dtype=np.int64))
    slots2 = slots + more

    def estimates(s: IntArray, ld: IntArray) -> tuple[object, ...]:
        L = grid(s)
        K, x = balance(demand, groups, lists, s, ld, L)
        Kg, xg = greedy(demand, groups, lists, s, ld, L)
        return (min_level(demand, groups, lists, s, ld, L), K, x.tolist(),
                greedy_level(demand, groups, lists, s, ld, L), Kg, xg.tolist())

    fresh = []
    for s, ld in ((slots, loads), (slots, loads2), (slots2, loads2)):
        forget()
        fresh.append(estimates(s, ld))
    forget()
    for _ in range(2):
        assert [estimates(s, ld) for s, ld in ((slots, loads), (slots, loads2),
                                                (slots2, loads2))] == fresh


def test_remembered_allocations_are_copies() -> None:
    lists = ((0, 1),)
    one = np.ones(2, dtype=np.int64)
    args = (np.array([3]), np.array([0]), lists, one, np.zeros(2, dtype=np.int64), 1)
    for fn in (balance, greedy):
        _, x = fn(*args)
        x[:] = 99
        assert fn(*args)[1].sum() == 3


def reference_water_fill(demand: list[int], groups: list[int],
                         sites_of: tuple[tuple[int, ...], ...], u_all: list[int],
                         loads: list[int], L: int) -> tuple[int, list[tuple[int, int, int]]]:
    """Fig. 3.10 written plainly (one site or many alike, ratios divided where used)."""
    cur = loads[:]
    takes: list[tuple[int, int, int]] = []
    for i in sorted(range(len(groups)), key=lambda i: (-demand[i], i)):
        n = demand[i]
        if n == 0:
            continue
        S = sites_of[groups[i]]
        u = [float(u_all[j]) for j in S]
        c = [float(cur[j]) for j in S]
        o = sorted(range(len(S)), key=lambda k: c[k] / u[k])
        lam, uu, cc = 0.0, 0.0, 0.0
        for r, k in enumerate(o):
            uu += u[k]
            cc += c[k]
            lam = (n + cc) / uu
            if r + 1 == len(o) or lam <= c[o[r + 1]] / u[o[r + 1]]:
                break
        take = [max(int(lam * u[k] - c[k] + 1e-9), 0) for k in range(len(S))]
        while sum(take) > n:
            k = max(range(len(S)), key=lambda k: ((c[k] + take[k]) / u[k] if take[k] else -1))
            take[k] -= 1
        for _ in range(n - sum(take)):
            k = min(range(len(S)), key=lambda k: ((c[k] + take[k] + 1) / u[k], -c[k] / u[k], k))
            take[k] += 1
        for k, j in enumerate(S):
            if take[k]:
                takes.append((i, j, take[k]))
                cur[j] += take[k]
    used = {j for _, j, _ in takes}
    return max((-(-cur[j] * L // u_all[j]) for j in used), default=0), takes


@settings(max_examples=300, deadline=None)
@given(instances(), st.sampled_from([0, 10**6, 10**12, 10**15]), st.integers(1, 7))
def test_water_fill_is_fig_3_10_written_plainly(inst: tuple, shift: int,  # type: ignore[type-arg]
                                                  top: int) -> None:
    """The water-filling's shortcuts (one site, ratios divided once) give the same takes as
    the plain Fig. 3.10, also at loads large enough for its float slack to show."""
    demand, groups, lists, slots, loads = inst
    slots = np.minimum(slots * top, 7)
    args = (demand.tolist(), groups.tolist(), lists, slots.tolist(), (loads + shift).tolist(),
            grid(slots))
    assert _water_fill(*args) == reference_water_fill(*args)
