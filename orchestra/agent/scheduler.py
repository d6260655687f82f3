"""The batch scheduler: runs a sub-task DAG with asyncio under parallel and budget limits, with retries."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestra.agent.graph import TaskGraph
from orchestra.agent.memory import Evidence, EvidenceStore, Status, fresh
from orchestra.agent.refs import ReferenceError_, substitute
from orchestra.backends.base import SubResult
from orchestra.config import AgentParams
from orchestra.errors import OrchestraError
from orchestra.schemas import SubTask

__all__ = ["Limits", "NodeInputs", "Runner", "measure_overhead", "run_graph"]


@dataclass(frozen=True)
class Limits:
    """How a graph may run: slots, estimated-cost budget, per-attempt timeout, extra attempts."""

    max_parallel: int = 4
    cost_budget: float | None = None
    timeout_s: float | None = 30.0
    max_retries: int = 1

    def __post_init__(self) -> None:
        if self.max_parallel < 1:
            raise ValueError(f"max_parallel must be >= 1, got {self.max_parallel}")
        if self.max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {self.max_retries}")
        if self.timeout_s is not None and self.timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {self.timeout_s}")

    @classmethod
    def from_params(cls, agent: AgentParams, *, linear: bool = False) -> Limits:
        """Limits from ``params.agent``; ``linear=True`` gives the one-at-a-time baseline."""
        return cls(
            max_parallel=1 if linear else agent.max_parallel,
            cost_budget=agent.cost_budget,
            timeout_s=agent.subagent_timeout_s,
            max_retries=agent.max_retries,
        )


@dataclass
class NodeInputs:
    """A runner's private inputs for one attempt (fresh copies: nothing is shared between nodes).

    ``raw_goal`` is the goal as the policy wrote it; ``values`` maps 'M<n>'/'E<n>' to what those
    references stand for (so a sub-agent can substitute them into tool arguments, e.g. code with
    ``refs.substitute(expr, values, code=True)``); ``dependencies`` are the results it depends on.
    """

    raw_goal: str
    values: dict[str, Any] = field(default_factory=dict)
    dependencies: dict[str, SubResult] = field(default_factory=dict)
    attempt: int = 1


#: ``runner(subtask_with_resolved_goal, inputs) -> SubResult``; fails by returning ``ok=False`` or
#: raising an OrchestraError (BackendError, LMError, ToolError, ...). Anything else it raises is a bug.
Runner = Callable[[SubTask, NodeInputs], Awaitable[SubResult]]


class _Run:
    """The state of one ``run_graph`` call (kept private so concurrent nodes share nothing else)."""

    def __init__(
        self,
        graph: TaskGraph,
        runner: Runner,
        limits: Limits,
        prior: Mapping[str, Evidence],
        modal_values: Mapping[str, Any],
        est_cost: Callable[[SubTask], float] | None,
        turn: int,
    ) -> None:
        self.graph, self.runner, self.limits = graph, runner, limits
        self.prior, self.modal_values, self.est_cost, self.turn = prior, modal_values, est_cost, turn
        self.t0 = time.perf_counter()
        self.finished: dict[str, Evidence] = {}

    def now(self) -> float:
        return time.perf_counter() - self.t0

    def record(self, node_id: str, status: Status, error: str | None = None) -> Evidence:
        """A node's evidence before (or instead of) running it: what was asked, no value yet."""
        node = self.graph.nodes[node_id]
        return Evidence(
            id=node_id,
            goal=node.goal,
            status=status,
            backend=node.backend,
            tools=list(node.tools),
            depends_on=list(node.depends_on),
            modalities=list(node.modalities),
            error=error,
            turn=self.turn,
        )

    def skip(self, node_id: str, reason: str) -> None:
        self.finished[node_id] = self.record(node_id, "skipped", reason)

    def skip_dependants(self, node_id: str) -> None:
        for d in self.graph.descendants(node_id):
            if d not in self.finished:
                self.skip(d, f"dependency {node_id} did not succeed")

    async def attempt_all(self, node_id: str) -> Evidence:
        node = self.graph.nodes[node_id]
        base = self.record(node_id, "failed")
        values = dict(self.modal_values)
        deps = {
            **{i: e for i, e in self.prior.items() if e.ok},
            **{i: self.finished[i] for i in self.graph.ancestors(node_id)},
        }
        values.update({i: e.value for i, e in deps.items() if e.ok})
        try:
            goal = substitute(node.goal, values)
        except ReferenceError_ as e:
            return base.model_copy(
                update={"error": f"cannot resolve goal: {e}", "start_s": self.now(), "end_s": self.now()}
            )
        base.goal = goal
        base.planned_goal = node.goal if goal != node.goal else None
        start = self.now()
        status: Status = "failed"
        error = "no attempt made"
        calls, tin, tout, cost = [], 0, 0, 0.0
        ran_on: dict[str, Any] = {}  # the backend (and why) of the last attempt that returned
        attempts = 0

        def spent() -> dict[str, Any]:  # accounting over every attempt so far, and the timings
            return {
                "tool_calls": calls,
                "input_tokens": tin,
                "output_tokens": tout,
                "cost": cost,
                "start_s": start,
                "end_s": self.now(),
                "attempts": attempts,
            }

        for attempt in range(1, self.limits.max_retries + 2):
            attempts = attempt
            task = node.model_copy(
                update={
                    "goal": goal,
                    "modalities": list(node.modalities),
                    "tools": list(node.tools),
                    "depends_on": list(node.depends_on),
                }
            )
            inputs = NodeInputs(
                raw_goal=node.goal,
                values={k: fresh(v) for k, v in values.items()},
                dependencies={d: deps[d].to_result() for d in node.depends_on if d in deps},
                attempt=attempt,
            )
            try:
                res = await asyncio.wait_for(self.runner(task, inputs), self.limits.timeout_s)
            except TimeoutError:
                status, error = "timeout", f"attempt {attempt} timed out after {self.limits.timeout_s:g}s"
                continue
            except OrchestraError as e:  # a failing sub-agent is recorded; any other raise is a bug
                status, error = "failed", f"attempt {attempt}: {type(e).__name__}: {e}"
                continue
            calls += res.tool_calls
            ran_on = {"backend": res.backend or node.backend, "routing": res.routing}
            tin, tout, cost = tin + res.input_tokens, tout + res.output_tokens, cost + res.cost
            if res.ok:
                return base.model_copy(
                    update={
                        "status": "ok",
                        "value": res.value,
                        "claim": res.claim,
                        "sources": list(res.sources),
                        "backend": res.backend or node.backend,
                        "confidence": res.confidence,
                        "routing": res.routing,
                        **spent(),
                    }
                )
            status, error = "failed", f"attempt {attempt}: {res.error or 'sub-agent reported failure'}"
        return base.model_copy(update={"status": status, "error": error, **ran_on, **spent()})

    async def run(self) -> list[Evidence]:
        g, lim = self.graph, self.limits
        for i in g.order:
            bad = [d for d in g.external_deps[i] if d not in self.prior or not self.prior[d].ok]
            if bad and i not in self.finished:
                self.skip(i, f"dependency {bad[0]} did not succeed")
                self.skip_dependants(i)
        ok: set[str] = set()
        running: dict[asyncio.Task[Evidence], tuple[str, float]] = {}
        spent = 0.0
        try:
            while True:
                slots = lim.max_parallel - len(running)
                if slots > 0:
                    started = set(self.finished) | {i for i, _ in running.values()}
                    batch = g.next_batch(g.ready(ok, started), slots, lim.cost_budget, self.est_cost, spent)
                    if not running:
                        for i in batch.unaffordable:
                            self.skip(i, f"estimated cost exceeds the remaining budget {lim.cost_budget}")
                            self.skip_dependants(i)
                    for i in batch.run:
                        est = float(self.est_cost(g.nodes[i])) if self.est_cost else 0.0
                        spent += est
                        running[asyncio.create_task(self.attempt_all(i), name=f"subtask-{i}")] = (i, est)
                if not running:
                    break
                done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                for t in sorted(done, key=lambda t: g.position[running[t][0]]):
                    i, est = running.pop(t)
                    ev = t.result()
                    self.finished[i] = ev
                    spent += ev.total_cost - est
                    if ev.ok:
                        ok.add(i)
                    else:
                        self.skip_dependants(i)
        finally:
            for t in running:
                t.cancel()
        return [self.finished[i] for i in g.order]


async def run_graph(
    graph: TaskGraph | Sequence[SubTask],
    runner: Runner,
    limits: Limits | None = None,
    *,
    prior: Mapping[str, Evidence] | None = None,
    modal_values: Mapping[str, Any] | None = None,
    est_cost: Callable[[SubTask], float] | None = None,
    turn: int = 0,
) -> list[Evidence]:
    """Run every node of ``graph``; return one Evidence per node in topological order.

    Nodes start as soon as their dependencies succeeded and a slot is free (``limits.max_parallel``;
    1 = the linear baseline), in topological order, while their ``est_cost`` fits the remaining
    ``limits.cost_budget`` (reserved at start, replaced by the actual cost when done). Each attempt
    gets ``limits.timeout_s``; an OrchestraError raised, a timeout or ``ok=False`` is retried up to
    ``limits.max_retries`` times, then recorded as ``failed``/``timeout``. Any other exception a
    runner raises (KeyError, TypeError, ...) is a bug, not a failed sub-task: it propagates out of
    ``run_graph`` and the nodes still running are cancelled. Dependants of a node that
    did not succeed, and nodes that can never fit the budget, are recorded as ``skipped``.
    ``prior`` holds evidence from earlier turns (dependencies on it count as met when ok);
    ``#M<n>``/``#E<n>`` in goals are substituted from ``modal_values``, ok prior evidence and the
    node's ancestors; a goal that cannot resolve fails at once (``attempts=0``, no retry). Actual
    costs count against the budget too, so once spending passes it nodes not yet started are skipped.
    ``start_s``/``end_s`` are seconds since the call began. A timed-out runner is cancelled;
    work it pushed to a thread finishes in the background.
    """
    prior = dict(prior or {})
    g = graph if isinstance(graph, TaskGraph) else TaskGraph(graph, external=prior)
    run = _Run(g, runner, limits or Limits(), prior, dict(modal_values or {}), est_cost, turn)
    return await run.run()


def measure_overhead(n_nodes: int = 10, repeats: int = 200) -> float:
    """Mean seconds per decision spent on graph building, scheduling and merging into memory for an
    ``n_nodes`` DAG (node k depends on k//2 and k-1 where they exist) with zero-time runners."""

    async def zero(task: SubTask, inputs: NodeInputs) -> SubResult:
        return SubResult(value=len(inputs.dependencies), claim=task.goal)

    nodes = [
        SubTask(
            id=f"E{k}",
            goal=f"step {k} uses #E{k - 1}" if k > 1 else "step 1",
            depends_on=sorted({f"E{j}" for j in (k // 2, k - 1) if j >= 1}),
        )
        for k in range(1, n_nodes + 1)
    ]

    async def bench() -> float:
        await run_graph(nodes, zero)  # warm-up
        t = time.perf_counter()
        for _ in range(repeats):
            store = EvidenceStore()
            store.extend(await run_graph(TaskGraph(nodes), zero, Limits(max_parallel=4)))
        return (time.perf_counter() - t) / repeats

    return asyncio.run(bench())
