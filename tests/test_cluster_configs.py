"""cluster_configs/: every file parses, and every command or module it names exists."""

from __future__ import annotations

import importlib
import importlib.util
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from psdsf_dist.cli.main import COMMANDS, build_parser
from psdsf_dist.model.scenario import Scenario
from psdsf_dist.runtime.from_ray import GIB, RayNode, from_ray_document

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "cluster_configs"
FILES = sorted(CONFIGS.iterdir())
YAMLS = [p for p in FILES if p.suffix in (".yaml", ".yml", ".json")]  # JSON is YAML too


def test_the_promised_files_are_there() -> None:
    names = {p.name for p in FILES}
    assert {"ray-local.yaml", "ray-aws.yaml", "kuberay-raycluster.yaml", "README.md"} <= names


@pytest.mark.parametrize("path", YAMLS, ids=lambda p: p.name)
def test_every_config_parses_to_a_mapping(path: Path) -> None:
    assert isinstance(yaml.safe_load(path.read_text()), dict)


def load(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((CONFIGS / name).read_text())
    return doc


def test_local_launcher_config() -> None:
    doc = load("ray-local.yaml")
    assert doc["provider"]["type"] == "local"
    assert doc["provider"]["head_ip"] and doc["provider"]["worker_ips"]
    assert any("ray start --head" in c for c in doc["head_start_ray_commands"])
    assert any("--address=$RAY_HEAD_IP:6379" in c for c in doc["worker_start_ray_commands"])


def test_aws_config_has_heterogeneous_node_types_with_resources() -> None:
    doc = load("ray-aws.yaml")
    assert doc["provider"]["type"] == "aws"
    types = doc["available_node_types"]
    assert doc["head_node_type"] in types
    workers = {k: v for k, v in types.items() if k != doc["head_node_type"]}
    assert len(workers) >= 3
    for spec in types.values():
        assert spec["node_config"]["InstanceType"]
        assert isinstance(spec["resources"], dict)
    shapes = {tuple(sorted(v["resources"].items())) for v in workers.values()}
    assert len(shapes) == len(workers)  # really heterogeneous
    assert any("GPU" in v["resources"] for v in workers.values())


def test_kuberay_manifest() -> None:
    doc = load("kuberay-raycluster.yaml")
    assert doc["apiVersion"].startswith("ray.io/") and doc["kind"] == "RayCluster"
    spec = doc["spec"]
    assert spec["headGroupSpec"]["template"]["spec"]["containers"]
    assert len(spec["workerGroupSpecs"]) >= 2
    for group in spec["workerGroupSpecs"]:
        assert group["groupName"] and group["template"]["spec"]["containers"]


def test_from_ray_scenario_resolves_against_node_resources() -> None:
    doc = load("from_ray_scenario.yaml")
    nodes: list[RayNode] = [
        {"NodeID": f"{k:08x}ffff", "Alive": True, "NodeManagerAddress": f"10.0.0.{k}",
         "Resources": {"CPU": 16.0, "memory": 64 * GIB, **({"GPU": 1.0} if k else {})}}
        for k in range(3)]
    resolved, pins = from_ray_document(doc, nodes)
    scenario = Scenario.from_dict(resolved)
    assert scenario.num_servers == 3 and len(pins) == 3
    assert scenario.eligible[2].sum() == 2  # training needs a GPU


def named_commands() -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for path in FILES:
        text = path.read_text()
        # a command line: the subcommand followed by a file, an option or a closing backtick
        pattern = r"psdsf-dist\s+([a-z][a-z-]*)(?=\s+(?:\S+\.(?:ya?ml|json)|--|SCENARIO)|`)"
        out += [(path.name, m) for m in re.findall(pattern, text)]
    return out


def test_every_named_psdsf_command_exists_and_parses() -> None:
    found = named_commands()
    assert found, "the configs should say how to submit the allocator"
    parser = build_parser()
    for where, cmd in found:
        assert cmd in COMMANDS, f"{where}: psdsf-dist {cmd}"
    for path in FILES:  # and each full `psdsf-dist run FILE ...` line parses
        for line in re.findall(r"psdsf-dist (run \S+\.ya?ml[^\n`|\\]*)", path.read_text()):
            argv = line.split()
            args = parser.parse_args(argv)
            assert (ROOT / args.scenario).exists(), f"{path.name}: {args.scenario}"


def test_every_named_python_module_and_file_exists() -> None:
    for path in FILES:
        text = path.read_text()
        for module in re.findall(r"python[0-9.]* -m ([a-zA-Z_][\w.]*)", text):
            assert importlib.util.find_spec(module) is not None, f"{path.name}: {module}"
        for ref in re.findall(r"(?:cluster_configs|psdsf_dist)/[\w./-]+\.(?:yaml|py)", text):
            assert (ROOT / ref).exists(), f"{path.name}: {ref}"
        for api in re.findall(r"psdsf_dist\.runtime\.launcher\.(\w+)", text):
            launcher = importlib.import_module("psdsf_dist.runtime.launcher")
            assert hasattr(launcher, api), f"{path.name}: {api}"

