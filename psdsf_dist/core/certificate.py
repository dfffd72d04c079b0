"""The PS-DSF certificate: is an allocation PS-DSF (Theorem 1 in RDM, Theorem 2 in TDM)?

RDM (Theorem 1): the allocation is feasible, and for every user n below its cap and every server i
eligible for n there is a *bottleneck* r: ``D[n, r] > 0``, r saturated at i, and every user m
consuming r at i has ``V[m, i] <= V[n, i]`` with ``V[n, i] = x[n] / (phi[n] * gamma[n, i])``.
TDM (Theorem 2) is the same test with one resource per server, time, of capacity 1, consumed at
``1/gamma`` per task: every server with an eligible user below its cap is fully time-shared and
only users at the minimum V there get time.

Residual (scale-free, 0 when the condition holds exactly; holds iff ``residual <= rtol``) is the
largest of

* infeasibility: ``used / capacity - 1`` over servers and resources (1 for any use of a resource
  a server lacks, or any task on an ineligible server, or a negative amount);
* cap excess: ``x[n] / max_tasks[n] - 1``;
* bottleneck deficit: for each (n, i) needing a bottleneck, the smallest over the resources r n
  consumes at i of ``max(1 - used/capacity, (Vmax[i, r] - V[n, i]) / Vmax[i, r])``, where Vmax is
  the largest V of the users consuming r at i.  Both parts are relative and lie in [0, 1].  A
  user with a cap satisfies the condition by reaching it as well as by a bottleneck, so its
  deficit is at most its relative cap gap ``1 - x[n] / max_tasks[n]``: a user 0.8 % below its
  cap scores 0.008, not the ~1 of a bottleneck it will never have.  That keeps the residual
  continuous in the allocation and independent of ``rtol``, and changes no verdict: the
  minimum is at most ``rtol`` exactly when the gap is (the user counts as at its cap) or the
  bottleneck deficit is.

Amounts below ``DUST`` of a capacity count as zero, so round-off cannot invent a consumer.  An
allocation or totals with a non-finite entry (NaN, infinity) never holds: residual infinite.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from psdsf_dist.model.defaults import DEFAULT_MODE
from psdsf_dist.model.scenario import Mode, Scenario

FloatArray = npt.NDArray[np.float64]

DUST = 1e-12
DEFAULT_RTOL = 1e-9
MAX_REPORTED = 20
CHUNK = 1024


@dataclass(frozen=True)
class Certificate:
    holds: bool
    residual: float
    violations: tuple[str, ...] = field(default=())
    rtol: float = DEFAULT_RTOL

    def to_json(self) -> dict[str, object]:
        # JSON has no infinity: a residual that is not finite (an allocation that is not a
        # number of tasks) is written as null
        return {"holds": self.holds,
                "residual": self.residual if math.isfinite(self.residual) else None}


def certificate(
    scenario: Scenario,
    allocation: FloatArray,
    *,
    mode: Mode = DEFAULT_MODE,
    rtol: float = DEFAULT_RTOL,
    totals: FloatArray | None = None,
    explain: bool = True,
) -> Certificate:
    """Check the PS-DSF condition for an N x K allocation.

    ``totals`` lets a caller that holds only some columns (e.g. one class representative per
    class) pass the true user totals; by default they are the row sums of ``allocation``.
    """
    scenario.check_mode(mode)
    X = np.asarray(allocation, dtype=float)
    N, K = scenario.num_users, scenario.num_servers
    if X.shape != (N, K):
        raise ValueError(f"allocation must be {N} x {K}, got {X.shape}")
    x = X.sum(axis=1) if totals is None else np.asarray(totals, dtype=float)
    return certify_columns(
        scenario, X, x, np.arange(K), mode=mode, rtol=rtol, explain=explain
    )


def certify_columns(
    scenario: Scenario,
    X: FloatArray,
    x: FloatArray,
    servers: npt.NDArray[np.int64],
    *,
    mode: Mode,
    rtol: float = DEFAULT_RTOL,
    explain: bool = True,
) -> Certificate:
    """Certificate over the given servers' columns (``X[:, j]`` is server ``servers[j]``)."""
    broken = _non_finite(scenario, X, x, servers)
    if broken is not None:
        return Certificate(False, math.inf, (broken,), rtol)
    caps = scenario.max_tasks
    phi = scenario.weight
    capacity_all = scenario.server_capacity(mode)
    worst = 0.0
    messages: list[str] = []

    def note(score: float, text: str) -> None:
        nonlocal worst
        if score > worst:
            worst = score
        if explain and score > rtol and len(messages) < MAX_REPORTED:
            messages.append(text)

    # totals: negative amounts and cap excess
    neg = X < -DUST
    if neg.any():
        n, j = map(int, np.argwhere(neg)[0])
        where = scenario.server_names[servers[j]]
        note(1.0, f"user {scenario.user_names[n]}: negative tasks on {where}")
    with np.errstate(divide="ignore", invalid="ignore"):
        excess = np.where(np.isfinite(caps) & (caps > 0), x / caps - 1.0, 0.0)
        excess = np.where((caps == 0) & (x > DUST), 1.0, excess)
    for n in np.flatnonzero(excess > rtol)[:MAX_REPORTED]:
        note(
            float(excess[n]),
            f"user {scenario.user_names[n]}: {x[n]:.6g} tasks exceed its cap {caps[n]:.6g}",
        )
    worst = max(worst, float(excess.max(initial=0.0)))
    # how far each user is below its cap, relative (inf: no cap); see the residual above
    with np.errstate(divide="ignore", invalid="ignore"):
        cap_gap = np.where(np.isfinite(caps) & (caps > 0),
                           np.clip(1.0 - x / caps, 0.0, 1.0), np.where(caps == 0, 0.0, np.inf))

    for lo in range(0, len(servers), CHUNK):
        blk = servers[lo : lo + CHUNK]
        Xb = np.maximum(X[:, lo : lo + CHUNK].T, 0.0)  # K' x N
        gam = scenario.gamma[:, blk].T  # K' x N
        cons = _consumption(scenario, mode, blk)  # K' x N x M'
        cap = capacity_all[blk]  # K' x M'
        use = np.einsum("kn,knm->km", Xb, cons)
        # feasibility (relative to capacity; using a missing resource counts fully)
        with np.errstate(divide="ignore", invalid="ignore"):
            over = np.where(cap > 0, use / cap - 1.0, np.where(use > DUST, 1.0, 0.0))
        if over.max(initial=0.0) > rtol:
            k, r = map(int, np.unravel_index(np.argmax(over), over.shape))
            note(
                float(over[k, r]),
                f"server {scenario.server_names[blk[k]]}: {_res(scenario, mode, r)} over capacity "
                f"by {over[k, r]:.3g} (relative)",
            )
        # tasks on ineligible servers
        stray = (gam <= 0) & (Xb > DUST)
        if stray.any():
            k, n = map(int, np.argwhere(stray)[0])
            where = scenario.server_names[blk[k]]
            note(1.0, f"user {scenario.user_names[n]}: tasks on ineligible server {where}")

        # bottleneck test
        with np.errstate(divide="ignore", invalid="ignore"):
            V = np.where(gam > 0, x[None, :] / (phi[None, :] * gam), np.inf)  # K' x N
            unsat = np.where(cap > 0, np.clip(1.0 - use / cap, 0.0, 1.0), 1.0)  # K' x M'
        consumer = Xb[:, :, None] * cons > DUST * np.maximum(cap[:, None, :], DUST)
        Vmax = np.where(consumer, V[:, :, None], -np.inf).max(axis=1, initial=-np.inf)  # K' x M'
        with np.errstate(divide="ignore", invalid="ignore"):
            gap = (Vmax[:, None, :] - V[:, :, None]) / Vmax[:, None, :]
        gap = np.where(np.isfinite(gap) & (gap > 0), gap, 0.0)
        gap = np.where(np.isinf(Vmax)[:, None, :] & (Vmax[:, None, :] > 0), 1.0, gap)
        deficit = np.maximum(unsat[:, None, :], gap)
        deficit = np.where(cons > 0, deficit, np.inf).min(axis=2)  # K' x N
        deficit = np.where(np.isfinite(deficit), deficit, 1.0)
        deficit = np.where(gam > 0, np.minimum(deficit, cap_gap[None, :]), 0.0)
        # the words are only built when asked for: solvers call this on every sweep
        if explain and deficit.max(initial=0.0) > rtol and len(messages) < MAX_REPORTED:
            bad = np.argwhere(deficit > rtol)
            order = np.argsort(-deficit[bad[:, 0], bad[:, 1]], kind="stable")
            for k, n in bad[order][:MAX_REPORTED]:
                note(
                    float(deficit[k, n]),
                    _explain(
                        scenario, mode, int(blk[k]), int(n), cons[k, n], unsat[k], Vmax[k], V[k, n],
                        float(cap_gap[n]),
                    ),
                )
        worst = max(worst, float(deficit.max(initial=0.0)))
    return Certificate(worst <= rtol, float(worst), tuple(messages), rtol)


def _non_finite(scenario: Scenario, X: FloatArray, x: FloatArray,
                servers: npt.NDArray[np.int64]) -> str | None:
    """What is not a number of tasks (NaN, infinite) in the allocation or the totals, if any:
    such an allocation is never PS-DSF, whatever the comparisons below (NaN compares false)."""
    bad = np.argwhere(~np.isfinite(X))
    if len(bad):
        n, j = map(int, bad[0])
        return (f"user {scenario.user_names[n]}: {X[n, j]} tasks on "
                f"{scenario.server_names[servers[j]]} (not a number of tasks)")
    bad_total = np.flatnonzero(~np.isfinite(x))
    if len(bad_total):
        n = int(bad_total[0])
        return f"user {scenario.user_names[n]}: {x[n]} tasks in all (not a number of tasks)"
    return None


def _consumption(scenario: Scenario, mode: Mode, servers: npt.NDArray[np.int64]) -> FloatArray:
    if len(servers) and np.all(np.diff(servers) == 1):
        return scenario.consumption_tensor(mode, slice(int(servers[0]), int(servers[-1]) + 1))
    return np.stack([scenario.consumption(int(i), mode) for i in servers])


def _res(scenario: Scenario, mode: Mode, r: int) -> str:
    return "time" if mode == "tdm" else scenario.resources[r]


def _explain(
    scenario: Scenario,
    mode: Mode,
    server: int,
    user: int,
    cons: FloatArray,
    unsat: FloatArray,
    vmax: FloatArray,
    v: float,
    cap_gap: float,
) -> str:
    parts = []
    for r in np.flatnonzero(cons > 0):
        why = []
        if unsat[r] > 0:
            why.append(f"{unsat[r]:.3g} unused")
        if vmax[r] > v:
            why.append(f"a consumer has V={vmax[r]:.6g} > {v:.6g}")
        parts.append(f"{_res(scenario, mode, int(r))}: {', '.join(why) or 'ok'}")
    return (
        f"user {scenario.user_names[user]} at server {scenario.server_names[server]}: "
        f"no bottleneck ({'; '.join(parts)})"
        + (f", {cap_gap:.3g} below its cap" if math.isfinite(cap_gap) else "")
    )
