"""Admission: turning one server's column of the PS-DSF allocation into whole running tasks (pure).

:mod:`.shapes` maps a Ray task's resource shape onto the scenario's resources; :mod:`.rounding`
turns the fractional column ``X[:, i]`` into whole-task targets that meet it on average;
:mod:`.leases` grants each user expiring leases of task slots on the server's node without ever
claiming more than its capacity; :mod:`.backlog` says when a tenant's backlog must reach the
coordinator.  The Ray shell (the tenant's queue actor and the server actor's lease call) is in
:mod:`psdsf_dist.runtime`.
"""
