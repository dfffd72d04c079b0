"""The papers' small worked figures, every registered policy beside the paper's numbers.

* PS-DSF paper, Fig. 1 and Fig. 2/3 (ORACLES 1, 2; ``paper_fig1.yaml``, ``paper_fig2.yaml``);
* DRFH paper, Fig. 1-3: two servers (2 CPU / 12 GB and 12 CPU / 2 GB), user 1 tasks of
  (0.2 CPU, 1 GB), user 2 of (1 CPU, 0.2 GB); per-server DRF gives each 6 tasks (5 + 1), DRFH
  each 10 (one server each);
* TSF-ER paper, Fig. 2 (ORACLES 4, ``tsfer_fig2.yaml``): one external resource;
* Kesidis et al. (ORACLES 5, ``kesidis_two_servers.yaml``): whole-task progressive filling, and
  Tables II-V, the randomised round robin over 2,000 seeds (and a server drawn each step).

The policy list is the registry's (:data:`psdsf_dist.policies.POLICIES`): a policy registered
later appears in every table without a change here.  A policy that refuses a scenario (e.g.
``tsf-er`` without external resources) shows the reason in one line.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import numpy.typing as npt

from experiments.common.paths import EXAMPLES
from experiments.common.repro_common import Section, section_main
from experiments.common.sim_common import table
from psdsf_dist.errors import PsdsfError
from psdsf_dist.model.scenario import Scenario, load_scenario
from psdsf_dist.policies import POLICIES, allocate, models_external, without_external
from psdsf_dist.policies.whole_task_policies import SERVER_ORDERS, rrr_drf, rrr_psdsf, rrr_tsf

FloatArray = npt.NDArray[np.float64]

DRFH_FIG1 = {
    "resources": ["cpu", "mem"],
    "servers": [{"name": "s1", "capacity": {"cpu": 2, "mem": 12}},
                {"name": "s2", "capacity": {"cpu": 12, "mem": 2}}],
    "users": [{"name": "u1", "demand": {"cpu": 0.2, "mem": 1}},
              {"name": "u2", "demand": {"cpu": 1, "mem": 0.2}}],
}

# paper (or ORACLES) values: policy -> user -> per-server tasks
FIGURES: tuple[tuple[str, str, dict[str, dict[str, list[float]]], str], ...] = (
    ("PS-DSF paper, Fig. 1 (ORACLES 1)", "paper_fig1",
     {"psdsf": {"u1": [3, 0], "u2": [3, 0], "u3": [0, 6]},
      "c-drfh": {"u1": [60 / 23, 0], "u2": [72 / 23, 0], "u3": [6 / 23, 6]},
      "tsf": {"u1": [2, 0], "u2": [2, 0], "u3": [2, 6]}},
     "The paper prints u3's splits in the wrong order (\"6 + 0.261\", \"6 + 2\"); ORACLES 1 "
     "gives them per server."),
    ("PS-DSF paper, Fig. 2/3 (ORACLES 2)", "paper_fig2",
     {"psdsf": {"u1": [3.6, 0], "u2": [3.6, 0], "u3": [0, 8], "u4": [0, 8]}},
     "RDM PS-DSF; the paper misprints u4's virtual dominant share at s1 (8/9, not 1)."),
    ("DRFH paper, Fig. 1-3", "drfh_fig1",
     {"per-server-drf": {"u1": [5, 1], "u2": [1, 5]},
      "drfh": {"u1": [10, 0], "u2": [0, 10]}},
     "Fig. 2 is per-server DRF (6 tasks each), Fig. 3 DRFH (10 each, global dominant share "
     "5/7)."),
    ("TSF-ER paper, Fig. 2 (ORACLES 4)", "tsfer_fig2",
     {"tsf-er": {"u1": [0, 30 / 7], "u2": [5, 5 / 14]},
      "mnw": {"u1": [0, 5], "u2": [5, 0]}, "cru": {"u1": [0, 5], "u2": [5, 0]},
      "tsf": {"u1": [0, 5], "u2": [5, 0]}},
     "The paper draws CRU and MNW (Fig. 2(a): 5 tasks each, one server each); TSF-ER's "
     "allocation is ORACLES 4's derivation (the paper gives no figure for it); `tsf` is TSF "
     "without the external resource.  Only `tsf-er` models the link: the others may use "
     "more of it than exists (the link use column)."),
    ("Kesidis et al. 2017, Table II (ORACLES 5), whole tasks", "kesidis_two_servers",
     {"psdsf-pf": {"f1": [19, 0], "f2": [2, 20]}, "rpsdsf": {"f1": [19, 2], "f2": [2, 19]},
      "bf-drf": {"f1": [20, 2], "f2": [0, 19]}},
     "Parameters inferred by ORACLES 5 (the paper's text lost its formulas).  BF-DRF: the "
     "DRFH paper's best-fit H gives 42 tasks where the paper prints 41 ([20, 2], [0, 19]); no "
     "reading of best fit tried gives 41.  The divisible policies are shown for scale."),
)


def load(name: str) -> Scenario:
    if name == "drfh_fig1":
        return Scenario.from_dict(DRFH_FIG1, "DRFH Fig. 1")
    return load_scenario(EXAMPLES / f"{name}.yaml")


def _cell(values: Any) -> str:
    return " + ".join(f"{v:.3f}".rstrip("0").rstrip(".") for v in values)


def figure_table(sc: Scenario, paper: dict[str, dict[str, list[float]]]) -> str:
    rows = []
    for policy in POLICIES:
        env = sc if models_external(policy) else without_external(sc)
        try:
            out = allocate(env, policy)
        except PsdsfError as err:
            rows.append([policy, "-", f"refused: {err}", "", ""])
            continue
        X = out.allocation
        link = ""
        if sc.external_resources:
            use = X.sum(axis=1) @ sc.external_demand / sc.external_capacity
            link = " / ".join(f"{100 * u:.0f}%" for u in np.atleast_1d(use))
        for n, u in enumerate(sc.user_names):
            ref = paper.get(policy, {}).get(u)
            ours = X[n]
            diff = "" if ref is None else (
                "same" if np.allclose(ours, ref, atol=1e-6) else
                f"differs by {np.abs(ours - np.array(ref)).max():.3g}")
            rows.append([policy if n == 0 else "", u, "-" if ref is None else _cell(ref),
                         f"{_cell(ours)} = {ours.sum():.3f}", diff,
                         *([link if n == 0 else ""] if sc.external_resources else [])])
    for policy in paper:
        if policy not in POLICIES:
            rows.append([policy, "", "see paper", "not registered on this branch", ""])
    head = ["policy", "user", "paper (per server)", "ours (per server = total)", "match"]
    if sc.external_resources:
        head.append("link use")
    return table(head, rows)


RRR_TRIALS = 2000  # the paper ran 200; ten times as many make our side's noise small beside its
RRR_TRIALS_QUICK = 200
# Kesidis et al. Tables II-V: tasks (f1@s1, f1@s2, f2@s1, f2@s2) and unused capacity
# ((s1, cpu), (s1, mem), (s2, cpu), (s2, mem)), means and sample standard deviations over 200 RRR
# trials (DRF/TSF as read by ORACLES 5); the deterministic rows have no deviations.
KESIDIS_PAPER: dict[str, dict[str, list[float]]] = {
    "II": {"drf": [6.55, 4.69, 4.69, 6.55], "tsf": [6.5, 4.7, 4.7, 6.5],
           "rrr-psdsf": [19.44, 1.15, 1.07, 19.42], "bf-drf": [20, 2, 0, 19],
           "psdsf-pf": [19, 0, 2, 20], "rpsdsf": [19, 2, 2, 19]},
    "III": {"drf": [2.31, 0.46, 0.46, 2.31], "tsf": [2.29, 0.46, 0.46, 2.29],
            "rrr-psdsf": [0.59, 0.99, 1, 0.49]},
    "IV": {"drf": [62.56, 0, 0, 62.56], "tsf": [62.8, 0, 0, 62.8],
           "rrr-psdsf": [1.8, 4.6, 4.86, 1.92], "bf-drf": [0, 10, 1, 3],
           "psdsf-pf": [3, 1, 10, 0], "rpsdsf": [3, 1, 1, 3]},
    "V": {"drf": [11.09, 0, 0, 11.09], "tsf": [10.99, 0, 0, 10.99],
          "rrr-psdsf": [0.59, 0.99, 1, 0.49]},
}
RANDOMISED = {"drf": rrr_drf, "tsf": rrr_tsf, "rrr-psdsf": rrr_psdsf}
ORDER_TEXT = {"round-robin": "a random permutation per round", "each-step": "a random server "
              "each step"}


def kesidis_runs(sc: Scenario, trials: int) -> dict[tuple[str, str], tuple[FloatArray, FloatArray]]:
    """(scheduler, server order) -> (trials x 4 tasks, trials x 4 unused capacities); the
    deterministic schedulers once, under order "-"."""
    def unused(X: FloatArray) -> FloatArray:
        return np.asarray((sc.capacity - X.T @ sc.demand).ravel())

    out: dict[tuple[str, str], tuple[FloatArray, FloatArray]] = {}
    for name, rule in RANDOMISED.items():
        for order in SERVER_ORDERS:
            tasks = np.array([rule(sc, "rdm", np.random.default_rng(seed), order=order)
                              for seed in range(trials)], dtype=float)
            out[name, order] = (tasks.reshape(len(tasks), -1),
                                np.array([unused(X) for X in tasks]))
    for name in ("bf-drf", "psdsf-pf", "rpsdsf"):
        X = allocate(sc, name).allocation
        out[name, "-"] = (X.reshape(1, -1), unused(X)[None, :])
    return out


def kesidis_tables(trials: int = RRR_TRIALS) -> str:
    """Kesidis et al.'s Tables II-V beside ours: RRR as the paper defines it (a permutation of
    the servers per round) and the per-step draw, ``trials`` seeded trials each."""
    sc = load("kesidis_two_servers")
    runs = kesidis_runs(sc, trials)
    parts = []
    what = {"II": ("mean tasks", 0, "mean"), "III": ("standard deviation of tasks", 0, "std"),
            "IV": ("mean unused capacity", 1, "mean"),
            "V": ("standard deviation of unused capacity", 1, "std")}
    for tab, (title, k, stat) in what.items():
        cols = ("f1@s1 + f1@s2 + f2@s1 + f2@s2" if k == 0 else
                "s1 cpu + s1 mem + s2 cpu + s2 mem")
        rows = []
        for (name, order), data in runs.items():
            paper = KESIDIS_PAPER[tab].get(name)
            if paper is None:
                continue
            v = data[k]
            ours = v.mean(axis=0) if stat == "mean" else (
                v.std(axis=0, ddof=1) if len(v) > 1 else np.zeros(v.shape[1]))
            row = [name, ORDER_TEXT.get(order, "deterministic"), _cell(paper), _cell(ours)]
            if stat == "mean":
                se = (v.std(axis=0, ddof=1) / np.sqrt(len(v)) if len(v) > 1
                      else np.zeros(v.shape[1]))
                dev = np.abs(ours - paper)
                row.append("exact" if len(v) == 1 and dev.max() < 1e-9 else
                           f"{dev.max():.2f}" if len(v) == 1 else
                           f"{(dev / np.maximum(se, 1e-12)).max():.1f} s.e.")
            if tab == "II":
                row.insert(4, f"{sum(paper):.2f} / {ours.sum():.2f}")
            rows.append(row)
        head = ["scheduler", "server order", f"paper ({cols})", "ours"]
        if tab == "II":
            head.append("total paper / ours")
        if stat == "mean":
            head.append("largest |ours - paper|")
        parts += [f"**Kesidis et al. Table {tab}: {title}** (paper: 200 trials; ours: {trials} "
                  "seeded trials of the randomised schedulers; s.e.: our standard error):", "",
                  table(head, rows), ""]

    def drf_text(order: str) -> str:
        X = runs["drf", order][0]
        return (f"{X[:, 0].mean():.2f} tasks of f1 on s1 (deviation "
                f"{X[:, 0].std(ddof=1):.2f}, total {X.sum(axis=1).mean():.2f})")

    def asym(order: str) -> str:
        X = runs["rrr-psdsf", order][0]
        return f"{X[:, 1].mean():.2f} / {X[:, 2].mean():.2f}"

    parts.append(
        "RRR is the paper's randomised round robin: every server that still takes a task is "
        "visited once per round, in a random order drawn anew each round (`rrr-psdsf`, "
        "`rrr_drf`, `rrr_tsf`); the rows \"a random server each step\" draw the server "
        "uniformly at every step instead (`order=\"each-step\"`), which the paper does not "
        f"describe.  Read as written, RRR gives DRF {drf_text('round-robin')} against the "
        "paper's 6.55 (2.31, 22.48); the per-step draw gives "
        f"{drf_text('each-step')}.  RRR-PS-DSF's f1@s2 / f2@s1 are {asym('round-robin')} "
        f"under RRR (symmetric, as a permutation treats both servers alike) and "
        f"{asym('each-step')} under the per-step draw, against the paper's asymmetric 1.15 / "
        "1.07.  So the paper's numbers look like a per-step draw, not the per-round "
        "permutation its text describes; the registered `rrr-psdsf` follows the text.  Table V "
        "repeats Table III's RRR-PS-DSF deviations (0.59, 0.99, 1, 0.49) although unused "
        "capacity moves by 1 or 5 units per task, so its deviations cannot equal the tasks': "
        "a copy in the paper; its (s1, mem) mean 4.6 contradicts Table II's means too "
        "(30 - 19.44 - 5 x 1.07 = 5.21).  BF-DRF: see the whole-task table above (DRFH's "
        "best-fit rule gives 42 tasks where the paper prints 41).")
    return "\n".join(parts)


def run(quick: bool) -> Section:
    t0 = time.perf_counter()
    parts = []
    for title, name, paper, note in FIGURES:
        sc = load(name)
        servers = ", ".join(sc.server_names)
        parts += [f"**{title}** (servers {servers}; cells are tasks per server):", "",
                  figure_table(sc, paper), "", note, ""]
    parts += [kesidis_tables(RRR_TRIALS_QUICK if quick else RRR_TRIALS)]
    return Section("The papers' worked figures", "\n".join(parts), time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> None:
    section_main(__doc__, run, argv)
