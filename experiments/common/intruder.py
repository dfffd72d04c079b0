"""Work outside the allocator, for benchmarks and tests: another Ray driver (plain Ray, not a
tenant) whose 1-CPU actors hold CPUs of one node.

Its own process, so its actors belong to a job no tenant names — as a plain-Ray user's would
on a shared cluster (``psdsf_dist.admission.unmanaged`` tells work apart by job).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

INTRUDER = """
import sys, time, ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
ray.init(address={address!r}, log_to_driver=False)

@ray.remote(num_cpus=1)
class Hog:
    def ready(self):
        return True

hogs = [Hog.options(scheduling_strategy=NodeAffinitySchedulingStrategy({node!r}, soft=False))
        .remote() for _ in range({cpus!r})]
waiting = [h.ready.remote() for h in hogs]
while waiting:
    done, waiting = ray.wait(waiting, num_returns=1)
    print("placed", time.time(), flush=True)
sys.stdin.read()  # held until its input closes
"""


class Intruder:
    """Another Ray driver (plain Ray, not a tenant) whose ``cpus`` 1-CPU actors are pinned to
    ``node``; :attr:`placed` holds the wall-clock time each was placed, as the driver saw it.
    Its actors go with it when :meth:`close` ends it."""

    def __init__(self, address: str, node: str, cpus: int = 4) -> None:
        self.cpus = cpus
        self.proc = subprocess.Popen(
            [sys.executable, "-c", INTRUDER.format(address=address, node=node, cpus=cpus)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=os.environ.copy())
        self.placed: list[float] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("placed"):
                self.placed.append(float(line.split()[1]))

    def close(self) -> None:
        """End the driver (its input closes) and wait for it; again: nothing."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        self.proc.wait(timeout=120)
        self.reader.join(timeout=10)

    def wait_placed(self, seconds: float) -> bool:
        """Whether every actor was placed within ``seconds``."""
        end = time.monotonic() + seconds
        while len(self.placed) < self.cpus and time.monotonic() < end:
            time.sleep(0.05)
        return len(self.placed) == self.cpus
