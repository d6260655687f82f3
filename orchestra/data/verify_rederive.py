"""The numeric re-derivation check: candidates' programs re-run in the code sandbox, many per call."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any

from orchestra.errors import ToolError
from orchestra.schemas import CheckOutcome, ComputeStep, RewriteCandidate
from orchestra.text import ValueFormatError, format_value
from orchestra.tools.base import Tool

__all__ = ["is_numeric_answer", "rederive_many", "value_key"]

log = logging.getLogger(__name__)

_NUMERIC = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?")
LINE_BYTES = 400  # output budget per candidate in a batched sandbox call (ids, values, error text)


def value_key(value: Any) -> str:
    """A value's comparable text: 3 and 3.0 agree, the string '3' does not."""
    try:
        return format_value(value, code=True)
    except ValueFormatError:
        return "None"


def is_numeric_answer(answer: str) -> bool:
    return bool(_NUMERIC.fullmatch(answer.strip()))


_SCRIPT = """\
import json
JOBS = json.loads({jobs!r})
SAFE = {{"__builtins__": {{}}, "abs": abs, "round": round, "int": int, "min": min, "max": max}}
for job in JOBS:
    env, line = {{}}, {{"id": job["id"]}}
    try:
        value, derived = None, {{}}
        for out, expression, recorded in job["steps"]:
            value = recorded if expression is None else eval(expression, SAFE, env)
            env[out] = value
            if expression is not None:
                derived[out] = value
        line.update(value=value, derived=derived)
        text = json.dumps(line, default=repr)
    except Exception as e:
        text = json.dumps({{"id": job["id"], "error": (type(e).__name__ + ": " + str(e))[:200]}})
    print(text)
"""


def _job(c: RewriteCandidate) -> dict[str, Any]:
    steps = [
        (s.out, s.expression, None) if isinstance(s, ComputeStep) else (s.out, None, s.value)
        for s in c.task.solution_program or []
    ]
    return {"id": c.candidate_id, "steps": steps}


def _limit_failure(error: str | None, truncated: Any) -> bool:
    text = (error or "").lower()
    return bool(truncated) or any(w in text for w in ("limit", "killed", "memoryerror", "timeout"))


def _run_batch(jobs: list[dict[str, Any]], executor: Tool, lines: dict[str, dict[str, Any]]) -> int:
    """Run ``jobs`` in one sandbox call, store each candidate's line; re-run what did not come back
    (a limit hit: output cut, time or memory) in halves. Returns the number of sandbox calls."""
    obs = executor(code=_SCRIPT.format(jobs=json.dumps(jobs)))
    got = 0
    for raw in str(obs.data.get("stdout", "")).splitlines():
        try:
            line = json.loads(raw)
        except json.JSONDecodeError:
            continue  # a cut last line; that candidate is re-run
        if isinstance(line, dict) and line.get("id") in {j["id"] for j in jobs}:
            lines[line["id"]] = line
            got += 1
    missing = [j for j in jobs if j["id"] not in lines]
    if not missing:
        return 1
    if not got and not _limit_failure(obs.error, obs.data.get("truncated")):
        raise ToolError(f"the code sandbox failed to re-derive any answer: {obs.error or obs.text[:300]}")
    if len(missing) == 1 and len(jobs) == 1:
        lines[missing[0]["id"]] = {"id": missing[0]["id"], "error": f"sandbox: {obs.error or 'no output'}"}
        return 1
    if len(missing) < len(jobs):
        return 1 + _run_batch(missing, executor, lines)
    half = len(missing) // 2
    return 1 + _run_batch(missing[:half], executor, lines) + _run_batch(missing[half:], executor, lines)


def rederive_many(
    candidates: Sequence[RewriteCandidate], executor: Tool, batch: int | None = None
) -> dict[str, CheckOutcome]:
    """The numeric re-derivation check for many candidates, batched: one sandbox call runs up to
    ``batch`` programs (default: as many as the executor's output limit holds) and prints one JSON
    line per candidate. Each program binds the recorded values of its non-compute steps, evaluates
    its compute expressions in order (abs/round/int/min/max only) and the last step's value,
    formatted like the world formats values, must equal the answer; a compute step whose recorded
    value differs from the re-derived one fails too. Non-numeric answers pass with score None."""
    out: dict[str, CheckOutcome] = {}
    todo = []
    for c in candidates:
        if not is_numeric_answer(c.task.answer):
            out[c.candidate_id] = CheckOutcome(passed=True, score=None, detail="not numeric")
        elif not c.task.solution_program:
            out[c.candidate_id] = CheckOutcome(passed=False, score=0.0, detail="no solution program")
        else:
            todo.append(c)
    limits = getattr(executor, "limits", None)
    size = batch or max(1, int(getattr(limits, "max_output", 20_000)) // LINE_BYTES)
    lines: dict[str, dict[str, Any]] = {}
    calls = 0
    for i in range(0, len(todo), size):
        calls += _run_batch([_job(c) for c in todo[i : i + size]], executor, lines)
    for c in todo:
        out[c.candidate_id] = _rederived(c, lines[c.candidate_id])
    log.debug("re-derived %d candidates in %d sandbox calls", len(todo), calls)
    return out


def _rederived(c: RewriteCandidate, line: Mapping[str, Any]) -> CheckOutcome:
    if "error" in line:
        return CheckOutcome(passed=False, score=0.0, detail=f"re-derivation failed: {line['error']}")
    steps = c.task.solution_program or []
    recorded = {s.out: s.value for s in steps if isinstance(s, ComputeStep)}
    derived = line.get("derived", {})
    off = [
        f"{k} recorded {value_key(v)}, re-derived {value_key(derived.get(k))}"
        for k, v in recorded.items()
        if value_key(derived.get(k)) != value_key(v)
    ]
    try:
        got = format_value(line.get("value"))
    except ValueFormatError:
        got = "(none)"
    answer = c.task.answer.strip()
    how = "" if recorded else " (no compute step: the last recorded value)"
    if got != answer:
        off.insert(0, f"re-derived {got!r}, the answer is {answer!r}")
    if off:
        return CheckOutcome(passed=False, score=0.0, detail="; ".join(off))
    return CheckOutcome(passed=True, score=1.0, detail=f"re-derived {got} in the sandbox{how}")
