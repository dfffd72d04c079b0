"""Seeded random scenarios for tests and experiments.

Two families:

* :func:`random_scenario` — a small heterogeneous cluster (K 2..200, N 2..50, M 1..4 in the
  suites): servers drawn from a few classes of random capacities (a class may lack a resource, as
  server s2 of the paper's Fig. 1 lacks bandwidth), users with random demands (some resources not
  demanded), weights, placement constraints (a random subset of classes) and finite backlogs.
* :func:`google_cluster` — K machines sampled from the machine mix of Google's 2011 cluster trace
  (Reiss, Wilkes, Hellerstein, "Google cluster-usage traces", 2011; Table I of the DRFH paper):
  10 configurations, 12,583 machines, CPU and memory normalised to the largest machine.  With
  ``K = 12583`` the exact published counts are used.

Both return a validated :class:`~psdsf_dist.model.scenario.Scenario` built through
:meth:`Scenario.from_dict` (``*_doc`` variants return the document, e.g. to write a file).
Every user is eligible on at least one server, so no :class:`ScenarioWarning` is raised.
Randomness comes only from the ``numpy.random.Generator`` passed in.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from psdsf_dist.model.arrays import demand_gamma
from psdsf_dist.model.scenario import Scenario

FloatArray = npt.NDArray[np.float64]

# (machines, cpu, memory) of Google's 2011 trace, normalised to the largest machine.
GOOGLE_2011_MACHINES: tuple[tuple[int, float, float], ...] = (
    (6732, 0.50, 0.50),
    (3863, 0.50, 0.25),
    (1001, 0.50, 0.75),
    (795, 1.00, 1.00),
    (126, 0.25, 0.25),
    (52, 0.50, 0.12),
    (5, 0.50, 0.03),
    (5, 0.50, 0.97),
    (3, 1.00, 0.50),
    (1, 0.50, 0.06),
)
GOOGLE_2011_TOTAL = sum(c for c, _, _ in GOOGLE_2011_MACHINES)  # 12,583

RESOURCE_NAMES = ("cpu", "mem", "disk", "net")


def random_scenario_doc(
    rng: np.random.Generator,
    *,
    K: int,
    N: int,
    M: int,
    classes: int | None = None,
    placement_prob: float = 0.3,
    cap_prob: float = 0.2,
    missing_prob: float = 0.1,
) -> dict[str, Any]:
    """The document of a random scenario (see :func:`random_scenario`)."""
    if K < 1 or N < 1 or not 1 <= M <= len(RESOURCE_NAMES):
        raise ValueError(f"need K >= 1, N >= 1, 1 <= M <= {len(RESOURCE_NAMES)}")
    resources = list(RESOURCE_NAMES[:M])
    C = int(classes) if classes is not None else int(rng.integers(1, min(K, 6) + 1))
    C = max(1, min(C, K))
    # class sizes: every class gets at least one server
    counts = np.ones(C, dtype=int) + rng.multinomial(K - C, rng.dirichlet(np.ones(C)))
    caps = rng.uniform(0.25, 1.0, size=(C, M))
    # resource 0 exists everywhere, so a user demanding only it is eligible everywhere
    if M > 1:
        caps[:, 1:] *= rng.random((C, M - 1)) >= missing_prob
    servers = [
        {
            "name": f"c{c}",
            "count": int(counts[c]),
            "capacity": {r: round(float(caps[c, j]), 6) for j, r in enumerate(resources)},
        }
        for c in range(C)
    ]

    users: list[dict[str, Any]] = []
    for n in range(N):
        demand = rng.uniform(0.01, 0.2, size=M)
        if M > 1:
            demand *= rng.random(M) >= 0.2
            if not (demand > 0).any():
                demand[rng.integers(M)] = rng.uniform(0.01, 0.2)
        allowed = np.ones(C, dtype=bool)
        if C > 1 and rng.random() < placement_prob:
            allowed = rng.random(C) < 0.5
            if not allowed.any():
                allowed[rng.integers(C)] = True
        # eligible somewhere? (a demanded resource may be missing on every allowed class)
        g = demand_gamma(caps, demand[None, :])[0] * allowed
        if not (g > 0).any():
            demand = np.zeros(M)
            demand[0] = rng.uniform(0.01, 0.2)
            allowed = np.ones(C, dtype=bool)
            g = demand_gamma(caps, demand[None, :])[0]
        user: dict[str, Any] = {
            "name": f"u{n + 1}",
            "demand": {
                r: round(float(demand[j]), 6) for j, r in enumerate(resources) if demand[j] > 0
            },
            "weight": float(rng.choice([1.0, 1.0, 2.0, 3.0, 0.5])),
        }
        if not allowed.all():
            user["servers"] = [f"c{c}" for c in np.flatnonzero(allowed)]
        if rng.random() < cap_prob:
            # a backlog between a small share and about a fair share of what it could run
            solo = float((g * counts).sum())
            user["max_tasks"] = round(float(rng.uniform(0.05, 1.5)) * solo / N, 6)
        users.append(user)
    return {"name": f"random K={K} N={N} M={M}", "resources": resources, "servers": servers,
            "users": users}


def random_scenario(
    rng: np.random.Generator,
    *,
    K: int,
    N: int,
    M: int,
    classes: int | None = None,
    placement_prob: float = 0.3,
    cap_prob: float = 0.2,
    missing_prob: float = 0.1,
) -> Scenario:
    """A random heterogeneous scenario with K servers, N users and M resources.

    Servers come from ``classes`` classes (default: 1..6 at random) of random capacities in
    [0.25, 1]; resources other than the first are missing from a class with probability
    ``missing_prob``.  Users demand 0.01..0.2 of each resource (each resource but one left out with
    probability 0.2), have weights in {0.5, 1, 2, 3}, are restricted to a random subset of classes
    with probability ``placement_prob`` and have a finite backlog with probability ``cap_prob``.
    """
    doc = random_scenario_doc(
        rng, K=K, N=N, M=M, classes=classes, placement_prob=placement_prob,
        cap_prob=cap_prob, missing_prob=missing_prob,
    )
    return Scenario.from_dict(doc, "random")


def google_counts(rng: np.random.Generator, K: int) -> npt.NDArray[np.int64]:
    """Machines per Google configuration in a K-machine sample.

    ``K = 12583`` gives the published counts; otherwise a proportional split (largest
    remainders broken at random), so the mix is the trace's, not a noisy draw of it.
    """
    if K < 1:
        raise ValueError("K must be >= 1")
    share = np.array([c for c, _, _ in GOOGLE_2011_MACHINES], dtype=float) / GOOGLE_2011_TOTAL
    exact = share * K
    counts = np.floor(exact).astype(np.int64)
    rest = K - int(counts.sum())
    if rest:
        frac = exact - counts + rng.uniform(0, 1e-9, size=len(counts))
        counts[np.argsort(-frac)[:rest]] += 1
    return counts


def google_cluster_doc(
    rng: np.random.Generator,
    *,
    K: int,
    N: int,
    M: int = 2,
    placement_prob: float = 0.2,
    cap_prob: float = 0.0,
) -> dict[str, Any]:
    """The document of a Google-mix cluster (see :func:`google_cluster`)."""
    if M not in (2, 4):
        raise ValueError("M must be 2 (cpu, mem) or 4 (cpu, mem, disk, net)")
    resources = list(RESOURCE_NAMES[:M])
    counts = google_counts(rng, K)
    servers: list[dict[str, Any]] = []
    present: list[int] = []
    for j, ((_, cpu, mem), cnt) in enumerate(zip(GOOGLE_2011_MACHINES, counts, strict=True)):
        if cnt == 0:
            continue
        cap = {"cpu": cpu, "mem": mem}
        if M == 4:
            # the trace publishes no disk or network figures: synthetic, per configuration
            cap["disk"] = round(float(rng.uniform(0.25, 1.0)), 4)
            cap["net"] = round(float(rng.uniform(0.25, 1.0)), 4)
        servers.append({"name": f"g{j}", "count": int(cnt), "capacity": cap,
                        "labels": {"big_cpu": cpu >= 1.0, "big_mem": mem >= 0.75}})
        present.append(j)
    users: list[dict[str, Any]] = []
    for n in range(N):
        # tasks of a fraction of a machine, as in the trace's task requests (DRFH, section VI)
        demand = {r: round(float(rng.uniform(0.002, 0.05)), 5) for r in resources}
        user: dict[str, Any] = {"name": f"u{n + 1}", "demand": demand,
                                "weight": float(rng.choice([1.0, 1.0, 2.0, 4.0]))}
        if len(present) > 1 and rng.random() < placement_prob:
            chosen = [f"g{j}" for j in present if rng.random() < 0.5]
            user["servers"] = chosen or [f"g{present[0]}"]
        if rng.random() < cap_prob:
            user["max_tasks"] = round(float(rng.uniform(10, 1000)) * K / 1000, 3)
        users.append(user)
    return {"name": f"google 2011 mix K={K} N={N} M={M}", "resources": resources,
            "servers": servers, "users": users}


def google_cluster(
    rng: np.random.Generator,
    *,
    K: int,
    N: int,
    M: int = 2,
    placement_prob: float = 0.2,
    cap_prob: float = 0.0,
) -> Scenario:
    """K machines of the Google 2011 mix with N users (demands 0.2-5 % of the largest machine).

    ``M = 4`` adds synthetic disk and network capacities per configuration.  A user is restricted
    to a random subset of configurations with probability ``placement_prob`` and has a finite
    backlog with probability ``cap_prob``.
    """
    doc = google_cluster_doc(rng, K=K, N=N, M=M, placement_prob=placement_prob,
                             cap_prob=cap_prob)
    return Scenario.from_dict(doc, "google")
