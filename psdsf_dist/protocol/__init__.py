"""The distributed protocol, once for every driver: its configuration, the gossip layer, the
update rule, one server's state machine (:mod:`.node`) and wake-up schedule (:mod:`.schedule`),
membership and churn, and convergence bookkeeping.  Pure: no Ray, no wall clock; the simulator
and the Ray runtime are transports and clocks around it."""
