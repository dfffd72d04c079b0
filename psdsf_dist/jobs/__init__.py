"""Jobs over time: a trace-driven discrete-event simulator of jobs whose tasks run on slots of
sites, and the job schedulers of Guan's thesis, chapter 3 (BTAWJ, BTAAJ, SCTA, ATA, ATA-Greedy,
and the SWAG baseline).  Pure modules, no Ray: ``workload`` (trace model, loaders, synthetic
placement and durations), ``balance`` (the flow-network task allocation), ``schedulers``,
``simulator`` and ``metrics``."""
