"""The experiments: benchmarks, studies and the papers' evaluations reproduced, run through one
entry point, ``python -m experiments`` (:mod:`experiments.__main__`)."""
