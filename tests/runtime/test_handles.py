"""The typed handles describe each actor's remote methods: every public method of the actor,
each under its own name (:mod:`psdsf_dist.runtime.handles`)."""

from __future__ import annotations

import ast
import inspect

import pytest

from psdsf_dist.runtime import handles
from psdsf_dist.runtime.coordinator import Coordinator
from psdsf_dist.runtime.server_actor import ServerActor
from psdsf_dist.runtime.tenant_queue import TenantQueue

NOT_DESCRIBED: dict[str, set[str]] = {}
"""Methods a handle leaves out on purpose (actor class name -> method names): none now."""


def described() -> dict[str, dict[str, tuple[str, str]]]:
    """Handle class -> attribute -> (actor class, method) as written in the module."""
    out: dict[str, dict[str, tuple[str, str]]] = {}
    for node in ast.walk(ast.parse(inspect.getsource(handles))):
        if not isinstance(node, ast.ClassDef) or not node.name.endswith("Handle"):
            continue
        out[node.name] = {}
        for item in node.body:
            if isinstance(item, ast.Assign) and isinstance(item.value, ast.Call):
                (target,) = item.targets
                (arg,) = item.value.args
                assert isinstance(target, ast.Name) and isinstance(arg, ast.Attribute)
                assert isinstance(arg.value, ast.Name)
                out[node.name][target.id] = (arg.value.id, arg.attr)
    return out


@pytest.mark.parametrize(("handle", "actor"), [("ServerHandle", ServerActor),
                                               ("CoordinatorHandle", Coordinator),
                                               ("QueueHandle", TenantQueue)])
def test_each_public_method_is_described_under_its_own_name(handle: str, actor: type) -> None:
    methods = {name for name, f in inspect.getmembers(actor)
               if not name.startswith("_")
               and (inspect.iscoroutinefunction(f) or inspect.isasyncgenfunction(f))}
    found = described()[handle]
    assert set(found) == methods - NOT_DESCRIBED.get(actor.__name__, set())
    assert all(cls == actor.__name__ and attr == name for name, (cls, attr) in found.items())
