"""The LP call: optimal, infeasible and unbounded programs against scipy's ``linprog`` (the
same solver behind another wrapper), duals checked by strong duality, and no output."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import linprog

from psdsf_dist.policies.lp import solve_lp, sparse_rows


@st.composite
def programs(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                                       np.ndarray]:
    """Random bounded programs: minimise c x over x >= 0, A x <= b (A >= 0 with every column
    used, so x is bounded), and one equality row."""
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    m, n = draw(st.integers(1, 8)), draw(st.integers(1, 10))
    A = rng.uniform(0, 1, (m, n)) * (rng.uniform(0, 1, (m, n)) < 0.6)
    A[rng.integers(0, m, n), np.arange(n)] += 0.5  # every variable bounded by some row
    b = rng.uniform(0.5, 3, m)
    c = rng.uniform(-1, 1, n)
    A_eq = rng.uniform(0, 1, (1, n))
    b_eq = np.array([float(A_eq.sum()) * 0.01])  # reachable: x = 0.01 fits every row
    return c, A, b, A_eq, b_eq


@settings(max_examples=60, deadline=None)
@given(programs())
def test_optimal_programs_match_linprog(p: tuple[np.ndarray, ...]) -> None:
    c, A, b, A_eq, b_eq = p
    got = solve_lp(c, sp.csr_array(A), b, A_eq, b_eq)
    ref = linprog(c, A_ub=A, b_ub=b, A_eq=A_eq, b_eq=b_eq, bounds=(0, None), method="highs")
    assert ref.status == 0 and got.optimal
    assert got.objective == pytest.approx(ref.fun, abs=1e-8)
    x = got.x
    assert (x >= -1e-9).all() and (A @ x <= b + 1e-8).all()
    assert A_eq @ x == pytest.approx(b_eq, abs=1e-8)
    assert c @ x == pytest.approx(got.objective, abs=1e-8)
    # without the equality row, the inequality duals certify the optimum (strong duality:
    # b y = c x, y <= 0, A^T y <= c)
    alone = solve_lp(c, A, b)
    y = alone.ineq_duals
    assert len(y) == len(b) and (y <= 1e-9).all() and (A.T @ y <= c + 1e-8).all()
    assert b @ y == pytest.approx(alone.objective, abs=1e-8)


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 6), st.integers(1, 6), st.integers(0, 30))
def test_sparse_rows_hold_what_scipy_builds(seed: int, m: int, n: int, k: int) -> None:
    """The LP builders' matrices: the CSR arrays of scipy's csr_array((v, (r, c))) for
    triplets in any order, with repeated entries (summed, in another order than scipy's
    when three or more repeat) and explicit zeros (kept); and a
    program given as such rows solves as the same scipy matrix does."""
    rng = np.random.default_rng(seed)
    r, c = rng.integers(0, m, k), rng.integers(0, n, k)
    v = rng.choice([0.0, 1.0, -2.5, 0.3], k)
    got = sparse_rows(r, c, v, m)
    ref = sp.csr_array((v, (r, c)), shape=(m, n))
    assert got.indptr.tolist() == ref.indptr.tolist()
    assert got.indices.tolist() == ref.indices.tolist()
    assert got.data.tolist() == pytest.approx(ref.data.tolist(), rel=1e-12, abs=1e-12)
    if len(set(zip(r.tolist(), c.tolist(), strict=True))) == k:  # no repeats: bit for bit
        assert got.data.tolist() == ref.data.tolist()
    A = np.abs(ref.toarray()) + np.eye(m, n) + (np.arange(n) < 1)[None, :]
    cost = -rng.uniform(0.1, 1, n)
    nz_r, nz_c = np.nonzero(A)
    rows = sparse_rows(nz_r, nz_c, A[nz_r, nz_c], m)
    assert solve_lp(cost, rows, np.ones(m)).x.tolist() == solve_lp(
        cost, sp.csr_array(A), np.ones(m)).x.tolist()


def test_upper_bounds_are_kept() -> None:
    res = solve_lp(np.array([-1.0, -1.0]), np.array([[1.0, 1.0]]), np.array([10.0]),
                   upper=np.array([2.0, np.inf]))
    assert res.optimal and res.objective == pytest.approx(-10.0)
    assert res.x[0] <= 2.0 + 1e-9


def test_infeasible_and_unbounded_are_reported() -> None:
    infeasible = solve_lp(np.array([1.0]), np.array([[-1.0]]), np.array([-2.0]),
                          np.array([[1.0]]), np.array([1.0]))
    assert infeasible.status == "infeasible" and not infeasible.optimal
    unbounded = solve_lp(np.array([-1.0]), np.array([[-1.0]]), np.array([0.0]))
    assert unbounded.status == "unbounded"
    assert solve_lp(np.array([1.0, 2.0])).objective == 0.0  # no rows at all


def test_solving_writes_nothing(capfd: pytest.CaptureFixture[str]) -> None:
    """HiGHS logs to standard output unless told not to; a CLI's JSON must stay clean."""
    solve_lp(np.array([-1.0]), np.array([[1.0]]), np.array([1.0]))
    out, err = capfd.readouterr()
    assert out == "" and err == ""


def test_a_program_presolve_calls_infeasible_is_solved_without_it() -> None:
    """A progressive-filling LP of a SIG-AMF job simulation (Facebook trace, Zipf 2): feasible
    (scipy's HiGHS solves it), yet declared infeasible by HiGHS 1.16's presolve."""
    data = np.load(Path(__file__).parent / "data" / "presolve_infeasible_lp.npz")
    A = sp.csr_array((data["data"], data["indices"], data["indptr"]),
                     shape=tuple(data["shape"]))
    res = solve_lp(data["c"], A, data["b"], upper=data["upper"])
    assert res.optimal
    assert res.objective == pytest.approx(-0.15, abs=1e-8)
    assert (A @ res.x <= data["b"] + 1e-8).all()
