"""Observability shell: the Prometheus metrics of a run and the HTTP endpoint serving them."""
