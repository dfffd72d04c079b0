"""What the simulator experiments share: result files, markdown tables, the README section."""

from __future__ import annotations

import csv
import math
import os
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from experiments.common.paths import README, RESULTS
from psdsf_dist.protocol.update_rule import DEFAULT_RULE

# rounds in a row the certificate must hold (or until the next event) for a run to count as
# converged in the studies: stricter than the commands' default (``DEFAULT_HOLD``, 10), so that
# a study's "converged" is not a long flicker
HOLD = 20

# (label, rule name, rule parameters): the rules every simulator study compares — the default
# and the two baselines
RULES: tuple[tuple[str, str, tuple[tuple[str, float], ...]], ...] = (
    ("best-response (naive)", "best-response", ()),
    ("damped a=0.5", "damped", (("a", 0.5),)),
    (f"{DEFAULT_RULE} (default)", DEFAULT_RULE, ()),
)


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_csv(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    if not rows:
        write_atomic(path, "")
        return
    fields = list(rows[0])
    for r in rows[1:]:
        fields += [k for k in r if k not in fields]
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields)
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if v is None else v) for k, v in r.items()})
    os.replace(tmp, path)


def table(head: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        lines.append("| " + " | ".join(str(c) for c in r) + " |")
    return "\n".join(lines)


def rounds_stat(values: Sequence[int | None], cap: int) -> dict[str, str]:
    """Median, 95th percentile and max of rounds-to-converge; a run that never converged
    counts as above the cap (shown ``>cap``)."""
    arr = np.array([math.inf if v is None else float(v) for v in values])
    if len(arr) == 0:
        return {"n": "0", "converged": "0/0", "median": "-", "p95": "-", "max": "-"}

    def show(x: float) -> str:
        return f">{cap}" if not math.isfinite(x) else f"{x:g}"

    return {
        "n": str(len(arr)),
        "converged": f"{int(np.isfinite(arr).sum())}/{len(arr)}",
        "median": show(float(np.quantile(arr, 0.5, method="higher"))),
        "p95": show(float(np.quantile(arr, 0.95, method="higher"))),
        "max": show(float(arr.max())),
    }


def update_readme(section: str, markdown: str, *, before: str | None = None) -> None:
    """Replace this script's section of experiments/README.md (between its markers); a new
    section goes before the first line starting with ``before`` if there is one, else last."""
    begin, end = f"<!-- begin {section} -->", f"<!-- end {section} -->"
    text = README.read_text(encoding="utf-8") if README.exists() else "# Experiments\n"
    block = f"{begin}\n{markdown.rstrip()}\n{end}"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        text = head + block + tail
    elif before is not None and f"\n{before}" in text:
        head, tail = text.split(f"\n{before}", 1)
        text = head + "\n" + block + "\n\n" + before + tail
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    write_atomic(README, text)


def publish(name: str, markdown: str) -> None:
    """Write ``results/<name>.md``, refresh the script's section of experiments/README.md and
    the overview, and print the report."""
    write_atomic(RESULTS / f"{name}.md", markdown + "\n")
    update_readme(name, markdown)
    update_overview()
    print(markdown)


def update_overview() -> None:
    update_readme("sim_overview", overview(), before="<!-- begin sim_")


OVERVIEW = """\
## Simulator and gossip: how the numbers below are made

`psdsf-dist simulate` (module `psdsf_dist.simulator.simulation`) runs K servers in one process
on a simulated clock: each is the protocol's server state machine (`psdsf_dist.protocol.node`,
the one the Ray actors host) with its own gossip and update-rule state; it acts every T seconds
(all at the same instants in lock-step, the worst case, or at random phases with jitter),
publishes its new column and starts push-pull exchanges with F random peers, G times per period.
Messages are delayed d seconds and lost with probability p; scenario events (users leaving and
joining, servers failing and joining, demand and weight changes) apply at their times.  After
every round the true allocation is checked with the PS-DSF certificate (rtol 1e-3); every column
a server adopts is checked against its capacities on the spot.  A run is a function of its seed.

Two gossip models: `scuttlebutt` simulates the protocol message by message (digests of
origin -> versions, deltas with only the columns the peer lacks; heartbeats carry the origin's
clock so a server knows how stale its totals are, and each column the signs of the origin's
latest change per user, so a server knows how many servers raised and lowered each user) —
faithful, but memory and time grow like K^2; `snapshot` gives every server the true totals (and
holder and mover counts) of 1 + d rounds before, the same for all — the hard case (many
servers on one stale snapshot), and the only affordable one at K = 12,583.
"""


def overview() -> str:
    """The overview section, with a summary of whatever result files exist."""
    lines = [OVERVIEW.rstrip(), ""]
    churn = _read(RESULTS / "sim_churn.csv")
    if churn:
        lines.append("Summary (from `results/*.csv`, regenerated with every script):")
        lines.append("")
        for setting in dict.fromkeys(r["setting"] for r in churn):
            for rule in dict.fromkeys(r["rule"] for r in churn):
                sel = [r for r in churn if r["setting"] == setting and r["rule"] == rule]
                if not sel or "default" not in rule:
                    continue
                cells = []
                for ev in ("start", "user u4 leaves", "user u4 joins"):
                    vals = [None if r[ev] == "" else int(float(r[ev])) for r in sel]
                    st = rounds_stat(vals, 10**9)
                    cells.append(f"{ev} {st['median']} (max {st['max']})".replace(
                        f">{10**9}", "never"))
                lines.append(f"- paper churn, {setting}, {rule}: " + "; ".join(cells)
                             + f" [{len(sel)} runs]")
    gossip = _read(RESULTS / "sim_gossip.csv")
    for value in dict.fromkeys(r["value"] for r in gossip if r["parameter"] == "runtime setting"):
        sel = [r for r in gossip if r["parameter"] == "runtime setting" and r["value"] == value]
        cells = []
        for ev in ("start", "user u4 leaves", "user u4 joins"):
            vals = [None if r[ev] == "" else int(float(r[ev])) for r in sel]
            st = rounds_stat(vals, 10**9)
            cells.append(f"{ev} {st['median']} (max {st['max']})".replace(
                f">{10**9}", "not within its phase"))
        lines.append(f"- paper churn, message-level gossip, the protocol defaults ({value}): "
                     + "; ".join(cells) + f" [{len(sel)} runs]")
    scaling = _read(RESULTS / "sim_scaling.csv")
    timing = [r for r in scaling if r.get("memoize") not in (None, "")]
    for r in timing:
        memo = "per class" if r["memoize"] == "True" else "per server"
        lines.append(f"- K = {r['K']}, N = {r['N']}: "
                     f"{float(r['seconds_per_round_median']):.2f} s per simulated round "
                     f"(rule computed {memo})")
    return "\n".join(lines)


def _read(path: Path) -> list[dict[str, str]]:
    if not path.exists() or path.stat().st_size == 0:
        return []
    with path.open(encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))
