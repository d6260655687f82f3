"""One MLflow trace per orchestrated task, built from what the run recorded: the trajectory (its clock
readings joined back) is the only source, so a trace's numbers are the report's numbers.

The tree (MLflow span types): the task (``AGENT``: question, media by path, answer, gold) → a turn
per decision (``CHAIN``: the state's size, the decision text, the validation error) → the policy call
(``LLM``: its tokens and cost) and the sub-tasks the decision ran (``AGENT``: goal, backend and why,
value, confidence, tokens, cost, at the seconds the scheduler recorded, so parallel branches overlap
as they ran) → each tool call (``TOOL``: arguments, result, cost). Tool calls within a sub-task are
sequential; the runtime records their durations, not their start times, so they are laid back to
back from the sub-task's start. Token usage sits on the LLM spans (the policy) and the sub-task spans
(the backends' models); costs on LLM, sub-task and tool spans, priced by the run's ledger, so their sums
are the trajectory's ``tokens`` and ``cost``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from orchestra.agent.accounting import Ledger
from orchestra.agent.memory import Evidence
from orchestra.config import Params
from orchestra.io import dump_json
from orchestra.schemas import Task, Trajectory, TrajectoryStep

__all__ = ["log_trace", "trace_eval"]

_NS = 1_000_000_000
#: characters of a tool's result text a span keeps
_TEXT = 500


def _ns(started_at: float, seconds: float | None) -> int:
    return int(round((started_at + (seconds or 0.0)) * _NS))


def _usage(input_tokens: int, output_tokens: int) -> dict[str, int]:
    return {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "total_tokens": input_tokens + output_tokens,
    }


class _Tree:
    """Spans of one trace, opened under a parent and closed with their recorded end."""

    def __init__(self, started_at: float, experiment_id: str | None) -> None:
        self.t0, self.experiment_id = started_at, experiment_id

    def span(self, name: str, kind: str, parent: Any, start_s: float | None, **fields: Any) -> Any:
        import mlflow

        return mlflow.start_span_no_context(
            name,
            span_type=kind,
            parent_span=parent,
            inputs=fields.get("inputs"),
            attributes=fields.get("attributes"),
            tags=fields.get("tags"),
            experiment_id=self.experiment_id if parent is None else None,
            start_time_ns=_ns(self.t0, start_s),
        )

    def end(self, span: Any, end_s: float | None, outputs: Any = None, error: str | None = None) -> None:
        span.end(outputs=outputs, status="ERROR" if error else "OK", end_time_ns=_ns(self.t0, end_s))


def _tools(tree: _Tree, parent: Any, ev: Evidence, ledger: Ledger) -> None:
    at = ev.start_s or 0.0
    for c in ev.tool_calls:
        attrs = {"cost": ledger.tool_cost(c), "latency_s": c.latency_s}
        span = tree.span(c.tool, "TOOL", parent, at, inputs=dict(c.args), attributes=attrs)
        at += c.latency_s
        tree.end(span, at, {"ok": c.ok, "text": c.text[:_TEXT]}, None if c.ok else c.text[:_TEXT])


def _subtask(tree: _Tree, parent: Any, ev: Evidence, ledger: Ledger) -> None:
    attrs = {
        "backend": ev.backend,
        "routing": ev.routing,
        "confidence": ev.confidence,
        "attempts": ev.attempts,
        "cost": ev.cost,
        "mlflow.chat.tokenUsage": _usage(ev.input_tokens, ev.output_tokens),
    }
    inputs = {"goal": ev.goal, "depends_on": ev.depends_on, "modalities": ev.modalities, "tools": ev.tools}
    span = tree.span(
        f"{ev.id} {ev.backend or ''}".strip(), "AGENT", parent, ev.start_s, inputs=inputs, attributes=attrs
    )
    _tools(tree, span, ev, ledger)
    tree.end(span, ev.end_s, {"status": ev.status, "value": ev.value, "claim": ev.claim}, ev.error)


def _turn(tree: _Tree, parent: Any, step: TrajectoryStep, ledger: Ledger) -> None:
    start = step.start_s or 0.0
    size = sum(len(m.get("content", "")) for m in step.state_messages)
    span = tree.span(f"turn {step.index}", "CHAIN", parent, start, inputs={"state_chars": size})
    call = tree.span(
        "decision",
        "LLM",
        span,
        start,
        attributes={
            "cost": step.cost,
            "mlflow.chat.tokenUsage": _usage(step.input_tokens, step.output_tokens),
        },
    )
    tree.end(call, start + (step.policy_s or 0.0), {"text": step.raw_output})
    for r in step.results:
        ev = Evidence.model_validate(r)
        if ev.status != "skipped" and ev.attempts:
            _subtask(tree, span, ev, ledger)
    decision = step.decision.model_dump(mode="json") if step.decision is not None else None
    tree.end(span, start + step.latency_s, {"decision": decision, "error": step.error}, step.error)


def log_trace(
    task: Task,
    traj: Trajectory,
    ledger: Ledger,
    outputs: Mapping[str, Any],
    tags: Mapping[str, str],
    experiment_id: str | None = None,
) -> str:
    """Log ``traj`` (clock readings joined, ``started_at`` set) of ``task`` as one trace to the active
    MLflow tracking store; ``ledger``: an empty ledger with the run's prices (``agent.tool_prices``,
    ``agent.policy_price``); ``outputs``: what the root span returns (prediction, gold, EM, ...);
    ``tags``: the trace's tags (task, row, run, data digest). Returns the trace id."""
    import mlflow

    tree = _Tree(traj.started_at or 0.0, experiment_id)
    media = [m.model_dump(mode="json") for m in task.omni_modal_input]
    attrs = {"system": traj.system, "policy": traj.policy, "tokens": traj.tokens, "cost": traj.cost}
    root = tree.span(
        f"task {task.id}",
        "AGENT",
        None,
        0.0,
        inputs={"question": task.question, "media": media},
        attributes=attrs,
        tags={"orchestra.task_id": str(task.id), **tags},
    )
    for step in traj.steps:
        _turn(tree, root, step, ledger)
    tree.end(root, traj.latency_s, {"answer": traj.answer, **outputs}, traj.error)
    mlflow.flush_trace_async_logging()
    return root.trace_id


def _logged(experiment_id: str, key: str) -> set[str]:
    """Task ids that already have a trace of the evaluation ``key`` in the experiment."""
    import mlflow

    found = mlflow.search_traces(
        locations=[experiment_id],
        filter_string=f"tag.`orchestra.eval` = '{key}'",
        return_type="list",
        include_spans=False,
    )
    return {t.info.tags.get("orchestra.task_id", "") for t in found}


def trace_eval(
    params: Params,
    out: Path,
    run: Mapping[str, Any],
    tasks: Sequence[Task],
    items: Mapping[str, Mapping[str, Any]],
    clocks: Mapping[str, Mapping[str, Any]],
    root: Path,
) -> int:
    """A trace for every item of the evaluation in ``out`` (its trajectory file and its ``clocks``
    line, evaluation/items.load_clocks) that has none yet, in ``tracking.experiment`` of the project
    whose data folder is ``root``; an evaluation is keyed by its fingerprint ``run`` (run.json), so a
    resumed run traces only what it has not. Returns how many were logged."""
    import mlflow

    from orchestra.data.store import join_clock
    from orchestra.training.tracking import ensure_experiment, tracking_uri

    uri = tracking_uri(params, root)
    mlflow.set_tracking_uri(uri)
    exp = ensure_experiment(uri, params.tracking.experiment)
    key = hashlib.sha256(dump_json(run).encode()).hexdigest()[:16]
    done, ledger = _logged(exp, key), Ledger(params.agent.tool_prices, params.agent.policy_price)
    logged = 0
    for task in tasks:
        item = items.get(str(task.id))
        if item is None or not item.get("trajectory") or str(task.id) in done:
            continue  # not run (an item failed before its trajectory), or traced already
        data = json.loads((out / item["trajectory"]).read_text(encoding="utf-8"))
        traj = Trajectory.model_validate(join_clock(data, clocks.get(str(task.id), {}).get("trajectory")))
        outputs = {
            "prediction": item.get("predicted_answer"),
            "gold": task.answer,
            "em": item.get("em_score"),
        }
        tags = {
            "orchestra.eval": key,
            "orchestra.eval_out": out.name,
            "orchestra.policy": str(run.get("policy")),
        }
        log_trace(task, traj, ledger, outputs, tags, exp)
        logged += 1
    return logged
