"""The package's layers as README's Layout states them: the functional core (model, core,
policies, protocol, admission, simulator, jobs) imports neither Ray nor the shells around it
(runtime, observability, cli), and the simulator and the runtime do not import each other."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "psdsf_dist"
PURE = ("model", "core", "policies", "protocol", "admission", "simulator", "jobs")
SHELLS = ("psdsf_dist.runtime", "psdsf_dist.observability", "psdsf_dist.cli")


def imports(path: Path) -> set[str]:
    """The modules ``path`` imports, at any depth of its code (absolute names)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None and not node.level:
            out.add(node.module)
    return out


def below(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


@pytest.mark.parametrize("layer", PURE)
def test_the_functional_core_imports_no_ray_and_no_shell(layer: str) -> None:
    for path in sorted((PACKAGE / layer).rglob("*.py")):
        bad = sorted(n for n in imports(path)
                     if below(n, "ray") or any(below(n, s) for s in SHELLS))
        assert not bad, f"{path.relative_to(PACKAGE.parent)} imports {', '.join(bad)}"


def test_the_simulator_and_the_runtime_do_not_import_each_other() -> None:
    for layer, other in (("simulator", "runtime"), ("runtime", "simulator")):
        for path in sorted((PACKAGE / layer).rglob("*.py")):
            bad = sorted(n for n in imports(path) if below(n, f"psdsf_dist.{other}"))
            assert not bad, f"{path.relative_to(PACKAGE.parent)} imports {', '.join(bad)}"


def test_the_import_reader_sees_nested_imports(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text("import os\n\ndef f():\n    import ray.util\n    from psdsf_dist.cli import x\n")
    assert imports(src) == {"os", "ray.util", "psdsf_dist.cli"}
