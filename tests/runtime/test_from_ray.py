"""``servers: from-ray``: node resources become a normal scenario document."""

from __future__ import annotations

import pytest

from psdsf_dist.errors import ScenarioError
from psdsf_dist.model.scenario import Scenario
from psdsf_dist.runtime.from_ray import (
    GIB,
    RayNode,
    default_resources,
    from_ray_document,
    is_from_ray,
    node_server_name,
)

NODES: list[RayNode] = [
    {"NodeID": "aaaaaaaa1111", "Alive": True, "NodeManagerAddress": "10.0.0.1",
     "Resources": {"CPU": 8.0, "memory": 16 * GIB, "object_store_memory": 4 * GIB,
                   "node:10.0.0.1": 1.0, "node:__internal_head__": 1.0}},
    {"NodeID": "bbbbbbbb2222", "Alive": True, "NodeManagerAddress": "10.0.0.2",
     "Resources": {"CPU": 4.0, "memory": 32 * GIB, "GPU": 2.0, "accelerator_type:T4": 1.0,
                   "node:10.0.0.2": 1.0}},
    {"NodeID": "cccccccc3333", "Alive": False, "Resources": {"CPU": 64.0}},
]
DOC = {"servers": "from-ray",
       "users": [{"name": "web", "demand": {"CPU": 1, "memory": 2}},
                 {"name": "ml", "demand": {"CPU": 1, "GPU": 1}}]}


def test_every_alive_node_is_one_pinned_server() -> None:
    doc, pins = from_ray_document(DOC, NODES)
    s = Scenario.from_dict(doc)
    assert s.server_names == ("node-aaaaaaaa", "node-bbbbbbbb")
    assert pins == {"node-aaaaaaaa": "aaaaaaaa1111", "node-bbbbbbbb": "bbbbbbbb2222"}
    assert s.resources == ("CPU", "memory", "GPU")  # internal resources left out
    assert list(s.capacity[0]) == [8.0, 16.0, 0.0] and list(s.capacity[1]) == [4.0, 32.0, 2.0]
    assert s.server_labels[0]["head"] == "true" and s.server_labels[1]["ip"] == "10.0.0.2"
    assert not s.eligible[1, 0] and s.eligible[1, 1]  # no GPU on the head node


def test_listed_resources_are_the_only_ones_shared() -> None:
    doc, _ = from_ray_document({**DOC, "resources": ["CPU", "memory", "GPU"]}, NODES[:1])
    assert doc["servers"][0]["capacity"] == {"CPU": 8.0, "memory": 16.0, "GPU": 0.0}
    assert default_resources(NODES[:1]) == ["CPU", "memory"]


def test_problems_are_scenario_errors() -> None:
    with pytest.raises(ScenarioError, match="no alive node"):
        from_ray_document(DOC, NODES[2:])
    with pytest.raises(ScenarioError, match="from-ray"):
        from_ray_document({"servers": []}, NODES)
    assert is_from_ray(DOC) and not is_from_ray({"servers": []}) and not is_from_ray(None)
    assert node_server_name(NODES[0]) == "node-aaaaaaaa"
