"""The distributed allocator on Ray: one actor per server, gossip between them, a coordinator.

Pure pieces (no Ray import): :mod:`.config`, :mod:`.clock`, :mod:`.churn`, :mod:`.server_core`,
:mod:`.convergence`, :mod:`.from_ray`, :mod:`.placement`.  The Ray shell:
:mod:`.server_actor`, :mod:`.coordinator`, :mod:`.launcher` (the Python API).
"""
