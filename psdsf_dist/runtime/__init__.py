"""The distributed allocator on Ray: one actor per server, gossip between them, a coordinator.

Layout
    Pure pieces (no Ray import): :mod:`.settings` (:class:`RunConfig`: the protocol's settings
    plus the run's own), :mod:`.clock` (the wall clock, and a manual discrete-event clock for
    paced runs and tests), :mod:`.observation` (the coordinator's observation step),
    :mod:`.from_ray` (``servers: from-ray``), :mod:`.placement`, :mod:`.names`.  The Ray shell:
    :mod:`.server_actor`, :mod:`.coordinator`, :mod:`.launcher` (the Python API; ``psdsf-dist
    run`` is its command line); the actors are called through the typed handles of
    :mod:`.handles`, and Ray's cluster state is read through :mod:`.ray_state`.

What runs where
    Each server actor hosts the protocol's servers (:class:`psdsf_dist.protocol.node.ServerNode`,
    the code the simulator runs): it wakes each when it asks, starts the exchanges its wake
    returned, and moves their messages over Ray.  The coordinator keeps membership, hands
    peers to new servers, applies churn (scenario events at their scaled times, and
    :meth:`Run.apply <.launcher.Run.apply>`), and once per period reads every column to check
    feasibility and the PS-DSF certificate.  It never computes an allocation.

Faults
    A crashed server actor is restarted by Ray (``max_restarts``) and started again by the
    coordinator as a new gossip incarnation, which supersedes its predecessor's column wherever
    it is heard (a server that stays down expires after ``ttl_periods``).  A restarted
    coordinator rebuilds membership, users and the event history from the newest table its
    servers hold.  Nodes leaving or joining a ``from-ray`` run are server failures and joins.

Paced runs
    With ``clock="manual"`` (``psdsf-dist run --paced``) the coordinator moves time on one
    period as soon as every server has done its part: the same actors and calls, rounds that do
    not depend on the machine's speed.  Tests use it to avoid sleeping real periods.
"""
