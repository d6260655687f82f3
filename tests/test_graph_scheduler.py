"""Dependency graph and scheduler: real overlap in time, dependency order, failures, timeouts, budget."""

import asyncio
import random
import time

import pytest

from orchestra.agent.graph import GraphError, TaskGraph, check_nodes, natural_key
from orchestra.agent.memory import Evidence, EvidenceStore
from orchestra.agent.scheduler import Limits, NodeInputs, measure_overhead, run_graph
from orchestra.backends.base import BackendError, SubResult
from orchestra.config import AgentParams
from orchestra.lm.chat import LMError
from orchestra.schemas import SubTask


def node(id: str, *deps: str, goal: str | None = None) -> SubTask:
    return SubTask(id=id, goal=goal or f"goal of {id}", depends_on=list(deps))


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


def overlap(a: Evidence, b: Evidence) -> bool:
    assert a.start_s is not None and a.end_s is not None and b.start_s is not None and b.end_s is not None
    return a.start_s < b.end_s and b.start_s < a.end_s


# --- graph ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("nodes", "external", "kind"),
    [
        ([node("E1"), node("E1")], (), "duplicate_id"),
        ([node("E2")], ("E2",), "duplicate_id"),
        ([node("E1", "E5")], (), "unknown_dependency"),
        ([node("E1", "E1")], (), "cycle"),
        ([node("E1", "E3"), node("E2", "E1"), node("E3", "E2")], (), "cycle"),
    ],
)
def test_graph_validation(nodes: list[SubTask], external: tuple[str, ...], kind: str) -> None:
    with pytest.raises(GraphError) as e:
        TaskGraph(nodes, external)
    assert e.value.kind == kind


def test_order_ready_and_levels() -> None:
    g = TaskGraph([node("E10"), node("E2"), node("E3", "E2", "E10"), node("E4", "E1")], external={"E1"})
    assert g.order == ["E2", "E4", "E10", "E3"]  # E4's only dependency is external (already met)
    assert g.ready(done=set()) == ["E2", "E4", "E10"]
    assert g.ready(done={"E2"}, started={"E4"}) == ["E10"]
    assert g.ready(done={"E2", "E10"}, started={"E4"}) == ["E3"]
    assert g.depth_levels() == [["E2", "E4", "E10"], ["E3"]]
    assert g.ancestors("E3") == {"E2", "E10"} and g.descendants("E2") == ["E3"]
    assert sorted(["E10", "E9", "E1"], key=natural_key) == ["E1", "E9", "E10"]
    check_nodes([node("E5", "E1")], external={"E1"})  # no error


def test_next_batch_respects_parallelism_and_budget() -> None:
    g = TaskGraph([node(f"E{i}") for i in range(1, 6)])
    ready = g.ready(set())
    assert g.next_batch(ready, max_parallel=2).run == ["E1", "E2"]
    cost = {"E1": 1.0, "E2": 5.0, "E3": 1.0, "E4": 2.0, "E5": 0.5}
    b = g.next_batch(ready, max_parallel=10, cost_budget=3.0, est_cost=cost)
    assert b.run == ["E1", "E3", "E5"] and b.unaffordable == ["E2"]  # E4 fits alone later, so it waits
    b = g.next_batch(["E4"], max_parallel=10, cost_budget=3.0, est_cost=cost, spent=1.5)
    assert b.run == [] and b.unaffordable == ["E4"]


def test_critical_path() -> None:
    g = TaskGraph([node("E1"), node("E2"), node("E3", "E1", "E2"), node("E4", "E3"), node("E5", "E1")])
    length, path = g.critical_path({"E1": 1.0, "E2": 3.0, "E3": 1.0, "E4": 0.5, "E5": 3.0})
    assert path == ["E2", "E3", "E4"] and length == pytest.approx(4.5)
    length, path = g.critical_path({"E1": 1.0, "E5": 9.0})
    assert path == ["E1", "E5"] and length == pytest.approx(10.0)
    assert TaskGraph([]).critical_path({}) == (0.0, [])


# --- scheduler ----------------------------------------------------------------------------------------


async def sleepy(task: SubTask, inputs: NodeInputs) -> SubResult:
    await asyncio.sleep(0.3)
    return SubResult(value=task.id, claim=f"done {task.goal}")


def test_independent_branches_overlap_in_time() -> None:
    nodes = [node("E1"), node("E2"), node("E3", "E1", "E2")]
    t = time.perf_counter()
    ev = run(run_graph(nodes, sleepy, Limits(max_parallel=4)))
    wall = time.perf_counter() - t
    by = {e.id: e for e in ev}
    assert all(e.ok for e in ev)
    assert overlap(by["E1"], by["E2"])
    assert by["E3"].start_s >= max(by["E1"].end_s, by["E2"].end_s)  # type: ignore[operator]
    assert wall < sum(e.latency_s for e in ev) - 0.2  # 0.6 s instead of 0.9 s
    assert [e.id for e in ev] == ["E1", "E2", "E3"]


def test_blocking_work_in_threads_overlaps() -> None:
    async def blocking(task: SubTask, inputs: NodeInputs) -> SubResult:
        await asyncio.to_thread(time.sleep, 0.25)
        return SubResult(value=1)

    ev = run(run_graph([node("E1"), node("E2")], blocking, Limits(max_parallel=2)))
    assert overlap(ev[0], ev[1])  # their recorded intervals overlap (no wall-clock bound: load varies)


def test_linear_mode_runs_one_at_a_time_in_topological_order() -> None:
    limits = Limits.from_params(AgentParams(), linear=True)
    assert limits.max_parallel == 1
    ev = run(run_graph([node("E2"), node("E1"), node("E3", "E1")], sleepy_fast, limits))
    assert [e.id for e in sorted(ev, key=lambda e: e.start_s or 0)] == ["E1", "E2", "E3"]
    assert not any(overlap(a, b) for a in ev for b in ev if a is not b)


async def sleepy_fast(task: SubTask, inputs: NodeInputs) -> SubResult:
    await asyncio.sleep(0.01)
    return SubResult(value=task.id)


def test_dependency_order_always_respected_on_random_dags() -> None:
    rng = random.Random(3)
    for _ in range(15):
        n = rng.randint(2, 9)
        nodes = [
            node(f"E{i}", *[f"E{j}" for j in range(1, i) if rng.random() < 0.35]) for i in range(1, n + 1)
        ]
        rng.shuffle(nodes)
        delays = {s.id: rng.random() * 0.01 for s in nodes}

        async def runner(task: SubTask, inputs: NodeInputs, delays: dict[str, float] = delays) -> SubResult:
            assert set(inputs.dependencies) == set(task.depends_on)
            await asyncio.sleep(delays[task.id])
            return SubResult(value=task.id)

        ev = {e.id: e for e in run(run_graph(nodes, runner, Limits(max_parallel=rng.randint(1, 4))))}
        for s in nodes:
            for d in s.depends_on:
                assert ev[s.id].start_s >= ev[d].end_s  # type: ignore[operator]
            assert ev[s.id].ok


def test_failures_are_recorded_retried_and_dependants_skipped() -> None:
    calls: dict[str, int] = {}

    async def runner(task: SubTask, inputs: NodeInputs) -> SubResult:
        calls[task.id] = calls.get(task.id, 0) + 1
        if task.id == "E1":
            raise BackendError("backend crashed")
        if task.id == "E2":
            return SubResult(ok=False, error="nothing found", input_tokens=5, cost=0.1)
        if task.id == "E4" and inputs.attempt == 1:
            raise LMError("flaky")
        return SubResult(value=task.id, input_tokens=10)

    nodes = [node("E1"), node("E2"), node("E3", "E1"), node("E4"), node("E5", "E3")]
    ev = {e.id: e for e in run(run_graph(nodes, runner, Limits(max_retries=2)))}
    assert ev["E1"].status == "failed" and "BackendError: backend crashed" in (ev["E1"].error or "")
    assert calls["E1"] == 3 and ev["E1"].attempts == 3
    assert ev["E2"].status == "failed" and ev["E2"].input_tokens == 15 and ev["E2"].cost == pytest.approx(0.3)
    assert ev["E3"].status == "skipped" and "E1" in (ev["E3"].error or "") and "E3" not in calls
    assert ev["E5"].status == "skipped" and "E5" not in calls
    assert ev["E4"].ok and ev["E4"].attempts == 2 and ev["E4"].input_tokens == 10


@pytest.mark.parametrize("bug", [KeyError("field"), TypeError("bad operand"), RuntimeError("boom")])
def test_a_bug_in_a_runner_propagates_instead_of_becoming_failed_evidence(bug: Exception) -> None:
    started: list[str] = []

    async def runner(task: SubTask, inputs: NodeInputs) -> SubResult:
        started.append(task.id)
        if task.id == "E2":
            raise bug
        await asyncio.sleep(0.01 if task.id == "E1" else 5)
        return SubResult(value=task.id)

    t = time.perf_counter()
    with pytest.raises(type(bug), match=str(bug.args[0])):
        run(run_graph([node("E1"), node("E2"), node("E3")], runner, Limits(max_parallel=3, max_retries=2)))
    assert started.count("E2") == 1  # a bug is not retried
    assert time.perf_counter() - t < 2.0  # the slow sibling was cancelled, not awaited


def test_timeouts_are_recorded_and_retried() -> None:
    calls: list[int] = []

    async def runner(task: SubTask, inputs: NodeInputs) -> SubResult:
        calls.append(inputs.attempt)
        if task.id == "E1":
            await asyncio.sleep(5)
        return SubResult(value=1)

    t = time.perf_counter()
    ev = run(
        run_graph([node("E1"), node("E2"), node("E3", "E1")], runner, Limits(timeout_s=0.05, max_retries=1))
    )
    assert time.perf_counter() - t < 1.0
    by = {e.id: e for e in ev}
    assert by["E1"].status == "timeout" and by["E1"].attempts == 2 and "timed out" in (by["E1"].error or "")
    assert by["E2"].ok and by["E3"].status == "skipped"
    assert sorted(calls) == [1, 1, 2]


def test_references_are_substituted_and_inputs_are_private() -> None:
    seen: dict[str, NodeInputs] = {}

    async def runner(task: SubTask, inputs: NodeInputs) -> SubResult:
        seen[task.id] = inputs
        if task.id == "E1":
            return SubResult(value=[21, 2])
        if task.id in ("E2", "E3"):
            inputs.dependencies["E1"].value.append(99)  # must not leak into E1 or the sibling
            inputs.values["E1"].append(98)
        return SubResult(value=task.goal)

    nodes = [
        node("E1", goal="read #M1"),
        node("E2", "E1", goal="double #E1"),
        node("E3", "E1", goal="halve #E1"),
        node("E4", "E2", "E3", "E0x", goal="join #E2 and #E3 and #E9"),
    ]
    prior = {
        "E9": Evidence(id="E9", goal="old", status="ok", value=7),
        "E0x": Evidence(id="E0x", goal="x", status="ok"),
    }
    ev = {e.id: e for e in run(run_graph(nodes, runner, prior=prior, modal_values={"M1": "img_1"}))}
    assert ev["E1"].goal == "read img_1" and ev["E1"].value == [21, 2]
    assert ev["E2"].value == "double 21, 2" and ev["E3"].value == "halve 21, 2"
    for sibling in ("E2", "E3"):  # each saw only its own mutation
        assert seen[sibling].dependencies["E1"].value == [21, 2, 99]
        assert seen[sibling].values["E1"] == [21, 2, 98]
    assert seen["E4"].raw_goal == "join #E2 and #E3 and #E9" and seen["E4"].values["E9"] == 7
    assert ev["E4"].value == "join double 21, 2 and halve 21, 2 and 7"
    assert set(seen["E4"].dependencies) == {"E2", "E3", "E0x"}
    # each item keeps its sub-task as the decision wrote it (what a redo line runs again)
    assert ev["E4"].planned_goal == "join #E2 and #E3 and #E9" and ev["E4"].planned() == nodes[3]
    assert ev["E1"].planned().goal == "read #M1"


def test_unresolvable_reference_and_failed_prior_dependency() -> None:
    prior = {"E1": Evidence(id="E1", goal="g", status="failed", error="x")}
    nodes = [node("E2", goal="use #E1"), node("E3", "E1"), node("E4", goal="use #M3")]
    ev = {e.id: e for e in run(run_graph(nodes, sleepy_fast, prior=prior, modal_values={"M1": "a"}))}
    assert ev["E2"].status == "failed" and "cannot resolve" in (ev["E2"].error or "")
    assert ev["E3"].status == "skipped" and ev["E4"].status == "failed"


def test_cost_budget_limits_what_runs() -> None:
    async def runner(task: SubTask, inputs: NodeInputs) -> SubResult:
        return SubResult(value=1, cost=1.0)

    nodes = [node(f"E{i}") for i in range(1, 6)] + [node("E6", "E5")]
    ev = run(run_graph(nodes, runner, Limits(max_parallel=2, cost_budget=3.5), est_cost=lambda s: 1.0))
    assert [e.status for e in ev] == ["ok", "ok", "ok", "skipped", "skipped", "skipped"]
    assert "budget" in (ev[3].error or "") and "E5" in (ev[5].error or "")


def test_results_are_deterministic_apart_from_timing() -> None:
    rng = random.Random(1)

    async def runner(task: SubTask, inputs: NodeInputs) -> SubResult:
        await asyncio.sleep(rng.random() * 0.01)  # completion order varies between runs
        return SubResult(value=task.id, claim=task.goal)

    nodes = [node("E3", "E1"), node("E1"), node("E2"), node("E4", "E2", "E3")]
    strip = {"start_s", "end_s"}
    a = [e.model_dump(exclude=strip) for e in run(run_graph(nodes, runner, turn=2))]
    b = [e.model_dump(exclude=strip) for e in run(run_graph(nodes, runner, turn=2))]
    assert a == b and [e["id"] for e in a] == ["E1", "E2", "E3", "E4"] and a[0]["turn"] == 2
    store = EvidenceStore()
    store.extend(run(run_graph(nodes, runner)))
    assert store.ids() == ["E1", "E2", "E3", "E4"] and store.next_id() == "E5"


def test_scheduling_overhead_is_measured() -> None:
    """The figure bench/parallel_speedup.py holds to its 5 ms target (a timed target is a bench's job:
    a loaded CI machine made this a flaky test)."""
    seconds = measure_overhead(n_nodes=10, repeats=5)
    assert 0 < seconds < 10
