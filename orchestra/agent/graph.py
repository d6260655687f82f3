"""The dependency graph of sub-tasks: validation, ready set, budgeted parallel batches, critical path."""

from __future__ import annotations

import functools
import heapq
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from orchestra.agent.refs import SUBTASK_ID_PATTERN
from orchestra.errors import OrchestraError
from orchestra.schemas import SubTask

__all__ = ["Batch", "GraphError", "TaskGraph", "check_nodes", "find_cycle", "natural_key", "tree_mapping"]

GraphErrorKind = Literal["duplicate_id", "unknown_dependency", "cycle"]


class GraphError(OrchestraError):
    """The sub-tasks do not form a valid DAG; ``kind`` says why, the message names the ids."""

    def __init__(self, kind: GraphErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind: GraphErrorKind = kind


@functools.lru_cache(maxsize=4096)
def natural_key(node_id: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key that orders 'E2' before 'E10' (digits compare as numbers)."""
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"(\d+)", node_id) if p)


def _number(sid: str) -> int:
    return int(sid[1:]) if SUBTASK_ID_PATTERN.fullmatch(sid) else 0


def tree_mapping(deps: Mapping[str, Sequence[str]]) -> dict[str, str]:
    """Old id -> tree id for the graph ``deps`` (id -> its dependencies, in operand order), in
    pre-order: roots (ids nothing depends on) by their old number, then each node's dependencies
    (the i-th dependency of ``E<p>`` is ``E<p><i>``; training/tree_ids.py). The keys' order is the
    visiting order. Raises ValueError when the tree ids would collide (a node with more than nine
    dependencies, more than nine roots)."""
    depended = {d for ds in deps.values() for d in ds}
    roots = sorted((n for n in deps if n not in depended), key=_number)
    out: dict[str, str] = {}

    def visit(node: str, name: str) -> None:
        out[node] = name
        for k, child in enumerate(deps[node], 1):
            if child in deps and child not in out:
                visit(child, f"{name}{k}")

    for k, root in enumerate(roots, 1):
        visit(root, f"E{k}")
    for node in sorted(deps, key=_number):  # a cycle's nodes are no root's descendants
        if node not in out:
            out[node] = f"E{len(roots) + 1}{len(out)}"
    if len(set(out.values())) != len(out) or any(len(d) > 9 for d in deps.values()) or len(roots) > 9:
        raise ValueError(f"tree ids collide for {dict(deps)}")
    return out


def find_cycle(deps: Mapping[str, Sequence[str]]) -> list[str] | None:
    """A dependency cycle as a path ``[a, b, ..., a]`` (deterministic: smallest ids first), or None."""
    colour: dict[str, int] = {}
    for start in sorted(deps, key=natural_key):
        if colour.get(start):
            continue
        stack: list[tuple[str, list[str]]] = [(start, sorted(deps[start], key=natural_key))]
        path = [start]
        colour[start] = 1
        while stack:
            node, todo = stack[-1]
            if not todo:
                colour[node] = 2
                stack.pop()
                path.pop()
                continue
            nxt = todo.pop(0)
            if nxt not in deps:
                continue
            if colour.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if not colour.get(nxt):
                colour[nxt] = 1
                path.append(nxt)
                stack.append((nxt, sorted(deps[nxt], key=natural_key)))
    return None


def check_nodes(nodes: Sequence[SubTask], external: Collection[str] = ()) -> None:
    """Raise :class:`GraphError` if ids repeat (in the batch or with ``external``, the ids that
    already exist), a dependency names an id that is neither a node nor external, or the
    dependencies form a cycle. Checks run in that order; the first problem is reported."""
    seen: set[str] = set()
    for node in nodes:
        if node.id in seen or node.id in external:
            where = "an earlier sub-task" if node.id in external else "another sub-task in the batch"
            raise GraphError("duplicate_id", f"sub-task id {node.id!r} is already used by {where}")
        seen.add(node.id)
    for node in nodes:
        unknown = [d for d in node.depends_on if d not in seen and d not in external]
        if unknown:
            known = ", ".join(sorted(seen | set(external), key=natural_key))
            raise GraphError(
                "unknown_dependency", f"{node.id} depends on unknown id(s) {unknown}; known ids: {known}"
            )
    cycle = find_cycle({n.id: [d for d in n.depends_on if d in seen] for n in nodes})
    if cycle:
        raise GraphError("cycle", "dependency cycle: " + " -> ".join(cycle))


@dataclass(frozen=True)
class Batch:
    """What to launch now (``run``) and what can never fit the remaining budget (``unaffordable``)."""

    run: list[str] = field(default_factory=list)
    unaffordable: list[str] = field(default_factory=list)


class TaskGraph:
    """A validated DAG of sub-tasks. Dependencies on ``external`` ids (results from earlier turns)
    count as already satisfied; only dependencies between the graph's own nodes are scheduled.

    Everything here is deterministic: node order is the topological order with ties broken by
    :func:`natural_key` (E1, E2, ..., E10).
    """

    def __init__(self, nodes: Sequence[SubTask], external: Collection[str] = ()) -> None:
        check_nodes(nodes, external)
        self.nodes: dict[str, SubTask] = {n.id: n for n in nodes}
        self.deps: dict[str, tuple[str, ...]] = {
            n.id: tuple(sorted({d for d in n.depends_on if d in self.nodes}, key=natural_key)) for n in nodes
        }
        self.external_deps: dict[str, tuple[str, ...]] = {
            n.id: tuple(sorted({d for d in n.depends_on if d not in self.nodes}, key=natural_key))
            for n in nodes
        }
        self.dependants: dict[str, list[str]] = {i: [] for i in self.nodes}
        for i, ds in self.deps.items():
            for d in ds:
                self.dependants[d].append(i)
        self.order: list[str] = self._topological()
        self.position: dict[str, int] = {i: k for k, i in enumerate(self.order)}
        for ds in self.dependants.values():
            ds.sort(key=self.position.__getitem__)

    def _topological(self) -> list[str]:
        indeg = {i: len(ds) for i, ds in self.deps.items()}
        heap = [(natural_key(i), i) for i, n in indeg.items() if n == 0]
        heapq.heapify(heap)
        order: list[str] = []
        while heap:
            _, i = heapq.heappop(heap)
            order.append(i)
            for j in self.dependants[i]:
                indeg[j] -= 1
                if indeg[j] == 0:
                    heapq.heappush(heap, (natural_key(j), j))
        return order

    def __len__(self) -> int:
        return len(self.nodes)

    def ready(self, done: Collection[str], started: Collection[str] = ()) -> list[str]:
        """Nodes not yet started whose graph dependencies are all in ``done``, in topological order."""
        return [
            i
            for i in self.order
            if i not in started and i not in done and all(d in done for d in self.deps[i])
        ]

    def ancestors(self, node_id: str) -> set[str]:
        """Every node ``node_id`` depends on, directly or transitively."""
        out: set[str] = set()
        todo = list(self.deps[node_id])
        while todo:
            d = todo.pop()
            if d not in out:
                out.add(d)
                todo.extend(self.deps[d])
        return out

    def descendants(self, node_id: str) -> list[str]:
        """Every node that depends on ``node_id``, directly or transitively, in topological order."""
        out: set[str] = set()
        todo = list(self.dependants[node_id])
        while todo:
            d = todo.pop()
            if d not in out:
                out.add(d)
                todo.extend(self.dependants[d])
        return sorted(out, key=self.position.__getitem__)

    def next_batch(
        self,
        ready: Sequence[str],
        max_parallel: int,
        cost_budget: float | None = None,
        est_cost: Callable[[SubTask], float] | Mapping[str, float] | None = None,
        spent: float = 0.0,
    ) -> Batch:
        """Pick up to ``max_parallel`` of ``ready`` (in the given order) whose estimated costs fit
        ``cost_budget - spent``. A node whose own estimate exceeds what is left can never run
        (the budget only shrinks) and is returned as unaffordable; a node that only fails to fit
        beside cheaper earlier picks waits for a later batch. ``cost_budget=None``: no limit."""
        if max_parallel < 1:
            raise ValueError(f"max_parallel must be >= 1, got {max_parallel}")
        left = float("inf") if cost_budget is None else cost_budget - spent
        run: list[str] = []
        unaffordable: list[str] = []
        used = 0.0
        for i in ready:
            cost = self._cost(i, est_cost)
            if cost > left + 1e-12:
                unaffordable.append(i)
            elif len(run) < max_parallel and used + cost <= left + 1e-12:
                run.append(i)
                used += cost
        return Batch(run=run, unaffordable=unaffordable)

    def _cost(self, node_id: str, est_cost: Callable[[SubTask], float] | Mapping[str, float] | None) -> float:
        if est_cost is None:
            return 0.0
        if callable(est_cost):
            return float(est_cost(self.nodes[node_id]))
        return float(est_cost.get(node_id, 0.0))

    def depth_levels(self) -> list[list[str]]:
        """Nodes grouped by longest distance from a root: level k can run once levels < k are done."""
        level: dict[str, int] = {}
        for i in self.order:
            level[i] = 1 + max((level[d] for d in self.deps[i]), default=-1)
        out: list[list[str]] = [[] for _ in range(max(level.values(), default=-1) + 1)]
        for i in self.order:
            out[level[i]].append(i)
        return out

    def critical_path(self, durations: Mapping[str, float]) -> tuple[float, list[str]]:
        """The longest dependency chain by summed ``durations`` (missing nodes count 0): the lower
        bound on wall time with unlimited parallelism. Returns (length, node ids root first)."""
        best: dict[str, tuple[float, str | None]] = {}
        for i in self.order:
            prev = max(self.deps[i], key=lambda d: (best[d][0], -self.position[d]), default=None)
            base = best[prev][0] if prev is not None else 0.0
            best[i] = (base + float(durations.get(i, 0.0)), prev)
        if not best:
            return 0.0, []
        end = max(self.order, key=lambda i: (best[i][0], -self.position[i]))
        path: list[str] = []
        cur: str | None = end
        while cur is not None:
            path.append(cur)
            cur = best[cur][1]
        return best[end][0], path[::-1]
