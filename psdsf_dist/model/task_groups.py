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


def build_task_groups(
    users: Sequence[Mapping[str, Any]],
    placement: BoolArray,
    server_index: Mapping[str, int],
    class_members: Mapping[str, Sequence[int]],
    limits: Limits,
) -> TaskGroups | None:
    """Read ``server_tasks`` and ``task_groups`` of every (already checked) user entry; None if
    no user declares either.  Raises ScenarioError naming the field."""
    g_user: list[int] = []
    g_tasks: list[float] = []
    g_servers: list[Sequence[int]] = []
    bound = np.zeros(len(users), dtype=bool)
    entries = 0
    for n, usr in enumerate(users):
        fld = f"users[{n}]"
        if usr.get("server_tasks") is not None:
            bound[n] = True
            st = _mapping(usr["server_tasks"], f"{fld}.server_tasks")
            counts: dict[int, float] = {}
            # class entries first so that a member named explicitly overrides its class
            for sname in sorted(st, key=lambda s: s not in class_members):
                sf = f"{fld}.server_tasks.{sname}"
                count = number(st[sname], sf)
                targets = _targets(sname, sf, server_index, class_members)
                _allowed(placement[n], targets, sf)
                for t in targets:
                    counts[t] = count
            entries += len(counts)
            limits.check("cells", entries, f"{fld}.server_tasks")
            for t in sorted(counts):
                g_user.append(n)
                g_tasks.append(counts[t])
                g_servers.append((t,))
        if usr.get("task_groups") is not None:
            bound[n] = True
            for k, grp in enumerate(_sequence(usr["task_groups"], f"{fld}.task_groups")):
                gf = f"{fld}.task_groups[{k}]"
                grp = _mapping(grp, gf)
                _check_keys(grp, GROUP_KEYS, gf)
                for key in sorted(GROUP_KEYS):
                    if key not in grp:
                        raise ScenarioError(f"{gf}.{key}", "missing")
                count = number(grp["tasks"], f"{gf}.tasks")
                members: list[int] = []
                names = _sequence(grp["servers"], f"{gf}.servers")
                if not names:
                    raise ScenarioError(f"{gf}.servers", "empty: a group runs on some server")
                for j, sname in enumerate(names):
                    sf = f"{gf}.servers[{j}]"
                    sname = _name(sname, sf)
                    targets = _targets(sname, sf, server_index, class_members)
                    _allowed(placement[n], targets, sf)
                    if set(targets) & set(members):
                        raise ScenarioError(sf, f"server {sname!r} is listed twice in the group")
                    members.extend(targets)
                entries += len(members)
                limits.check("cells", entries, f"{gf}.servers")
                g_user.append(n)
                g_tasks.append(count)
                g_servers.append(tuple(members))
    if not bound.any():
        return None
    sizes = np.array([len(s) for s in g_servers], dtype=np.int64)
    ptr = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    flat = np.array([t for s in g_servers for t in s], dtype=np.int64)
    return TaskGroups(np.array(g_user, dtype=np.int64), np.array(g_tasks, dtype=float), ptr,
                      flat, bound)


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
