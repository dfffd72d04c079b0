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

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
README = HERE / "README.md"
EXAMPLES = HERE.parent / "psdsf_dist" / "examples"


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


def update_readme(section: str, markdown: str) -> None:
    """Replace this script's section of experiments/README.md (between its markers)."""
    begin, end = f"<!-- begin {section} -->", f"<!-- end {section} -->"
    text = README.read_text(encoding="utf-8") if README.exists() else "# Experiments\n"
    block = f"{begin}\n{markdown.rstrip()}\n{end}"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        text = head + block + tail
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    write_atomic(README, text)
