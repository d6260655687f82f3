"""An evaluation's result items: how one is made and scored, and the files they are kept in.

``items.jsonl`` (one line a finished item, appended as it ends), ``results.json`` and ``summary.json``
in the evaluation's folder; the clock (each item's latency, its trajectory's timings) in
``_run/clock.jsonl`` and the latency percentiles in ``_run/timing.json`` beside them.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from orchestra.answers import exact_match, numeric_match
from orchestra.data.store import CLOCK_FILE, TIMING_FILE, run_dir
from orchestra.evaluation.scoring import LLMJudge, latency_summary, summarize
from orchestra.io import atomic_write_text, dump_json, record_dict
from orchestra.schemas import Task, Trajectory

__all__ = [
    "ITEMS_FILE",
    "append_line",
    "base_item",
    "failed_item",
    "item_messages",
    "latencies",
    "load_clocks",
    "load_items",
    "scored",
    "tool_calls",
    "vote",
    "write_summary",
    "write_timing",
]

ITEMS_FILE = "items.jsonl"


def load_items(out: Path) -> dict[str, dict[str, Any]]:
    """The finished items of ``out``, by task id. A last line cut short by a kill is dropped (and
    trimmed from the file, so the next append starts a clean line)."""
    path = out / ITEMS_FILE
    if not path.is_file():
        return {}
    data = path.read_bytes()
    good = data[: data.rfind(b"\n") + 1]
    if len(good) != len(data):
        with path.open("r+b") as f:
            f.truncate(len(good))
    items = {}
    for line in good.decode("utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            items[str(row["id"])] = row
    return items


def item_messages(traj: Trajectory) -> list[dict[str, str]]:
    """The main agent's chat: the system message, then each state and decision, then the final
    ``<answer>…</answer>`` (empty when the run gave none)."""
    msgs: list[dict[str, str]] = []
    for step in traj.steps:
        for m in step.state_messages:
            if m.get("role") == "system" and msgs:
                continue
            msgs.append({"role": str(m.get("role")), "content": str(m.get("content", ""))})
        if step.raw_output is not None:
            msgs.append({"role": "assistant", "content": step.raw_output})
    msgs.append({"role": "assistant", "content": f"<answer>{traj.answer or ''}</answer>"})
    return msgs


def tool_calls(traj: Trajectory) -> int:
    return sum(int(u.get("calls", 0)) for u in (traj.accounting.get("tool") or {}).values())


def vote(answers: Sequence[str]) -> str:
    """The most frequent non-empty answer (first seen wins a tie); empty when all are."""
    counts = Counter(a for a in answers if a.strip())
    if not counts:
        return ""
    best = max(counts.values())
    return next(a for a in answers if counts.get(a) == best)


def append_line(path: Path, row: Mapping[str, Any]) -> None:
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())


def base_item(task: Task) -> dict[str, Any]:
    return {**record_dict(task), "id": task.id}


def scored(
    task: Task, item: dict[str, Any], judge: LLMJudge | None, answers: Sequence[str]
) -> dict[str, Any]:
    pred = item["predicted_answer"]
    item["em_score"] = exact_match(pred, task.answer)
    item["numeric_score"] = numeric_match(pred, task.answer)
    if judge is not None:
        v = judge.judge(task.question, pred, task.answer)
        item["llm_equal"], item["judge"] = int(v.equal), v.reason
    else:
        item["llm_equal"], item["judge"] = None, None
    if len(answers) > 1:
        item["samples"] = [{"answer": a, "em_score": exact_match(a, task.answer)} for a in answers]
    return item


def failed_item(task: Task, reason: str, judge: LLMJudge | None, samples: int) -> dict[str, Any]:
    item = base_item(task)
    item.update(
        predicted_answer="",
        tool_call_num=0,
        messages=[],
        trajectory=None,
        tokens=0,
        cost=0.0,
        error=None,
        not_run=reason,
    )
    return scored(task, item, judge, [""] * samples if samples > 1 else [""])


def load_clocks(out: Path) -> dict[str, dict[str, Any]]:
    """The clock of each finished item of ``out`` (:data:`CLOCK_FILE`), by task id; the last line of
    an id wins (an item rerun after a kill), a line cut short by a kill is skipped."""
    path = run_dir(out) / CLOCK_FILE
    clocks: dict[str, dict[str, Any]] = {}
    for line in path.read_text(encoding="utf-8").splitlines() if path.is_file() else []:
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        clocks[str(row["id"])] = row
    return clocks


def latencies(items: Sequence[Mapping[str, Any]], clocks: Mapping[str, Mapping[str, Any]]) -> list[float]:
    """The wall seconds of the items that ran, from their clocks."""
    return [
        float(clocks[str(it["id"])]["latency_s"])
        for it in items
        if it.get("not_run") is None and "latency_s" in clocks.get(str(it["id"]), {})
    ]


def write_timing(out: Path, seconds: Sequence[float]) -> dict[str, Any]:
    """``_run/timing.json`` of an evaluation: the latency percentiles of the items that ran."""
    timing = {"n": len(seconds), "latency_s": latency_summary(seconds)}
    atomic_write_text(run_dir(out) / TIMING_FILE, dump_json(timing) + "\n")
    return timing


def write_summary(
    out: Path, items: Sequence[dict[str, Any]], *, system: str, policy: str, samples: int = 1
) -> dict[str, Any]:
    """summary.json and results.json in ``out`` from every item, in benchmark order (atomic writes);
    ``policy`` as records name it; ``samples`` > 1 adds pass@1, sc@K and pass@K."""
    summary = summarize(items)
    summary["system"], summary["policy"] = system, policy
    if samples > 1:
        k = samples
        per = [[s["em_score"] for s in it.get("samples") or []] or [0] * k for it in items]
        n = max(1, len(items))
        summary["self_consistency"] = {
            "k": k,
            "pass_at_1": sum(sum(p) / len(p) for p in per) / n,
            f"sc_at_{k}": sum(it["em_score"] for it in items) / n,
            f"pass_at_{k}": sum(any(p) for p in per) / n,
        }
    atomic_write_text(out / "results.json", json.dumps(list(items), ensure_ascii=False, indent=1) + "\n")
    atomic_write_text(out / "summary.json", dump_json(summary) + "\n")
    return summary
