"""The allocation core: the water-fill, the PS-DSF server procedure, the certificate of
Theorems 1 and 2, the exact solver, the Eisenberg-Gale convex program, and allocation reports.
Pure numerical code on a :class:`~psdsf_dist.model.scenario.Scenario`."""
