"""Linear programs over ``x >= 0``, solved by HiGHS: the one LP call every policy makes.

``solve_lp(c, A_ub, b_ub, A_eq, b_eq, upper)`` minimises ``c @ x`` subject to
``A_ub x <= b_ub``, ``A_eq x == b_eq`` and ``0 <= x <= upper`` and returns the solution, the
objective and the duals of the ``A_ub`` rows (HiGHS's row duals: for a minimisation, ``<= 0``
on a binding row, the objective's change per unit of ``b_ub``; ``scipy.optimize.linprog``'s
``ineqlin.marginals`` are the same numbers).

Why HiGHS directly rather than through ``scipy.optimize.linprog(method="highs")``, which runs
the same solver: the policies solve many small LPs (a progressive filling is one LP per
round, a job simulation thousands of fillings), and scipy's wrapper spends about 3 ms a call
checking options and converting inputs around a solve that takes under 1 ms at these sizes.
The model is handed to HiGHS as arrays (the binding's array form of ``passModel``, no
``HighsLp`` object whose fields are copied one by one), its matrix row-wise, the form the
callers build (HiGHS makes it column-wise itself; the solutions are the same bit for bit as
from a column-wise copy), and to one HiGHS instance per thread (:func:`_solver`).  The
binding's low-level ``_Highs`` class is used because the public ``Highs`` class installs
Python callbacks, which cost time on every call, and prints HiGHS's banner on standard output
before its options can be set; its methods are the same and typed.

Presolve: a program presolve finds infeasible or unbounded is solved again without it, and
that verdict stands.  HiGHS's presolve can declare a feasible program infeasible at tight
tolerances (a 52-row progressive-filling LP of a SIG-AMF job simulation, solved by HiGHS 1.12
and by 1.16 without presolve, was declared infeasible by 1.16's presolve; the test keeps it);
only programs that do not reach an optimum pay for the second solve.

Tolerances: HiGHS's feasibility tolerances default to 1e-7; rows here are scaled to about 1,
and tighter ones (:data:`FEASIBILITY_TOL`) keep, e.g., a frozen user of a progressive filling
from being handed ~1e-7 of its neighbours' share.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Literal, TypeAlias

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp
from highspy import HighsModelStatus, MatrixFormat, ObjSense
from highspy._core import _Highs

FloatArray = npt.NDArray[np.float64]
Int32Array = npt.NDArray[np.int32]


@dataclass(frozen=True)
class SparseRows:
    """A sparse matrix row by row (CSR arrays in HiGHS's index type): the form the LP
    builders assemble and HiGHS takes, made by :func:`sparse_rows` without a scipy matrix,
    whose construction and checks cost more than the solve itself at these sizes."""

    indptr: Int32Array
    indices: Int32Array
    data: FloatArray
    num_rows: int


def sparse_rows(rows: npt.NDArray[np.integer], cols: npt.NDArray[np.integer],
                values: FloatArray, num_rows: int) -> SparseRows:
    """The matrix with ``values`` at (``rows``, ``cols``), duplicates summed (in the order
    given), each row's columns ascending, explicit zeros kept: the arrays of scipy's
    ``csr_array((values, (rows, cols)))``."""
    order = np.lexsort((cols, rows))
    r, c, v = rows[order], cols[order], np.asarray(values, dtype=float)[order]
    if len(r) > 1:
        same = (r[1:] == r[:-1]) & (c[1:] == c[:-1])
        if same.any():
            first = np.flatnonzero(np.concatenate(([True], ~same)))
            r, c, v = r[first], c[first], np.add.reduceat(v, first)
    indptr = np.zeros(num_rows + 1, dtype=np.int32)
    np.cumsum(np.bincount(r, minlength=num_rows), out=indptr[1:])
    return SparseRows(indptr, c.astype(np.int32), v, num_rows)


Matrix: TypeAlias = sp.spmatrix | sp.sparray | FloatArray | SparseRows

FEASIBILITY_TOL = 1e-10
"""Primal and dual feasibility tolerance of every LP (module docstring)."""
Status = Literal["optimal", "infeasible", "unbounded", "failed"]


@dataclass(frozen=True)
class LpResult:
    """An LP's outcome; ``x``, ``objective`` and ``ineq_duals`` mean something only when
    ``status == "optimal"``."""

    status: Status
    message: str
    x: FloatArray
    objective: float
    ineq_duals: FloatArray
    """Duals of the ``A_ub`` rows, in their order."""

    @property
    def optimal(self) -> bool:
        return self.status == "optimal"


_STATUS: dict[HighsModelStatus, Status] = {
    HighsModelStatus.kOptimal: "optimal",
    HighsModelStatus.kInfeasible: "infeasible",
    HighsModelStatus.kUnbounded: "unbounded",
    HighsModelStatus.kUnboundedOrInfeasible: "unbounded",
}


def _rows(A: Matrix | None) -> SparseRows:
    """``A`` row by row (itself if it is already :class:`SparseRows`)."""
    if A is None:
        return SparseRows(np.zeros(1, dtype=np.int32), np.zeros(0, dtype=np.int32),
                          np.zeros(0), 0)
    if isinstance(A, SparseRows):
        return A
    M = A if isinstance(A, (sp.csr_array, sp.csr_matrix)) else sp.csr_array(A)
    return SparseRows(M.indptr.astype(np.int32), M.indices.astype(np.int32),
                      M.data.astype(float), M.shape[0])


_LOCAL = threading.local()
_ROWWISE = int(MatrixFormat.kRowwise)
_MINIMIZE = int(ObjSense.kMinimize)


def _solver() -> _Highs:
    """This thread's HiGHS instance, its options set once: building one costs about as much
    as handing it a model, and a model passed in replaces the last one with its solver state
    (no basis carries over; 7,800 LPs of a job simulation came out bit for bit the same as
    from a fresh instance each)."""
    h: _Highs | None = getattr(_LOCAL, "highs", None)
    if h is None:
        h = _Highs()
        h.setOptionValue("output_flag", False)
        h.setOptionValue("primal_feasibility_tolerance", FEASIBILITY_TOL)
        h.setOptionValue("dual_feasibility_tolerance", FEASIBILITY_TOL)
        _LOCAL.highs = h
    return h


def solve_lp(c: FloatArray, A_ub: Matrix | None = None, b_ub: FloatArray | None = None,
             A_eq: Matrix | None = None, b_eq: FloatArray | None = None,
             upper: FloatArray | None = None) -> LpResult:
    """Minimise ``c @ x`` over ``x >= 0`` with ``A_ub x <= b_ub``, ``A_eq x == b_eq`` and
    ``x <= upper`` (None: no such rows or bounds; ``upper`` may hold ``inf``)."""
    n = len(c)
    ub = _rows(A_ub)
    m_ub = ub.num_rows
    eq = _rows(A_eq)
    m_eq = eq.num_rows
    A = ub if not m_eq else SparseRows(
        np.concatenate([ub.indptr, eq.indptr[1:] + ub.indptr[-1]]),
        np.concatenate([ub.indices, eq.indices]), np.concatenate([ub.data, eq.data]),
        m_ub + m_eq)
    b_u = np.zeros(0) if b_ub is None else np.asarray(b_ub, dtype=float)
    b_e = np.zeros(0) if b_eq is None else np.asarray(b_eq, dtype=float)
    h = _solver()
    h.passModel(n, m_ub + m_eq, len(A.data), _ROWWISE, _MINIMIZE, 0.0,
                np.asarray(c, dtype=float),
                np.zeros(n), np.full(n, np.inf) if upper is None
                else np.asarray(upper, dtype=float),
                np.concatenate([np.full(m_ub, -np.inf), b_e]), np.concatenate([b_u, b_e]),
                A.indptr, A.indices, A.data, np.zeros(n, dtype=np.int32))
    h.run()
    model_status = h.getModelStatus()
    if model_status != HighsModelStatus.kOptimal:  # presolve's verdict is checked without it
        h.setOptionValue("presolve", "off")
        try:
            h.clearSolver()
            h.run()
            model_status = h.getModelStatus()
        finally:  # the instance serves this thread's later LPs
            h.setOptionValue("presolve", "choose")
    status = _STATUS.get(model_status, "failed")
    if status != "optimal":
        return LpResult(status, h.modelStatusToString(model_status), np.zeros(n), np.nan,
                        np.zeros(m_ub))
    solution = h.getSolution()
    x = np.asarray(solution.col_value, dtype=float)
    duals = np.asarray(solution.row_dual, dtype=float)[:m_ub]
    return LpResult("optimal", "optimal", x, float(h.getInfo().objective_function_value),
                    duals)
