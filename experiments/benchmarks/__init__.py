"""Benchmarks: the allocator timed and measured against a baseline run in the same run (plain
Ray, one LP, sequential sweeps).  Outputs in ``experiments/results/``."""
