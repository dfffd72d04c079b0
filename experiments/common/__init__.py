"""What the experiments share: where they read and write, result files and tables, the
report's sections, the lock-step harness."""
