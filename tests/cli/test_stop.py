"""``psdsf-dist stop``, and ``run --detach`` that it stops (on the shared local Ray)."""

from __future__ import annotations

import pytest
import ray

from psdsf_dist.cli.main import main
from psdsf_dist.runtime.names import run_actor_names
from tests.conftest import EXAMPLES


def actors_of(run_id: str) -> set[str]:
    return set(run_actor_names(run_id, list(ray.util.list_named_actors(all_namespaces=True))))


@pytest.mark.usefixtures("ray_session")
def test_stop_ends_a_detached_allocator(capsys: pytest.CaptureFixture[str]) -> None:
    address = ray.get_runtime_context().gcs_address
    assert main(["run", str(EXAMPLES / "paper_fig1.yaml"), "--address", address, "--detach",
                 "--name", "detached-fig1", "--period", "0.5"]) == 0
    err = capsys.readouterr().err
    assert "allocator 'detached-fig1' started, detached" in err
    assert "psdsf-detached-fig1-coordinator" in actors_of("detached-fig1")
    assert main(["stop", "--name", "detached-fig1", "--address", address]) == 0
    assert not actors_of("detached-fig1")
    assert main(["stop", "--name", "detached-fig1", "--address", address]) == 1
    assert "no allocator 'detached-fig1'" in capsys.readouterr().err


@pytest.mark.parametrize(("args", "needle"), [
    (["stop", "--name", "a b"], "--name: run name: expected"),
    (["run", str(EXAMPLES / "paper_fig1.yaml"), "--detach"], "--detach: needs --address"),
    (["run", str(EXAMPLES / "paper_fig1.yaml"), "--name", ""], "--name: run name: expected"),
])
def test_bad_names_and_detach_without_address_are_one_line(
        args: list[str], needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(args) == 2
    out, err = capsys.readouterr()
    assert out == "" and needle in err and err.count("\n") == 1
