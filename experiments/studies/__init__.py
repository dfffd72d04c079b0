"""Studies: how the protocol and the policies behave (convergence, settings, rules, inputs).
Outputs in ``experiments/results/``."""
