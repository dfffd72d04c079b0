"""Server actors on the real clock: they answer while they work, and the run converges."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import ray
import yaml

from psdsf_dist.core.certificate import certificate
from psdsf_dist.protocol.config import ProtocolConfig
from psdsf_dist.runtime.launcher import launch
from psdsf_dist.runtime.settings import RunConfig

pytestmark = pytest.mark.usefixtures("ray_session")


def test_real_clock_run_answers_while_working_and_converges(small_cluster: Path,
                                                           tmp_path: Path) -> None:
    doc = yaml.safe_load(small_cluster.read_text())
    doc["servers"] = doc["servers"][2:]  # C and D: three users share two servers
    doc["users"] = doc["users"][2:]
    del doc["events"]
    path = tmp_path / "two.yaml"
    path.write_text(yaml.safe_dump(doc))
    run = launch(path, RunConfig(ProtocolConfig(period=0.3, seed=3)), run_id="real-clock")
    try:
        server = run.handles()["C-1"]
        latencies = []
        for _ in range(8):
            t0 = time.monotonic()
            st = ray.get(server.status.remote(), timeout=10)
            latencies.append(time.monotonic() - t0)
            assert st["servers"]["C-1"]["running"] and st["servers"]["C-1"]["error"] is None
            time.sleep(0.1)
        assert min(latencies) < 1.0  # answered between the loop's steps, not after a period
        final = run.wait(duration=120, until_converged=True, hold=3)
        assert final["holds"], final
        assert ray.get(server.status.remote())["servers"]["C-1"]["rounds"] > 1
        res = run.result()
        assert all(o.feasible for o in res.trace)
        assert certificate(res.scenario, res.allocation, rtol=1e-3).holds
    finally:
        run.stop()
