"""A task run as an MLflow trace (evaluation/traces.py): the span tree of a two-branch task in a real
sqlite tracking store, read back: branches overlap as they ran, tools sit under their sub-task, and
the spans' tokens and costs sum to the trajectory's (issue 48, first part)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from test_systems import _run, branchy, env  # noqa: F401 - the two-branch task and its runtime

from orchestra.agent.accounting import Ledger
from orchestra.agent.runtime import Environment
from orchestra.agent.systems import evidence_of
from orchestra.data.store import join_clock, split_clock
from orchestra.evaluation.traces import log_trace
from orchestra.io import record_dict
from orchestra.schemas import Task, Trajectory


@pytest.fixture
def tracking(tmp_path: Path) -> Iterator[str]:
    """An experiment in a sqlite store of its own, the process's tracking URI put back after."""
    import mlflow

    before = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    yield mlflow.create_experiment("traces")
    mlflow.set_tracking_uri(before)


def _spans(trace_id: str) -> list:
    import mlflow

    return mlflow.get_trace(trace_id).data.spans


def test_a_two_branch_task_becomes_a_span_tree_with_overlapping_branches(
    branchy: Task,  # noqa: F811
    env: Environment,  # noqa: F811
    tracking: str,
) -> None:
    traj = _run(branchy, "orchestra", env)
    data, clock = split_clock(record_dict(traj))  # as the eval writes it, and as it reads it back
    traj = Trajectory.model_validate(join_clock(data, clock))
    ledger = Ledger(env.agent.tool_prices, env.agent.policy_price)
    tags = {"orchestra.row": "orchestra_oracle"}
    trace_id = log_trace(branchy, traj, ledger, {"gold": branchy.answer, "em": True}, tags, tracking)

    import mlflow

    trace = mlflow.get_trace(trace_id)
    assert (
        trace.info.tags["orchestra.task_id"] == "branchy"
        and trace.info.tags["orchestra.row"] == "orchestra_oracle"
    )
    spans = _spans(trace_id)
    by_id = {s.span_id: s for s in spans}
    root = next(s for s in spans if s.parent_id is None)
    assert root.span_type == "AGENT" and root.inputs["question"] == branchy.question
    assert root.outputs["answer"] == branchy.answer == traj.answer
    turns = [s for s in spans if s.span_type == "CHAIN"]
    assert [t.name for t in turns] == [f"turn {k}" for k in range(len(traj.steps))]
    assert all(t.parent_id == root.span_id for t in turns)
    subs = {s.name.split()[0]: s for s in spans if s.span_type == "AGENT" and s.parent_id is not None}
    assert sorted(subs) == ["E1", "E2", "E3", "E4", "E5"]
    e1, e4 = subs["E1"], subs["E4"]
    assert e4.start_time_ns < e1.end_time_ns and e1.start_time_ns < e4.end_time_ns  # side by side
    evidence = {e.id: e for e in evidence_of(traj)}
    for name, sub in subs.items():
        tools = [s for s in spans if s.span_type == "TOOL" and s.parent_id == sub.span_id]
        assert [t.name for t in tools] == [c.tool for c in evidence[name].tool_calls], name
        assert all(sub.start_time_ns <= t.start_time_ns for t in tools)
        assert by_id[sub.parent_id].name == f"turn {evidence[name].turn}"
        assert sub.outputs["value"] == evidence[name].value
    usage = [s.get_attribute("mlflow.chat.tokenUsage") for s in spans]
    assert sum(u["total_tokens"] for u in usage if u) == traj.tokens
    cost = sum(
        s.get_attribute("cost") or 0.0
        for s in spans
        if s.span_type in ("LLM", "AGENT", "TOOL") and s.parent_id
    )
    assert cost == pytest.approx(traj.cost)
    found = mlflow.search_traces(
        locations=[tracking], filter_string="tag.`orchestra.task_id` = 'branchy'", return_type="list"
    )
    assert [t.info.trace_id for t in found] == [trace_id]


def test_an_eval_traces_each_item_once_across_a_resume_and_none_when_off(
    built: tuple[Path, str], tmp_path: Path
) -> None:
    """`run_eval` with traces: one trace per item tagged with the evaluation's fingerprint; a run
    resumed over more items adds only the new ones; the same evaluation with traces off adds none."""
    import mlflow

    from orchestra.config import Params
    from orchestra.evaluation.runner import EvalConfig, run_eval

    before = mlflow.get_tracking_uri()
    db = tmp_path / "mlflow.db"
    params = Params.model_validate({"tracking": {"mlflow_uri": f"sqlite:///{db}", "experiment": "t"}})
    bench = built[0] / "verified_samples" / "benchmark" / "tasks.json"

    def traces() -> list:
        return mlflow.search_traces(
            locations=[mlflow.get_experiment_by_name("t").experiment_id], return_type="list"
        )

    try:
        run_eval(
            params, EvalConfig(benchmark=bench, out=tmp_path / "o", limit=2, traces=True, data_dir=tmp_path)
        )
        first = traces()
        assert len(first) == 2 and {t.info.tags["orchestra.eval_out"] for t in first} == {"o"}
        run_eval(
            params, EvalConfig(benchmark=bench, out=tmp_path / "o", limit=3, traces=True, data_dir=tmp_path)
        )
        ids = [t.info.tags["orchestra.task_id"] for t in traces()]
        assert len(ids) == len(set(ids)) == 3  # the resumed run traced its one new item
        run_eval(params, EvalConfig(benchmark=bench, out=tmp_path / "off", limit=2, data_dir=tmp_path))
        assert len(traces()) == 3
        root = next(s for s in mlflow.get_trace(first[0].info.trace_id).data.spans if s.parent_id is None)
        assert root.outputs["em"] == 1 and root.outputs["prediction"] == root.outputs["gold"]
    finally:
        mlflow.set_tracking_uri(before)
