"""A long run of the command-line fuzzer of the test suite (``tests/cli/fuzz_cases.py``).

Regenerate (writes ``experiments/results/fuzz.md`` and ``fuzz.csv``)::

    .venv/bin/python -m experiments run fuzz_inputs --minutes 30

The same hostile cases as the CI test (mutated scenario documents in YAML and JSON, extreme and
ill-typed numbers, names that do not print, events, nesting, YAML aliases, hostile option values
of every subcommand), plus valid but costly option values (``--rounds 20000``, ``--trials
1000``...).  Each case runs in this process and must end as a checked result or one line with
exit 2 (``verdict``) within ``--case-seconds``; the process runs under a 4 GiB address-space
limit, so a memory blow-up is a MemoryError finding.  Cases are generated without shrinking,
in batches of fresh seeds, until the time is up.  Findings are listed with the case that gave
them.
"""

from __future__ import annotations

import argparse
import csv
import resource
import tempfile
import time
from collections import Counter
from pathlib import Path

from hypothesis import HealthCheck, Phase, given, seed, settings

from experiments.common.paths import RESULTS
from tests.cli.fuzz_cases import Case, cases, run_case, verdict

BATCH = 100
MEMORY_BYTES = 4 * 2**30


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--case-seconds", type=float, default=60.0)
    parser.add_argument("--out", default=str(RESULTS / "fuzz"))
    args = parser.parse_args(argv)
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
    stop = time.monotonic() + 60 * args.minutes
    began = time.monotonic()
    counts: Counter[str] = Counter()
    outcomes: Counter[str] = Counter()
    findings: list[tuple[str, Case]] = []
    slowest: list[tuple[float, str]] = []
    work = Path(tempfile.mkdtemp(prefix="psdsf-fuzz-"))

    def one(case: Case) -> None:
        if time.monotonic() > stop:
            return
        outcome = run_case(case, work)
        problem = verdict(case, outcome, args.case_seconds)
        counts[case.command] += 1
        outcomes["finding" if problem else f"exit {outcome.status}"] += 1
        slowest.append((outcome.seconds, f"{case.command} {' '.join(case.options)}"))
        slowest.sort(reverse=True)
        del slowest[5:]
        if problem:
            findings.append((problem, case))
            print(ascii(f"FINDING: {problem} -- {case.command} {case.options} "
                        f"{case.document if case.trace is None else case.trace}")[:2000],
                  flush=True)

    batch = 0
    while time.monotonic() < stop:
        run = settings(max_examples=BATCH, deadline=None, database=None,
                       phases=[Phase.generate],
                       suppress_health_check=list(HealthCheck))(given(case=cases(big=True))(one))
        seed(batch)(run)()
        batch += 1
        print(f"{sum(counts.values())} cases, {len(findings)} findings, "
              f"{time.monotonic() - began:.0f} s", flush=True)
    write(Path(args.out), counts, outcomes, findings, slowest, time.monotonic() - began)


def write(out: Path, counts: Counter[str], outcomes: Counter[str],
          findings: list[tuple[str, Case]], slowest: list[tuple[float, str]],
          seconds: float) -> None:
    total = sum(counts.values())
    lines = [
        "# Command-line fuzzing (experiments/studies/fuzz_inputs.py)", "",
        f"{total:,} cases in {seconds / 60:.1f} minutes on a shared 2-core machine (loaded by "
        "other work), each run in process under a 4 GiB address-space limit; every outcome must "
        "be a checked result (exit 0; a holding certificate for `solve --policy psdsf`) or one "
        "line with exit 2.", "",
        "| command | cases |", "|---|---|",
        *(f"| {c} | {n:,} |" for c, n in sorted(counts.items())), "",
        "| outcome | cases |", "|---|---|",
        *(f"| {o} | {n:,} |" for o, n in sorted(outcomes.items())), "",
        "Slowest cases (seconds, command line):", "",
        *(f"- {s:.1f} s: `{c}`" for s, c in slowest), "",
        f"Findings: {len(findings)}", "",
    ]
    for problem, case in findings[:50]:
        lines.append(f"- {problem} — `{case.command} {' '.join(case.options)!a}` "
                     f"({'JSON' if case.as_json else 'YAML'}, aliases {case.aliases}, "
                     f"nest {case.nest}): `{ascii(case.document)[:300]}`")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n", encoding="utf-8",
                                      errors="backslashreplace")
    with out.with_suffix(".csv").open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["kind", "name", "count"])
        for c, n in sorted(counts.items()):
            w.writerow(["command", c, n])
        for o, n in sorted(outcomes.items()):
            w.writerow(["outcome", o, n])
        w.writerow(["findings", "", len(findings)])
