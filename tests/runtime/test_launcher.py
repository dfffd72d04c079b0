"""A run's life cycle in a Ray cluster: its name, a live name refused, the leftovers of a
driver killed with ``kill -9`` replaced by a new run of its name, and server actors that end
themselves once their run's coordinator is gone for good (on the shared local Ray)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable

import pytest
import ray

from psdsf_dist.protocol.config import ProtocolConfig
from psdsf_dist.runtime.launcher import RunExistsError, launch
from psdsf_dist.runtime.names import NAMESPACE, RunNameError, run_actor_names
from psdsf_dist.runtime.settings import RunConfig
from psdsf_dist.runtime.tenant import Tenant

pytestmark = pytest.mark.usefixtures("ray_session")

TENANTS = {"servers": "from-ray", "tenants": True, "resources": ["CPU", "memory"]}
FAST = RunConfig(ProtocolConfig(period=0.25))


def actors_of(run_id: str) -> set[str]:
    return set(run_actor_names(run_id, list(ray.util.list_named_actors(all_namespaces=True))))


def wait_for(what: Callable[[], bool], seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if what():
            return True
        time.sleep(0.1)
    return what()


def test_a_new_run_replaces_what_a_killed_driver_left() -> None:
    script = textwrap.dedent(f"""
        import os, signal, ray
        from psdsf_dist.protocol.config import ProtocolConfig
        from psdsf_dist.runtime.launcher import launch
        from psdsf_dist.runtime.settings import RunConfig
        ray.init(address={ray.get_runtime_context().gcs_address!r}, log_to_driver=False)
        launch({TENANTS!r}, RunConfig(ProtocolConfig(period=0.25)), run_id="phoenix")
        print("up", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120, env=os.environ.copy())
    assert "up" in out.stdout, out.stderr[-2000:]
    began = time.monotonic()
    run = launch(TENANTS, FAST, run_id="phoenix")  # no ActorAlreadyExistsError
    try:
        tenant = Tenant.connect("reborn", run_id="phoenix")
        assert ray.get(tenant.remote(num_cpus=1)(lambda: 7).remote(), timeout=30) == 7
        assert time.monotonic() - began < 30
        tenant.close()
        # no orphan: the run's named actors are the new run's own
        ours = {"psdsf-phoenix-coordinator",
                *(h._actor_id.hex() for h in run.handles().values())}
        named = actors_of("phoenix")
        assert "psdsf-phoenix-coordinator" in named
        ids = {ray.get_actor(n, namespace=NAMESPACE)._actor_id.hex()
               for n in named - {"psdsf-phoenix-coordinator"}}
        assert ids <= ours
    finally:
        run.stop()


def test_a_live_name_is_refused_and_an_orphaned_server_ends_itself() -> None:
    run = launch(TENANTS, FAST, run_id="lonely")
    with pytest.raises(RunExistsError, match="run 'lonely' is already running"):
        launch(TENANTS, FAST, run_id="lonely")
    with pytest.raises(RunNameError, match="run name: expected"):
        launch(TENANTS, FAST, run_id="no spaces")
    # a tenants cluster before anyone submits observes fine
    assert wait_for(lambda: run.status()["round"] is not None, 10.0)
    assert run.status()["failure"] is None
    assert run.result().allocation.shape == (0, 1)
    servers = actors_of("lonely") - {"psdsf-lonely-coordinator"}
    assert servers
    ray.kill(run.coordinator, no_restart=True)  # as when its driver dies
    assert wait_for(lambda: not actors_of("lonely"), 15.0), actors_of("lonely")
