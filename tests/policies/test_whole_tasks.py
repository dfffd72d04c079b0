"""The whole-task filling engine: every whole-task policy gives integer, feasible, maximal
allocations within placement and backlogs; the fast engine picks the same pairs as a plain
re-computation of every criterion at every step; seeds determine ``rrr-psdsf``."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from psdsf_dist.model.random_scenarios import random_scenario
from psdsf_dist.model.scenario import Mode, Scenario, load_scenario
from psdsf_dist.policies import allocate
from psdsf_dist.policies.drfh import global_dominant_share
from psdsf_dist.policies.whole_task_policies import WHOLE_TASK_POLICIES, whole_task_allocation
from psdsf_dist.policies.whole_tasks import FIT_RTOL
from tests.conftest import EXAMPLES

IntArray = npt.NDArray[np.int64]
DETERMINISTIC = tuple(p for p in WHOLE_TASK_POLICIES if p != "rrr-psdsf")


@pytest.fixture(scope="module")
def kesidis() -> Scenario:
    return load_scenario(EXAMPLES / "kesidis_two_servers.yaml")


def consumption(sc: Scenario, mode: Mode) -> npt.NDArray[np.float64]:
    cons = sc.consumption_tensor(mode)
    return np.where((sc.gamma > 0).T[:, :, None], cons, 0.0)


def assert_whole_and_feasible(sc: Scenario, X: npt.NDArray[np.float64], mode: Mode) -> None:
    assert np.array_equal(X, np.round(X)), "not whole tasks"
    assert (X >= 0).all()
    assert (X[sc.gamma <= 0] == 0).all(), "a task on an ineligible server"
    x = X.sum(axis=1)
    assert (x <= np.floor(sc.max_tasks + 1e-9)).all(), "above the backlog"
    cap = sc.server_capacity(mode)
    used = np.einsum("nk,knm->km", X, consumption(sc, mode))
    assert (used <= cap * (1 + 2 * FIT_RTOL)).all(), "over a capacity"


def assert_maximal(sc: Scenario, X: npt.NDArray[np.float64], mode: Mode) -> None:
    """No user below its backlog has a task that fits on an eligible server."""
    cap = sc.server_capacity(mode)
    cons = consumption(sc, mode)
    residual = cap - np.einsum("nk,knm->km", X, cons)
    x = X.sum(axis=1)
    for n in range(sc.num_users):
        if x[n] + 1 > np.floor(sc.max_tasks[n] + 1e-9):
            continue
        for i in np.flatnonzero(sc.gamma[n] > 0):
            fits = (cons[i, n] <= residual[i] + FIT_RTOL * cap[i]).all()
            assert not fits, f"a task of user {n} still fits on server {i}"


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), K=st.integers(1, 8), N=st.integers(1, 5),
       M=st.integers(1, 3), mode=st.sampled_from(["rdm", "tdm"]))
def test_every_whole_task_policy_is_whole_feasible_and_maximal(
    seed: int, K: int, N: int, M: int, mode: Mode
) -> None:
    sc = random_scenario(np.random.default_rng(seed), K=K, N=N, M=M)
    for policy in WHOLE_TASK_POLICIES:
        out = allocate(sc, policy, mode, seed=seed % 1000)
        assert out.whole
        assert_whole_and_feasible(sc, out.allocation, mode)
        assert_maximal(sc, out.allocation, mode)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), draw=st.integers(0, 2**31 - 1))
def test_rrr_is_determined_by_its_seed(seed: int, draw: int) -> None:
    sc = random_scenario(np.random.default_rng(seed), K=6, N=4, M=2)
    a = allocate(sc, "rrr-psdsf", seed=draw).allocation
    b = allocate(sc, "rrr-psdsf", seed=draw).allocation
    assert np.array_equal(a, b)


def test_rrr_seeds_differ_somewhere(kesidis: Scenario) -> None:
    outcomes = {allocate(kesidis, "rrr-psdsf", seed=s).allocation.tobytes() for s in range(20)}
    assert len(outcomes) > 1


# -- the engine against a plain re-computation ----------------------------------------------------


def reference(sc: Scenario, policy: str, mode: Mode) -> IntArray:
    """Every criterion recomputed for every pair at every step, straight from the definitions
    (same floating-point expressions as the engine, so exact ties tie the same way)."""
    cons = consumption(sc, mode)
    cap = sc.server_capacity(mode)
    tol = FIT_RTOL * cap
    R = cap.copy()
    N, K = sc.gamma.shape
    X = np.zeros((N, K), dtype=np.int64)
    limit = np.floor(sc.max_tasks + 1e-9)
    phi = sc.weight
    g = sc.gamma * phi[:, None]
    inv = np.where(g > 0, 1.0 / np.where(g > 0, g, 1.0), 0.0)
    pool = np.where(cap.sum(axis=0) > 0, cap.sum(axis=0), 1.0)
    dem = cons.max(axis=0) / pool
    r0 = np.argmax(dem > 0, axis=1)
    d_dir = dem / np.maximum(dem[np.arange(N), r0], 1e-300)[:, None]
    mu = global_dominant_share(sc, respect_placement=policy != "bf-drf") / phi
    while True:
        x = X.sum(axis=1)
        fit = np.array([[sc.gamma[n, i] > 0 and x[n] < limit[n]
                         and bool((cons[i, n] <= R[i] + tol[i]).all())
                         for i in range(K)] for n in range(N)])
        if not fit.any():
            return X
        pairs = [(n, i) for n in range(N) for i in range(K) if fit[n, i]]
        if policy in ("psdsf-pf", "rpsdsf"):
            values = {(m, j): pair_value(policy, x[m], inv[m, j], cons[j, m], R[j], phi[m])
                      for m, j in pairs}
            n, i = min(pairs, key=lambda p: (values[p], p[0], p[1]))
        else:
            n = min({m for m, _ in pairs}, key=lambda m: (x[m] * mu[m], m))
            servers = [j for m, j in pairs if m == n]
            if policy == "drfh-first-fit":
                i = servers[0]
            else:
                fitness = {j: best_fit_h(d_dir[n], R[j] / pool, int(r0[n])) for j in servers}
                i = min(servers, key=lambda j: (fitness[j], j))
        X[n, i] += 1
        R[i] -= cons[i, n]


def pair_value(policy: str, x: int, inv: float, cons: npt.NDArray[np.float64],
               residual: npt.NDArray[np.float64], phi: float) -> float:
    """PS-DSF: ``x / (phi gamma)``; residual PS-DSF: ``x max_r c_r / R_r / phi``."""
    if policy == "psdsf-pf":
        a = inv
    else:
        with np.errstate(divide="ignore", invalid="ignore"):
            q = np.where(cons > 0, cons / np.where(residual > 0, residual, 0.0), 0.0)
        a = q.max() / phi
    return float(x * a) if x > 0 else 0.0


def best_fit_h(d_dir: npt.NDArray[np.float64], c: npt.NDArray[np.float64], r0: int) -> float:
    """DRFH's H: L1 distance of the task's and the residual's directions."""
    return float(np.abs(d_dir - c / c[r0]).sum())


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), K=st.integers(1, 7), N=st.integers(1, 4),
       M=st.integers(1, 3), mode=st.sampled_from(["rdm", "tdm"]))
def test_engine_picks_what_a_full_recomputation_picks(
    seed: int, K: int, N: int, M: int, mode: Mode
) -> None:
    sc = random_scenario(np.random.default_rng(seed), K=K, N=N, M=M)
    for policy in DETERMINISTIC:
        fast = whole_task_allocation(sc, policy, mode)
        assert np.array_equal(fast, reference(sc, policy, mode)), policy


def test_start_is_kept_and_filled(kesidis: Scenario) -> None:
    start = np.array([[3, 0], [0, 4]], dtype=np.int64)
    X = whole_task_allocation(kesidis, "psdsf-pf", "rdm", start=start)
    assert (X >= start).all()
    assert_maximal(kesidis, X.astype(float), "rdm")


def test_unknown_whole_task_policy(kesidis: Scenario) -> None:
    with pytest.raises(ValueError, match="not a whole-task policy"):
        whole_task_allocation(kesidis, "drf", "rdm")
