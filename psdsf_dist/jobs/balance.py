"""Balanced allocation of one job's tasks to sites: the flow network of Guan's thesis (section
3.2.1, Fig. 3.2) and the greedy water-filling of ATA-Greedy (Fig. 3.10).

A job's unstarted tasks come in groups; the tasks of group g may run at the sites
``group_sites[g]``.  Sites already hold ``loads[j]`` unstarted tasks, and site j runs
``slots[j]`` tasks at a time.  The *level* of an allocation x (tasks per group and site) is the
job's estimated completion in rounds of tasks, ``max_j (loads[j] + x_j) / slots[j]`` over the
sites that get a task of the job, measured on the grid 1/L with L = lcm(slots) (exact for equal
slots; L = 1 when every site has one slot, the thesis's integer C).  Level K is reachable iff the
flow network source -> group g (capacity |T_g|) -> its sites (|T_g|) -> sink (capacity
``max(floor(K slots[j] / L) - loads[j], 0)``) carries every task; the least such K is found by
binary search (Algorithms 1-4).  Feasibility at a given K is decided by Hall's condition on the
sites the job can use (every subset B of them must offer at least the tasks of the groups whose
sites lie inside B), which is the max-flow/min-cut condition of this bipartite network and is
vectorised over subsets (in closed form when those sites have equal slots); the allocation at
the least K is then read off a maximum flow.  Estimates are remembered (:class:`Memo`) under
exactly what they read, since successive plans repeat most of them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable
from functools import lru_cache
from itertools import count
from operator import itemgetter
from typing import Generic, NamedTuple, TypeVar

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
SiteLists = tuple[tuple[int, ...], ...]
"""The sites of every group, ascending."""

MAX_GRID = 1 << 20
"""Above this lcm of the slot counts, levels are measured on the grid 1/max(slots)."""
MAX_HALL_SITES = 16
"""A job able to use more sites than this is checked by max-flow instead of Hall's condition."""


MEMO_SIZE = 1 << 18
"""Job estimates a :class:`Memo` keeps before it starts afresh.  Entries hold keys of a few
dozen integers and, for allocations, small arrays: the report's heaviest whole-trace runs
peak at about 1.8 GB per process, the memos and the queues' prepared rows included
(``/usr/bin/time -v``)."""

V = TypeVar("V")


class Memo(dict[Hashable, V], Generic[V]):
    """Job estimates remembered under everything they depend on: a plan weighs each waiting
    job on the loads of the jobs ordered before it, and the next plan, one arrival or
    completion later, mostly weighs the same jobs on the same loads again (most estimates of
    a Facebook run are repeats).  Bounded: past :data:`MEMO_SIZE` entries it is emptied, which
    costs only recomputation."""

    def put(self, key: Hashable, value: V) -> V:
        if len(self) >= MEMO_SIZE:
            self.clear()
        self[key] = value
        return value


_LEAST: Memo[int] = Memo()
_BALANCED: Memo[tuple[int, IntArray]] = Memo()
_FILLED: Memo[tuple[int, list[tuple[int, int, int]]]] = Memo()
_IDS: dict[Hashable, int] = {}
_NEXT_ID = count()


def _shape_id(shape: Hashable) -> int:
    """A number standing for ``shape`` in memo keys (hashing it once per job state instead of
    at every estimate).  Bounded like the memos: past :data:`MEMO_SIZE` shapes the table starts
    afresh and numbers are never reused, so a memo entry under an old number is merely never
    found again."""
    found = _IDS.get(shape)
    if found is None:
        if len(_IDS) >= MEMO_SIZE:
            _IDS.clear()
        found = _IDS[shape] = next(_NEXT_ID)
    return found


@lru_cache(maxsize=1 << 14)
def _union(lists: tuple[tuple[int, ...], ...]) -> tuple[int, ...]:
    """The sites any of the lists names, ascending: the only sites whose slots and loads a
    job's estimate reads."""
    return tuple(sorted({j for g in lists for j in g}))


def _fill_order(demand: list[int]) -> list[int]:
    """The rows with tasks, largest first (ties by position): the water-fill's order."""
    return [i for i in sorted(range(len(demand)), key=lambda i: (-demand[i], i))
            if demand[i] > 0]


def _reader(sites: tuple[int, ...]) -> Callable[[list[int]], Hashable]:
    """Reads the loads of ``sites`` off a list of every site's load, as a hashable value."""
    return itemgetter(*sites) if sites else (lambda loads: ())


class JobRows:
    """One job's unstarted tasks as its estimates read them, prepared once per job state (a
    plan estimates each job on many loads, and a queue keeps its rows from plan to plan):
    the rows (``demand[i]`` tasks of group ``groups[i]``) as lists, each row's sites, and the
    two shapes the memos key by — the rows themselves (for allocations) and the tasks per
    distinct site list (for the least level, which depends on nothing else) — each with the
    slots and grid, numbered by :func:`_shape_id`, and a reader of the loads of the sites
    each shape names."""

    __slots__ = ("L", "_order", "_ratio", "binding", "dem", "demand", "demand_list",
                 "group_list", "groups", "list_id", "list_loads", "lists", "row_id",
                 "row_loads", "sites_of", "slot_list", "slots")

    def __init__(self, demand: IntArray, groups: IntArray, sites_of: SiteLists,
                 slots: IntArray, L: int) -> None:
        self.demand, self.groups, self.sites_of, self.slots, self.L = (
            demand, groups, sites_of, slots, L)
        self.demand_list: list[int] = demand.tolist()
        self.group_list: list[int] = groups.tolist()
        self.slot_list: list[int] = slots.tolist()
        rows = tuple(sites_of[g] for g in self.group_list)
        where = (L, slots.tobytes())
        self.row_id = _shape_id((tuple(self.demand_list), rows, where))
        self.row_loads = _reader(_union(rows))
        per_list: dict[tuple[int, ...], int] = {}
        for d, lst in zip(self.demand_list, rows, strict=True):
            if d > 0:
                per_list[lst] = per_list.get(lst, 0) + d
        self.lists = tuple(sorted(per_list))
        self.dem = tuple(per_list[k] for k in self.lists)
        self.list_id = _shape_id((self.lists, self.dem, where))
        self.list_loads = _reader(_union(self.lists))
        self._ratio = -1
        self._order: list[int] | None = None
        self.binding = -1
        """The subset that set the least level last (:func:`_equal_slots_level`)."""

    def fill_order(self) -> list[int]:
        """The rows with tasks, largest first (ties by position): the water-fill's order."""
        if self._order is None:
            self._order = _fill_order(self.demand_list)
        return self._order

    def equal_slots(self) -> int:
        """L / u when every site the lists name has the same slots u and u divides L (the
        closed form :func:`_equal_slots_level` then applies), else 0."""
        if self._ratio < 0:
            sites = _union(self.lists)
            u = self.slot_list[sites[0]]
            same = self.L % u == 0 and all(self.slot_list[j] == u for j in sites)
            self._ratio = self.L // u if same else 0
        return self._ratio


def grid(slots: IntArray) -> int:
    """L: levels are integers K meaning K / L rounds of tasks."""
    L = math.lcm(*(int(u) for u in slots))
    return L if L <= MAX_GRID else int(slots.max())


def caps(K: int | IntArray, slots: IntArray, loads: IntArray, L: int) -> IntArray:
    """Tasks each site can still take at level K (K scalar or a column of levels)."""
    k = np.asarray(K, dtype=np.int64)[..., None]
    return np.asarray(np.maximum(k * slots // L - loads, 0), dtype=np.int64)


SiteUse = list[tuple[int, int, int]]
"""(site, tasks there, its slots) for every site an allocation uses."""


def site_use(x_sites: IntArray, slots: IntArray) -> SiteUse:
    """The sites an allocation with ``x_sites[j]`` tasks at site j uses."""
    u = slots.tolist()
    return [(j, t, u[j]) for j, t in enumerate(x_sites.tolist()) if t]


def use_level(use: SiteUse, loads: list[int], L: int) -> int:
    """The level of an allocation (0 if it uses no site): the most rounds, on the grid 1/L,
    any of its sites needs for its load and the allocation's tasks there, rounded up.  Plain
    integers and a plain loop (a third of a generator's time): it is evaluated millions of
    times a simulation on a few sites."""
    best = 0
    for j, x, u in use:
        k = -(-(loads[j] + x) * L // u)
        if k > best:
            best = k
    return best


def level(x_sites: IntArray, slots: IntArray, loads: IntArray, L: int) -> int:
    """The level of an allocation with ``x_sites[j]`` tasks at site j (0 if it has none)."""
    return use_level(site_use(x_sites, slots), loads.tolist(), L)


@lru_cache(maxsize=4096)
def _hall(lists: tuple[tuple[int, ...], ...]
          ) -> tuple[IntArray, FloatArray, FloatArray, IntArray, list[list[int]]]:
    """For groups with the given distinct site lists: the sites N they can use and the
    subsets B of N that Hall's condition must check — their membership over N (rows, as
    floats for a BLAS product; the entries are 0/1), which groups lie inside each, the
    membership as integers and each subset's sites as positions in N (for the closed form of
    equal slots).

    Only *closed, connected* subsets are kept: B equal to the union of the site lists of the
    groups inside it, and not split into two parts with no group inside B straddling them.
    That is exact: a B that is not closed shrinks to that union with the same tasks inside
    and no more room; a split B holds the tasks and the room of its two parts added, so it
    holds whenever both do.  For two consecutive sites of a ring of 10 that leaves the 91 arcs
    of the 1,023 non-empty subsets."""
    N = sorted({j for g in lists for j in g})
    pos = {j: i for i, j in enumerate(N)}
    gmask = [sum(1 << pos[j] for j in g) for g in lists]
    keep: list[int] = []
    for B in range(1, 1 << len(N)):
        inside = [gm for gm in gmask if gm & B == gm]
        reached = inside[0] if inside else 0
        grown = True
        while grown:  # the sites joined to the first group by groups inside B
            grown = False
            for gm in inside:
                if gm & reached and gm | reached != reached:
                    reached |= gm
                    grown = True
        if reached == B:
            keep.append(B)
    masks = np.array(keep, dtype=np.int64)
    member = ((masks[:, None] >> np.arange(len(N))) & 1).astype(float)
    gm_arr = np.array(gmask, dtype=np.int64)
    inside_arr = ((masks[:, None] & gm_arr[None, :]) == gm_arr[None, :]).astype(float)
    return (np.array(N, dtype=np.int64), member, inside_arr, member.astype(np.int64),
            [np.flatnonzero(row).tolist() for row in member])


def site_lists(group_sites: npt.NDArray[np.bool_]) -> SiteLists:
    """The sites of every group from a (G, m) membership matrix."""
    return tuple(tuple(int(j) for j in np.flatnonzero(row)) for row in group_sites)


LEVEL_BATCH = 16
"""Levels tried at once by :func:`min_level`'s search (one matrix product per batch)."""


def min_level(demand: IntArray, groups: IntArray, sites_of: SiteLists, slots: IntArray,
              loads: IntArray, L: int, lower: int = 0) -> int:
    """The least level K at which the job's tasks (``demand[i]`` of group ``groups[i]``) fit;
    ``lower`` is a known lower bound (e.g. the level found before the loads grew): it must not
    exceed the least level, and it only shortens the search.

    Hall's condition over the closed connected subsets (:func:`_hall`) is checked for
    :data:`LEVEL_BATCH` levels at once: first the levels just above the lower bound, where
    the answer usually is, then levels spread evenly over what is left, so the search takes
    one or two products instead of a bisection's many.  The least level depends on nothing
    but the tasks per site list and the slots and loads of the sites those lists name, so it
    is remembered under exactly that (:class:`Memo`): successive plans weigh the same waiting
    jobs on the same partial loads again and again."""
    return least_level(JobRows(demand, groups, sites_of, slots, L), loads, loads.tolist(),
                       lower)


def least_level(job: JobRows, loads: IntArray, load_list: list[int], lower: int = 0) -> int:
    """:func:`min_level` of a prepared job, the loads given as an array and as a list."""
    if not job.lists:
        return 0
    key = (job.list_id, job.list_loads(load_list))
    least = _LEAST.get(key)
    if least is None:
        least = _LEAST.put(key, _least_level(job, loads, load_list, max(lower, 1)))
    return least


class Subsets(NamedTuple):
    """Hall's condition for one job's tasks per site list (:func:`_subsets`)."""

    N: IntArray
    """The sites the job can use."""
    member: FloatArray
    """The subsets to check over N (0/1 rows, as floats for a BLAS product)."""
    need: FloatArray
    """The tasks that must go inside each subset."""
    member_int: IntArray
    need_int: IntArray
    need_list: list[int]
    sites: list[list[int]]
    """Each subset's sites, as positions in N."""


@lru_cache(maxsize=1 << 16)
def _subsets(lists: tuple[tuple[int, ...], ...], dem: tuple[int, ...]) -> Subsets | None:
    """For the tasks ``dem`` of groups with site lists ``lists``: the sites N, the subsets
    (:func:`_hall`) and the tasks that must go inside each, also as integers and lists (the
    closed form of equal slots); None when the groups reach more than
    :data:`MAX_HALL_SITES` sites (then a max-flow decides)."""
    if len(_union(lists)) > MAX_HALL_SITES:
        return None
    N, member, inside, member_int, sites = _hall(lists)  # shared by every dem of the lists
    need = np.asarray(inside @ np.array(dem, dtype=float))
    need_int = need.astype(np.int64)
    return Subsets(N, member, need, member_int, need_int, need_int.tolist(), sites)


def _least_level(job: JobRows, loads: IntArray, ld_list: list[int], lo: int) -> int:
    """:func:`least_level` computed, searching from ``lo``."""
    lists, dem, slots, sl_list, L = job.lists, job.dem, job.slots, job.slot_list, job.L
    # an upper bound: every group at its first site
    first: dict[int, int] = {}
    for lst, d in zip(lists, dem, strict=True):
        first[lst[0]] = first.get(lst[0], 0) + d
    hi = use_level([(j, t, sl_list[j]) for j, t in first.items()], ld_list, L)
    if lo >= hi:
        return hi
    prepared = _subsets(lists, dem)
    if prepared is None:
        g_idx = np.arange(len(lists), dtype=np.int64)
        dem_arr = np.array(dem, dtype=np.int64)
        while lo < hi:
            mid = (lo + hi) // 2
            if _flow(dem_arr, g_idx, lists, caps(mid, slots, loads, L))[0] == sum(dem):
                hi = mid
            else:
                lo = mid + 1
        return hi
    N, member, need = prepared.N, prepared.member, prepared.need
    r = job.equal_slots()
    if r:
        level, job.binding = _equal_slots_level(prepared, loads[N], r, job.binding)
        return level
    sl, ld = slots[N][:, None], loads[N][:, None]
    dense = True  # the first batch: the levels right above the lower bound
    while lo < hi:
        if dense or hi - lo <= LEVEL_BATCH:
            cand = np.arange(lo, min(hi, lo + LEVEL_BATCH), dtype=np.int64)
        else:
            cand = np.unique(lo + (hi - lo) * np.arange(LEVEL_BATCH, dtype=np.int64)
                             // LEVEL_BATCH)
        dense = False
        room = member @ np.maximum(cand * sl // L - ld, 0).astype(float)  # (subsets, levels)
        ok = (room >= need[:, None]).all(axis=0)
        if ok.any():
            k = int(np.argmax(ok))
            hi = int(cand[k])
            if k:
                lo = int(cand[k - 1]) + 1
            else:
                return hi  # cand[0] == lo: feasible at the bound itself
        else:
            lo = int(cand[-1]) + 1
    return hi


def _equal_slots_level(h: Subsets, loads: IntArray, r: int, hint: int = -1
                       ) -> tuple[int, int]:
    """The least level when every site of N has the same slots u and L = r u: a site then
    takes ``max(floor(K / r) - load, 0)`` tasks, so subset B holds its need n_B from the
    least W = floor(K / r) with sum over B of max(W - load, 0) >= n_B on, which is
    min over t of ceil((n_B + S_t) / t), S_t the sum of B's t least loads (any t sites give
    at least t W - S_t; the sites below W give exactly that).  The least level is r times the
    largest such W over the subsets, computed for all subsets at once (``loads``: N's).
    Returns it and a subset reaching it.

    ``hint``: a subset likely to reach it (the one that did on the job's last loads, most
    often still the one): its W is a lower bound, and if every subset holds at that W (one
    product), it is the answer."""
    if hint >= 0:
        ld = loads.tolist()
        w_hint = _water_level(sorted([ld[k] for k in h.sites[hint]]), h.need_list[hint])
        if (h.member_int @ np.maximum(w_hint - loads, 0) >= h.need_int).all():
            return r * w_hint, hint
    order = loads.argsort(kind="stable")
    inside = h.member_int[:, order]  # subsets x sites by increasing load
    t = inside.cumsum(axis=1)
    total = (inside * loads[order]).cumsum(axis=1)
    total += h.need_int[:, None]
    w = -(-total // np.maximum(t, 1))
    w[t == 0] = _NO_BOUND  # before B's first site: no bound
    per_subset = w.min(axis=1)
    b = int(per_subset.argmax())
    return r * int(per_subset[b]), b


def _water_level(loads: list[int], n: int) -> int:
    """The least W with sum of max(W - load, 0) >= n over ``loads`` (ascending):
    min over t of ceil((n + S_t) / t) (:func:`_equal_slots_level`), stopping at the first
    load already at the best W (it and the loads after it add no room below W)."""
    best, total = -1, n
    for t, load in enumerate(loads, 1):
        if 0 <= best <= load:
            break
        total += load
        w = -(-total // t)
        if best < 0 or w < best:
            best = w
    return best


_NO_BOUND = np.iinfo(np.int64).max


def _flow(demand: IntArray, groups: IntArray, sites_of: SiteLists,
          site_caps: IntArray, start: list[tuple[int, int, int]] | None = None
          ) -> tuple[int, IntArray]:
    """Max-flow of the job's network with the given site capacities: (value, (G, m) flows),
    started from the (row, site, tasks) takes ``start`` if given.

    The network has at most a few dozen nodes, so a plain Edmonds-Karp in Python (shortest
    augmenting paths, started from a greedy flow) beats building a sparse matrix per call;
    tests check its value against ``scipy.sparse.csgraph.maximum_flow``."""
    G, m = len(groups), len(site_caps)
    dem = demand.tolist()
    room = site_caps.tolist()
    adj = [sites_of[g] for g in groups.tolist()]
    x = [[0] * m for _ in range(G)]
    left = dem[:]
    if start is not None:  # a given start, cut down to the capacities
        for i, j, t in start:
            x[i][j] = t
        for j in range(m):
            over = sum(x[i][j] for i in range(G)) - room[j]
            for i in reversed(range(G)):
                if over <= 0:
                    break
                t = min(over, x[i][j])
                x[i][j] -= t
                over -= t
            room[j] -= sum(x[i][j] for i in range(G))
        left = [dem[i] - sum(x[i]) for i in range(G)]
    for i in range(G):  # greedy start: each group into its sites with room
        for j in adj[i]:
            if left[i] == 0:
                break
            t = min(left[i], room[j])
            if t:
                x[i][j] += t
                left[i] -= t
                room[j] -= t
    rev: list[list[int]] = [[] for _ in range(m)]  # groups that can reach each site
    for i in range(G):
        for j in adj[i]:
            rev[j].append(i)
    while any(left):
        # BFS from groups with tasks left over (group -> site forward, site -> group on flow)
        prev_site: dict[int, int] = {}
        prev_group: dict[int, int] = {}
        frontier = [i for i in range(G) if left[i]]
        seen_g = set(frontier)
        end = -1
        while frontier and end < 0:
            nxt: list[int] = []
            for i in frontier:
                for j in adj[i]:
                    if j in prev_site:
                        continue
                    prev_site[j] = i
                    if room[j] > 0:
                        end = j
                        break
                    for i2 in rev[j]:
                        if i2 not in seen_g and x[i2][j] > 0:
                            seen_g.add(i2)
                            prev_group[i2] = j
                            nxt.append(i2)
                if end >= 0:
                    break
            frontier = nxt
        if end < 0:
            break
        # bottleneck along site end <- group <- site <- ... <- group with tasks left
        path: list[tuple[int, int]] = []
        j = end
        while True:
            i = prev_site[j]
            path.append((i, j))
            if i not in prev_group:
                break
            j = prev_group[i]
        root = path[-1][0]
        b = min(room[end], left[root])
        for k in range(len(path) - 1):  # flow moved off (group k, site of step k + 1)
            b = min(b, x[path[k][0]][path[k + 1][1]])
        for k, (i, j) in enumerate(path):
            x[i][j] += b
            if k + 1 < len(path):
                x[i][path[k + 1][1]] -= b
        room[end] -= b
        left[root] -= b
    value = sum(dem) - sum(left)
    return value, np.array(x, dtype=np.int64).reshape(G, m)


def balance(demand: IntArray, groups: IntArray, sites_of: SiteLists, slots: IntArray,
            loads: IntArray, L: int, lower: int = 0) -> tuple[int, IntArray]:
    """The least level and an allocation reaching it: (K, x) with x (len(groups), m), rows
    summing to ``demand``, read off a maximum flow at level K (augmented from the greedy
    water-filling, so that sites below level K share the tasks evenly)."""
    return balanced(JobRows(demand, groups, sites_of, slots, L), loads, loads.tolist(), lower)


def balanced(job: JobRows, loads: IntArray, load_list: list[int], lower: int = 0
             ) -> tuple[int, IntArray]:
    """:func:`balance` of a prepared job, the loads given as an array and as a list."""
    key = (job.row_id, job.row_loads(load_list))
    done = _BALANCED.get(key)
    if done is None:
        K = least_level(job, loads, load_list, lower)
        # of the many flows reaching K, take one near the water-filled allocation: the sites
        # below level K are then filled evenly rather than up to K in index order
        K_filled, takes = _fill_under(key, job, load_list)
        G, m = len(job.group_list), len(job.slot_list)
        if K_filled <= K:  # within every site's room at K and complete: the flow keeps it
            x = _takes_array(takes, G, m)
        else:
            value, x = _flow(job.demand, job.groups, job.sites_of,
                             caps(K, job.slots, loads, job.L), takes)
            if value != sum(job.demand_list):  # Hall and max-flow disagree: a bug
                raise AssertionError(f"level {K} admits {value} of {sum(job.demand_list)} "
                                     "tasks")
        done = _BALANCED.put(key, (K, x))
    return done[0], done[1].copy()


def greedy(demand: IntArray, groups: IntArray, sites_of: SiteLists, slots: IntArray,
           loads: IntArray, L: int) -> tuple[int, IntArray]:
    """ATA-Greedy's allocation (Fig. 3.10): groups in decreasing size (ties by position), each
    water-filled onto its least loaded sites so that their loads in rounds
    ``(loads + x) / slots`` end as even as whole tasks allow (a remainder task goes to the
    site whose load after it is least, a tie to the site more loaded before, as Fig. 3.10).
    Returns (level, x)."""
    return filled(JobRows(demand, groups, sites_of, slots, L), loads.tolist())


def filled(job: JobRows, load_list: list[int]) -> tuple[int, IntArray]:
    """:func:`greedy` of a prepared job."""
    K, takes = _filled(job, load_list)
    return K, _takes_array(takes, len(job.group_list), len(job.slot_list))


def _takes_array(takes: list[tuple[int, int, int]], G: int, m: int) -> IntArray:
    """The (G, m) allocation of the (row, site, tasks) takes."""
    x = np.zeros((G, m), dtype=np.int64)
    for i, j, t in takes:
        x[i, j] = t
    return x


def greedy_level(demand: IntArray, groups: IntArray, sites_of: SiteLists, slots: IntArray,
                 loads: IntArray, L: int) -> int:
    """The level of :func:`greedy`'s allocation, without building it."""
    return filled_level(JobRows(demand, groups, sites_of, slots, L), loads.tolist())


def filled_level(job: JobRows, load_list: list[int]) -> int:
    """:func:`greedy_level` of a prepared job."""
    return _filled(job, load_list)[0]


def _filled(job: JobRows, load_list: list[int]) -> tuple[int, list[tuple[int, int, int]]]:
    """:func:`_water_fill`, remembered (:class:`Memo`; the takes are not to be changed)."""
    return _fill_under((job.row_id, job.row_loads(load_list)), job, load_list)


def _fill_under(key: Hashable, job: JobRows, load_list: list[int]
                ) -> tuple[int, list[tuple[int, int, int]]]:
    """:func:`_filled` with its memo key already made."""
    done = _FILLED.get(key)
    if done is None:
        done = _FILLED.put(key, _water_fill(job.demand_list, job.group_list, job.sites_of,
                                            job.slot_list, load_list, job.L,
                                            job.fill_order()))
    return done


def _fill_two(n: int, c0: float, u0: float, c1: float, u1: float) -> tuple[int, int]:
    """:func:`_water_fill`'s takes for a group of two sites (loads c, slots u), the same
    float operations in the same order without its lists (most groups have two sites)."""
    r0, r1 = c0 / u0, c1 / u1
    if r1 < r0:  # the less loaded first (a tie keeps site order, as the stable sort)
        lam = (n + c1) / u1
        if lam > r0:
            lam = (n + (c1 + c0)) / (u1 + u0)
    else:
        lam = (n + c0) / u0
        if lam > r1:
            lam = (n + (c0 + c1)) / (u0 + u1)
    a0 = lam * u0 - c0 + 1e-9  # max(int(a), 0), without the calls
    t0 = int(a0) if a0 > 0 else 0
    a1 = lam * u1 - c1 + 1e-9
    t1 = int(a1) if a1 > 0 else 0
    while t0 + t1 > n:  # float slack: undo from the most loaded (a tie: the first)
        if (((c1 + t1) / u1 if t1 else -1) > ((c0 + t0) / u0 if t0 else -1)):
            t1 -= 1
        else:
            t0 -= 1
    for _ in range(n - t0 - t1):  # Fig. 3.10: a tie goes to the more loaded (then site 0)
        a0, a1 = (c0 + t0 + 1) / u0, (c1 + t1 + 1) / u1
        if a1 < a0 or (a1 == a0 and r1 > r0):
            t1 += 1
        else:
            t0 += 1
    return t0, t1


def _water_fill(demand: list[int], groups: list[int], sites_of: SiteLists, u_all: list[int],
                loads: list[int], L: int, order: list[int] | None = None
                ) -> tuple[int, list[tuple[int, int, int]]]:
    """:func:`greedy` on plain lists: (level, (row, site, tasks) for every positive take);
    ``order``: the rows with tasks, largest first (:meth:`JobRows.fill_order`), if known."""
    cur = loads[:]
    takes: list[tuple[int, int, int]] = []
    if order is None:
        order = _fill_order(demand)
    for i in order:
        n = demand[i]
        S = sites_of[groups[i]]
        if len(S) == 1:  # what the filling below ends with for one site, whatever the floats
            takes.append((i, S[0], n))
            cur[S[0]] += n
            continue
        if len(S) == 2:
            j0, j1 = S
            t0, t1 = _fill_two(n, float(cur[j0]), float(u_all[j0]), float(cur[j1]),
                               float(u_all[j1]))
            if t0:
                takes.append((i, j0, t0))
                cur[j0] += t0
            if t1:
                takes.append((i, j1, t1))
                cur[j1] += t1
            continue
        u = [float(u_all[j]) for j in S]
        c = [float(cur[j]) for j in S]
        ratio = [ck / uk for ck, uk in zip(c, u, strict=True)]
        # continuous water level lam: sum max(0, lam u - c) = n, over sites sorted by c/u
        o = sorted(range(len(S)), key=ratio.__getitem__)
        lam, uu, cc = 0.0, 0.0, 0.0
        for r, k in enumerate(o):
            uu += u[k]
            cc += c[k]
            lam = (n + cc) / uu
            if r + 1 == len(o) or lam <= ratio[o[r + 1]]:
                break
        take = [max(int(lam * uk - ck + 1e-9), 0) for ck, uk in zip(c, u, strict=True)]
        while sum(take) > n:  # float slack: undo from the most loaded
            k = max(range(len(S)), key=lambda k: ((c[k] + take[k]) / u[k] if take[k] else -1))
            take[k] -= 1
        for _ in range(n - sum(take)):  # Fig. 3.10: a tie goes to the more loaded
            k = min(range(len(S)), key=lambda k: ((c[k] + take[k] + 1) / u[k], -ratio[k], k))
            take[k] += 1
        for k, j in enumerate(S):
            if take[k]:
                takes.append((i, j, take[k]))
                cur[j] += take[k]
    best = 0  # the level: use_level of the sites taken, on the loads with the takes added
    for j in {j for _, j, _ in takes}:
        k = -(-cur[j] * L // u_all[j])
        if k > best:
            best = k
    return best, takes
