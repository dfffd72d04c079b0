"""The distributed allocator on Ray: one actor per server, gossip between them, a coordinator.

Layout
    Pure pieces (no Ray import): :mod:`.config` (:class:`RunConfig`), :mod:`.clock` (the
    injectable clock: real, or manual for tests and paced runs), :mod:`.churn` (membership and
    the user table servers adopt), :mod:`.server_core` (one server's update rule and gossip,
    transport-free), :mod:`.convergence` (per-event re-convergence times), :mod:`.from_ray`
    (``servers: from-ray``), :mod:`.placement`, :mod:`.names`.  The Ray shell:
    :mod:`.server_actor`, :mod:`.coordinator`, :mod:`.launcher` (the Python API; ``psdsf-dist
    run`` is its command line).

What runs where
    Each server actor loops every period (jittered): the update rule
    (:mod:`psdsf_dist.protocol.update_rule`) on the totals its
    :class:`~psdsf_dist.protocol.gossip.GossipState` gives, then push-pull exchanges with random
    peers — the simulator's round, over Ray calls. The coordinator keeps membership, hands peers to
    new servers, applies churn (scenario events at their scaled times, and :meth:`Run.apply
    <.launcher.Run.apply>`), and once per period reads every column to check feasibility and the
    PS-DSF certificate.  It never computes an allocation.

Faults
    A crashed server actor is restarted by Ray (``max_restarts``) and started again by the
    coordinator as a new gossip incarnation; its predecessor's column expires from the others'
    totals after ``ttl_periods``.  A restarted coordinator rebuilds membership, users and the
    event history from the newest table its servers hold.  Nodes leaving or joining a
    ``from-ray`` run are server failures and joins.

Paced runs
    With ``clock="manual"`` (``psdsf-dist run --paced``) the coordinator moves time on one
    period as soon as every server has done its part: the same actors and calls, rounds that do
    not depend on the machine's speed.  Tests use it to avoid sleeping real periods.
"""
