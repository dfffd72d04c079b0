"""Reading a scenario document: the bytes of a file, parsed as YAML or JSON, before validation.

Input is untrusted (``docs/input-limits.md``): only a regular file is read, at most the
``file_bytes`` limit of it, and parsing refuses what would make the rest of the loading cost more
than the document's size — a YAML alias expansion beyond ``alias_nodes``, a key written twice in
one mapping (the parsers keep the last one silently), JSON nested too deeply to read.  Every
problem raises :class:`~psdsf_dist.errors.ScenarioError` naming the source, never quoting its
content.  :func:`document_size` counts what a parsed document would build, before building it.
Validation and the arrays are :mod:`psdsf_dist.model.build`'s.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from psdsf_dist.errors import ScenarioError
from psdsf_dist.model.fields import show
from psdsf_dist.model.limits import LIMITS_ENV, Limits, current_limits


def read_document(path: str | Path) -> Any:
    """The parsed document of a scenario file, before validation: YAML, or JSON for a
    ``.json`` suffix.  Only a regular file is read, and at most ``file_bytes`` + 1 bytes of it
    (a device such as ``/dev/zero``, a FIFO or a directory is refused without reading), so
    nothing here allocates more than the limit; YAML aliases may add at most
    ``alias_nodes`` nodes to the document (:func:`_check_aliases`).  A problem raises
    :class:`ScenarioError` naming the file, without quoting its content."""
    p = Path(path)
    source = str(path)
    text = _read_bounded(p, source, current_limits().file_bytes)
    return parse_document(text, source, as_json=p.suffix.lower() == ".json")


def parse_document(text: str, source: str, *, as_json: bool = False) -> Any:
    """A scenario document (or a piece of one, such as an event given on the command line)
    parsed from YAML or JSON text, under the same limits as a file (see
    :func:`read_document`)."""
    limits = current_limits()
    if len(text) > limits.file_bytes:
        raise ScenarioError("", f"more than the limit of {limits.file_bytes:,} bytes (raise it "
                                f"with {LIMITS_ENV}=\"file_bytes=N\")", source)
    if as_json:
        try:
            return json.loads(text, object_pairs_hook=_json_object)
        except _DuplicateKeyError as err:
            raise ScenarioError("", f"malformed JSON: duplicate key {show(err.key)}",
                                source) from None
        except json.JSONDecodeError as err:
            raise ScenarioError(
                "", f"malformed JSON at line {err.lineno}: {err.msg}", source
            ) from None
        except ValueError as err:  # e.g. an integer of more digits than Python converts
            raise ScenarioError("", f"malformed JSON: {str(err).splitlines()[0]}",
                                source) from None
        except RecursionError:
            raise ScenarioError("", "malformed JSON: nested too deeply to read",
                                source) from None
    loader: _StrictYamlLoader | None = None
    try:
        loader = _StrictYamlLoader(text)  # its reader refuses unprintable characters at once
        loader.alias_budget = limits.alias_nodes
        return loader.get_single_data()
    except RecursionError:
        raise ScenarioError("", "malformed YAML: nested too deeply to read", source) from None
    except _AliasBombError as err:
        raise ScenarioError("", f"YAML aliases expand to more than {err.budget:,} extra nodes "
                                f"(raise it with {LIMITS_ENV}=\"alias_nodes=N\")",
                            source) from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or type(err).__name__
        raise ScenarioError("", f"malformed YAML{at}: {problem}", source) from None
    finally:
        if loader is not None:
            loader.dispose()


def read_text(path: str | Path) -> str:
    """The text of a regular file of at most ``file_bytes`` (the reading of
    :func:`read_document`, for inputs that are not scenario documents, e.g. job traces)."""
    return _read_bounded(Path(path), str(path), current_limits().file_bytes)


def _read_bounded(p: Path, source: str, limit: int) -> str:
    """The text of a regular file of at most ``limit`` bytes.  The file is opened without
    blocking (a FIFO with no writer would wait forever) and checked to be regular on the open
    descriptor before a byte is read; at most ``limit`` + 1 bytes are read, so a file that
    grows after the check is refused too."""
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise ScenarioError("", "no such file", source) from None
    except IsADirectoryError:
        raise ScenarioError("", "is a directory, not a scenario file", source) from None
    except OSError as err:
        raise ScenarioError("", f"cannot read: {err.strerror or type(err).__name__}",
                            source) from None
    except ValueError:  # a NUL byte, or a character the file system cannot encode
        raise ScenarioError("", "cannot read: not a valid file name", source) from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise ScenarioError("", "is a directory, not a scenario file", source)
        if not stat.S_ISREG(info.st_mode):
            raise ScenarioError("", "not a regular file (a device, pipe or socket is not read)",
                                source)
        too_big = ScenarioError("", f"more than the limit of {limit:,} bytes (raise it with "
                                    f"{LIMITS_ENV}=\"file_bytes=N\")", source)
        if info.st_size > limit:
            raise too_big
        chunks: list[bytes] = []
        got = 0
        while got <= limit:
            chunk = os.read(fd, min(limit + 1 - got, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        if got > limit:
            raise too_big
    except OSError as err:
        raise ScenarioError("", f"cannot read: {err.strerror or type(err).__name__}",
                            source) from None
    finally:
        os.close(fd)
    try:
        return b"".join(chunks).decode("utf-8")
    except UnicodeDecodeError as err:
        raise ScenarioError("", f"cannot read: not UTF-8 text (byte {err.start + 1})",
                            source) from None


class _DuplicateKeyError(Exception):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _json_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # json.loads keeps the last of two equal keys: a repeated key is a typo to report.
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKeyError(key)
        out[key] = value
    return out


class _AliasBombError(yaml.YAMLError):
    def __init__(self, budget: int) -> None:
        super().__init__(budget)
        self.budget = budget


class _StrictYamlLoader(yaml.SafeLoader):
    """The safe loader, refusing a key repeated in one mapping (PyYAML keeps the last) and a
    document whose aliases would expand it by more than ``alias_budget`` nodes."""

    alias_budget: int = Limits.alias_nodes

    def get_single_data(self) -> Any:
        node = self.get_single_node()
        if node is None:
            return None
        _check_aliases(node, self.alias_budget)
        return self.construct_document(node)


def _check_aliases(root: yaml.Node, budget: int) -> None:
    """Refuse a composed document whose expansion — every alias replaced by a copy of what it
    names — has more than ``budget`` nodes beyond the distinct ones written.  The composed
    document is a graph in which an alias is the very node it names, so ten levels of nine
    aliases are 100 nodes but 9^10 once expanded: everything that walks the constructed data
    (the nesting check, validation, output) would walk the expansion.  The expanded size is
    computed once per distinct node, children before parents, so this costs time linear in the
    file whatever the expansion."""
    size: dict[int, int] = {}
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if key in size and not done:
            continue
        children = _children(node)
        if done:
            size[key] = 1 + sum(size.get(id(c), 0) for c in children)
            if size[key] - len(size) > budget:
                raise _AliasBombError(budget)
            continue
        size.setdefault(key, 0)  # on the path: a recursive alias counts as nothing more
        stack.append((node, True))
        stack.extend((c, False) for c in children if id(c) not in size)
    if size[id(root)] - len(size) > budget:
        raise _AliasBombError(budget)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def _yaml_mapping(loader: _StrictYamlLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        # merge keys (<<) may be overridden on purpose; only keys written twice are refused
        if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
            key = loader.construct_object(key_node)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {show(key)}", key_node.start_mark
                )
            seen.add(key)
    return loader.construct_mapping(node)


_StrictYamlLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _yaml_mapping)


def document_size(data: Any) -> tuple[int, int]:
    """(users x servers, distinct event times) of a scenario document, counted without
    building anything: servers after expanding classes, users and servers that join by events
    included.  A malformed document counts what it can (the loader refuses it after)."""
    if not isinstance(data, Mapping):
        return 0, 0
    servers_in = data.get("servers")
    users_in = data.get("users")
    events = data.get("events")
    servers = 0
    for srv in servers_in if isinstance(servers_in, list) else []:
        cnt = srv.get("count", 1) if isinstance(srv, Mapping) else 1
        servers += cnt if isinstance(cnt, int) and not isinstance(cnt, bool) and cnt > 0 else 1
    users = len(users_in) if isinstance(users_in, list) else 0
    times: set[Any] = set()
    for e in events if isinstance(events, list) else []:
        if isinstance(e, Mapping):
            users += isinstance(e.get("user_joins"), Mapping)
            body = e.get("server_joins")
            servers += isinstance(body, Mapping) and "capacity" in body
            at = e.get("at")
            times.add(at if isinstance(at, int | float) else None)
    return users * servers, len(times)
