"""The messages' constructors from the state they report, without Ray."""

from __future__ import annotations

from psdsf_dist.admission.tenant_queue_state import TenantQueueState
from psdsf_dist.runtime.messages import QueueStatus, hosted_status


def test_a_queues_status_counts_its_state() -> None:
    """Server a leases 1 slot until t = 100 on node n-a; three tasks submitted at t = 1: one
    runs there, two wait."""
    s = TenantQueueState("u", 1.0, 0.0)
    s.report_answered(0.0, 0, {"a": "n-a"}, None)
    s.ask_sent("a")
    s.ask_answered("a", 0.0, (1, 0, 100.0), 0.0)
    s.submit([s.new_task(3, 1.0) for _ in range(3)], 1.0)
    status = QueueStatus.of(s, 2.0, actors=0)
    assert (status.user, status.queued, status.running, status.slots) == ("u", 2, {"a": 1},
                                                                           {"a": 1})
    assert (status.admitted, status.present_servers, status.nodes) == (1, 1, {"a": "n-a"})
    assert QueueStatus.of(s, 200.0, actors=0).slots == {"a": 0}  # the lease ran out


def test_a_server_not_started_has_no_origin_epoch_or_rounds() -> None:
    assert hosted_status(None, False, "boom") == {"running": False, "origin": None, "rounds": 0,
                                                   "members": 0, "epoch": None, "error": "boom"}
