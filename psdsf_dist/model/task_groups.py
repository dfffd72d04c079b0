"""Jobs whose tasks are bound to servers: per-server task counts and task groups.

The Guan thesis (chapters 4 and 5) models a job as a set of tasks, each of which may run only
where its input data is: at one designated site (chapter 4, AMF: job i has ``d[i, j]`` tasks at
site j) or at any one of the sites holding a replica (chapter 5, GAMF: the job's tasks sharing
the same set of available sites G_k form a *task group* of ``d[i, k]`` tasks).  A one-site
group is exactly an AMF per-site count, so both are stored as groups.

Two optional user fields declare them (docs/scenario-format.md):

* ``server_tasks: {server or class: count}`` - ``count`` tasks bound to that server; a class
  name gives each member that count (as ``gamma`` does) and a member named explicitly overrides
  its class;
* ``task_groups: [{servers: [...], tasks: count}, ...]`` - ``count`` tasks each runnable on any
  one of the listed servers (a class name stands for all its members).

A user declaring either is *bound*: it has exactly those tasks and runs nothing anywhere else.
A user declaring neither is unbound, as before: any number of tasks (up to ``max_tasks``) on any
eligible server.  Only the ``amf``/``gamf`` policies read the groups; every other policy
allocates as if they were not declared.  Counts are finite numbers >= 0; every listed server
must be allowed by the user's placement (``servers``, ``requires``).

Storage is compressed (CSR-like): group g belongs to ``user[g]``, has ``tasks[g]`` tasks and may
run on ``server[ptr[g]:ptr[g + 1]]`` (first server first: chapter 5's "associated site").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from psdsf_dist.errors import ScenarioError
from psdsf_dist.model.fields import _check_keys, _mapping, _name, _sequence, number
from psdsf_dist.model.limits import Limits

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

GROUP_KEYS = {"servers", "tasks"}


@dataclass(frozen=True, eq=False)
class TaskGroups:
    """Every user's task groups (see the module docstring)."""

    user: IntArray  # G
    tasks: FloatArray  # G
    ptr: IntArray  # G + 1
    server: IntArray  # ptr[-1]
    bound: BoolArray  # N: the user declared its tasks

    @property
    def num_groups(self) -> int:
        return len(self.user)

    def servers_of(self, g: int) -> IntArray:
        return self.server[self.ptr[g]: self.ptr[g + 1]]

    def of_user(self, n: int) -> IntArray:
        return np.flatnonzero(self.user == n)

    def group_of_entry(self) -> IntArray:
        """``ptr[-1]``: the group of each entry of ``server``."""
        return np.repeat(np.arange(self.num_groups), np.diff(self.ptr))

    def first_server_only(self) -> TaskGroups:
        """Each group bound to its first server (chapter 5's AMF baseline: "each task of a job
        must be executed at its associated site")."""
        return TaskGroups(self.user, self.tasks, np.arange(self.num_groups + 1, dtype=np.int64),
                          self.server[self.ptr[:-1]].copy(), self.bound)

    def single_server(self) -> bool:
        return bool((np.diff(self.ptr) == 1).all())

    def per_server_tasks(self, num_servers: int) -> FloatArray:
        """N x K: tasks bound to each server by one-server groups (AMF's ``d[i, j]``)."""
        out = np.zeros((len(self.bound), num_servers))
        one = np.flatnonzero(np.diff(self.ptr) == 1)
        np.add.at(out, (self.user[one], self.server[self.ptr[one]]), self.tasks[one])
        return out

    def with_tasks(self, tasks: FloatArray) -> TaskGroups:
        return TaskGroups(self.user, np.asarray(tasks, dtype=float), self.ptr, self.server,
                          self.bound)

    def of_users(self, rows: Sequence[int]) -> TaskGroups | None:
        """The groups of the users ``rows``, each user renumbered by its place in ``rows``
        (groups in user order, as built); None if none of them is bound."""
        if not self.bound[list(rows)].any():
            return None
        groups = [int(g) for n in rows for g in self.of_user(n)]
        sizes = np.diff(self.ptr)[groups] if groups else np.zeros(0, dtype=np.int64)
        renumber = [j for j, n in enumerate(rows) for _ in self.of_user(n)]
        return TaskGroups(np.array(renumber, dtype=np.int64),
                          np.array(self.tasks[groups], dtype=float),
                          np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64),
                          np.array([int(s) for g in groups for s in self.servers_of(g)],
                                   dtype=np.int64),
                          np.array(self.bound[list(rows)], dtype=bool))


@dataclass(frozen=True)
class GroupSpec:
    """One entry of a user's ``task_groups``: ``tasks`` tasks, each runnable on any one of the
    named servers or classes."""

    servers: tuple[str, ...]
    tasks: float


def parse_server_tasks(value: Any, fld: str) -> dict[str, float]:
    """A user's ``server_tasks`` (``{server or class: count}``), its counts checked."""
    st = _mapping(value, fld)
    return {s: number(c, f"{fld}.{s}") for s, c in st.items()}


def parse_task_groups(value: Any, fld: str) -> tuple[GroupSpec, ...]:
    """A user's ``task_groups`` (``[{servers: [...], tasks: count}, ...]``), checked but for
    whether the servers it names exist (:func:`extend_task_groups`)."""
    out: list[GroupSpec] = []
    for k, grp in enumerate(_sequence(value, fld)):
        gf = f"{fld}[{k}]"
        grp = _mapping(grp, gf)
        _check_keys(grp, GROUP_KEYS, gf)
        for key in sorted(GROUP_KEYS):
            if key not in grp:
                raise ScenarioError(f"{gf}.{key}", "missing")
        count = number(grp["tasks"], f"{gf}.tasks")
        names = _sequence(grp["servers"], f"{gf}.servers")
        if not names:
            raise ScenarioError(f"{gf}.servers", "empty: a group runs on some server")
        out.append(GroupSpec(tuple(_name(s, f"{gf}.servers[{j}]") for j, s in enumerate(names)),
                             count))
    return tuple(out)


@dataclass(frozen=True)
class BoundTasks:
    """What one new user declares of its tasks (``server_tasks``, ``task_groups``: None when
    not given), with the field its entry is reported under (``users[3]``)."""

    server_tasks: Mapping[str, float] | None
    groups: tuple[GroupSpec, ...] | None
    fld: str


def extend_task_groups(
    existing: TaskGroups | None,
    num_users: int,
    new_users: Sequence[BoundTasks],
    placement: BoolArray,
    server_index: Mapping[str, int],
    class_members: Mapping[str, Sequence[int]],
    limits: Limits,
) -> TaskGroups | None:
    """The task groups of ``num_users`` users (``existing``: theirs) followed by
    ``new_users`` (``placement``: their rows, one per new user): a class name stands for its
    members and a member named in ``server_tasks`` overrides its class; every server named
    must exist and be allowed by the user's placement.  None if no user declares any.  The
    groups of the users before are kept as they are (their indices do not move), and the
    ``cells`` limit counts every group entry, theirs included."""
    g_user: list[int] = []
    g_tasks: list[float] = []
    g_servers: list[Sequence[int]] = []
    bound = np.zeros(len(new_users), dtype=bool)
    entries = 0 if existing is None else int(existing.ptr[-1])
    for j, spec in enumerate(new_users):
        n = num_users + j
        fld = spec.fld
        if spec.server_tasks is not None:
            bound[j] = True
            counts: dict[int, float] = {}
            # class entries first so that a member named explicitly overrides its class
            for sname in sorted(spec.server_tasks, key=lambda s: s not in class_members):
                sf = f"{fld}.server_tasks.{sname}"
                targets = _targets(sname, sf, server_index, class_members)
                _allowed(placement[j], targets, sf)
                for t in targets:
                    counts[t] = spec.server_tasks[sname]
            entries += len(counts)
            limits.check("cells", entries, f"{fld}.server_tasks")
            for t in sorted(counts):
                g_user.append(n)
                g_tasks.append(counts[t])
                g_servers.append((t,))
        if spec.groups is not None:
            bound[j] = True
            for k, grp in enumerate(spec.groups):
                gf = f"{fld}.task_groups[{k}]"
                members: list[int] = []
                for i, sname in enumerate(grp.servers):
                    sf = f"{gf}.servers[{i}]"
                    targets = _targets(sname, sf, server_index, class_members)
                    _allowed(placement[j], targets, sf)
                    if set(targets) & set(members):
                        raise ScenarioError(sf, f"server {sname!r} is listed twice in the group")
                    members.extend(targets)
                entries += len(members)
                limits.check("cells", entries, f"{gf}.servers")
                g_user.append(n)
                g_tasks.append(grp.tasks)
                g_servers.append(tuple(members))
    if existing is None and not bound.any():
        return None
    before = existing if existing is not None else TaskGroups(
        np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(1, dtype=np.int64),
        np.zeros(0, dtype=np.int64), np.zeros(num_users, dtype=bool))
    if not len(new_users):
        return before
    sizes = np.array([len(s) for s in g_servers], dtype=np.int64)
    ptr = before.ptr[-1] + np.cumsum(sizes)
    flat = np.array([t for s in g_servers for t in s], dtype=np.int64)
    return TaskGroups(np.concatenate([before.user, np.array(g_user, dtype=np.int64)]),
                      np.concatenate([before.tasks, np.array(g_tasks, dtype=float)]),
                      np.concatenate([before.ptr, ptr]).astype(np.int64),
                      np.concatenate([before.server, flat]).astype(np.int64),
                      np.concatenate([before.bound, bound]))


def _targets(sname: str, fld: str, server_index: Mapping[str, int],
             class_members: Mapping[str, Sequence[int]]) -> list[int]:
    if sname in class_members:
        return list(class_members[sname])
    if sname in server_index:
        return [server_index[sname]]
    raise ScenarioError(fld, f"unknown server or class {sname!r}")


def _allowed(row: BoolArray, targets: Sequence[int], fld: str) -> None:
    if not row[list(targets)].all():
        raise ScenarioError(fld, "server is excluded by the user's placement")
