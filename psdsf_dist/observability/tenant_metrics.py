"""A tenant queue's metrics, through Ray's own metrics pipeline (``ray.util.metrics``).

Each tenant's queue (:mod:`psdsf_dist.runtime.tenant_queue`) runs in its own Ray worker, so its
series go out the way Ray's do: every Ray node's metrics agent exports them, and a Prometheus
that already scrapes Ray (its service-discovery file) gets them with no extra target.  Ray
prefixes each name with ``ray_``; the tags are ``user`` and ``server`` (the allocator's server
the tasks run on — with ``servers: from-ray`` one per Ray node, named ``node-<8 hex digits of
its id>``), a bounded set: users times nodes.  ``server`` is the label of the allocator's own
``psdsf_allocated_tasks``, so running and allocated tasks join per user and node.

==========================================  =========  ===============================
name (as Prometheus shows it)               type       meaning
==========================================  =========  ===============================
``ray_psdsf_tenant_queued_tasks``           gauge      tasks waiting in the queue
``ray_psdsf_tenant_running_tasks``          gauge      tasks running, per server (node)
``ray_psdsf_tenant_admitted_total``         counter    tasks launched, per server
``ray_psdsf_tenant_completed_total``        counter    tasks finished (value or error)
``ray_psdsf_tenant_retried_total``          counter    tasks re-queued after a system failure
``ray_psdsf_tenant_preempted_total``        counter    preemptible tasks stopped to make room
``ray_psdsf_tenant_queue_delay_seconds``    histogram  submission to launch
==========================================  =========  ===============================

The counters are added up in the queue and recorded once per report (a period; and when the
queue closes): recording through Ray costs tens of microseconds, which per task was a
measurable share of a busy queue's CPU.  The delay histogram gets every task's delay, kept
until then too, so that no task waits for its recording on its way to its caller.
"""

from __future__ import annotations

from collections import Counter

from ray.util import metrics

QUEUE_DELAY_BOUNDS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


class TenantMetrics:
    """The series of one tenant's queue (see the module docstring)."""

    def __init__(self, user: str) -> None:
        self.user = user
        keys = ("user", "server")
        self._queued = metrics.Gauge("psdsf_tenant_queued_tasks",
                                     "Tasks waiting in the tenant's queue.", tag_keys=("user",))
        self._running = metrics.Gauge("psdsf_tenant_running_tasks",
                                      "Tenant tasks running, per server (node).", tag_keys=keys)
        self._admitted = metrics.Counter("psdsf_tenant_admitted_total",
                                         "Tenant tasks launched, per server (node).", tag_keys=keys)
        self._completed = metrics.Counter("psdsf_tenant_completed_total",
                                          "Tenant tasks finished, per server (node).",
                                          tag_keys=keys)
        self._retried = metrics.Counter("psdsf_tenant_retried_total",
                                        "Tenant tasks re-queued after a system failure.",
                                        tag_keys=keys)
        self._preempted = metrics.Counter("psdsf_tenant_preempted_total",
                                          "Preemptible tenant tasks stopped to make room (and "
                                          "queued again).", tag_keys=keys)
        self._delay = metrics.Histogram("psdsf_tenant_queue_delay_seconds",
                                        "Seconds from submission to launch.",
                                        boundaries=list(QUEUE_DELAY_BOUNDS), tag_keys=("user",))

        self._counts: Counter[tuple[str, str]] = Counter()
        """(counter, server) -> what it gained since the last :meth:`flush`."""
        self._delays: list[float] = []
        """Queue delays since the last :meth:`flush`."""

    def _tags(self, server: str) -> dict[str, str]:
        return {"user": self.user, "server": server}

    def admitted(self, server: str, delay: float) -> None:
        self._counts["admitted", server] += 1
        self._delays.append(max(delay, 0.0))

    def completed(self, server: str) -> None:
        self._counts["completed", server] += 1

    def retried(self, server: str) -> None:
        self._counts["retried", server] += 1

    def preempted(self, server: str) -> None:
        self._counts["preempted", server] += 1

    def flush(self) -> None:
        """Record the counts and delays kept since the last flush."""
        series = {"admitted": self._admitted, "completed": self._completed,
                  "retried": self._retried, "preempted": self._preempted}
        for (kind, server), n in self._counts.items():
            series[kind].inc(float(n), tags=self._tags(server))
        self._counts.clear()
        tags = {"user": self.user}
        for delay in self._delays:
            self._delay.observe(delay, tags=tags)
        self._delays.clear()

    def backlog(self, queued: int, running: dict[str, int]) -> None:
        """Queued tasks, and running tasks per server (and the counts: :meth:`flush`)."""
        self._queued.set(float(queued), tags={"user": self.user})
        for server, n in running.items():
            self._running.set(float(n), tags=self._tags(server))
        self.flush()
