"""Dataset figures the stages report: available parallelism of a program, surface diversity of questions."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from orchestra.agent.expert import program_inputs
from orchestra.backends.perceptions import PERCEPTIONS
from orchestra.backends.registry import expert_specs
from orchestra.backends.selection import select_backend
from orchestra.config import AgentParams
from orchestra.schemas import PerceiveStep, SolutionStep, SubtaskStep, Task

__all__ = ["PARALLEL_AT", "available_parallelism", "ngram_share", "step_key", "step_seconds", "step_skill"]

#: a program is "parallel" when its steps' total time is at least this many critical paths: two
#: independent branches of comparable cost, the lighter at least half of the heavier
PARALLEL_AT = 1.5


def step_skill(step: SolutionStep) -> str:
    if isinstance(step, PerceiveStep):
        return PERCEPTIONS[step.perception].skill
    if isinstance(step, SubtaskStep):
        return step.skill
    return {"search": "search", "browse": "browse", "compute": "code"}[step.op]


def step_key(step: SolutionStep) -> str:
    """What a step's time is looked up by in :func:`step_seconds`: a perception's tool, else the skill."""
    if isinstance(step, PerceiveStep):
        return PERCEPTIONS[step.perception].tool
    return step_skill(step)


def step_seconds(agent: AgentParams) -> dict[str, float]:
    """Per skill and per tool, the calibrated p50 seconds of the expert cost-aware selection picks for
    a demand of that skill alone (the expert that runs it), its base latency when it was not measured
    on it. A tool's own p50 counts where calibration has one: one skill's tools can differ tenfold."""
    from orchestra.backends.pool import builtin_backends

    pool = list(builtin_backends(agent))
    specs = expert_specs(agent)
    out: dict[str, float] = {}
    for skill in sorted({k for b in pool for k in b.skills}):
        able = [b for b in pool if b.skills.get(skill, 0.0) > 0]
        pick = select_backend({skill: 1.0}, able, agent.cost_weight, agent.latency_weight)
        measured = specs[pick.name].measured.get(skill)
        out[skill] = measured.p50_s if measured is not None else specs[pick.name].latency.base_s
        out.update(measured.tools if measured is not None else {})
    return out


def available_parallelism(task: Task, seconds: Mapping[str, float]) -> float:
    """Sum of the program's step times over its critical path (1.0 for a chain), step times from
    ``seconds`` (:func:`step_seconds`): what an orchestrator with unbounded parallelism could gain."""
    program = task.solution_program or []
    if not program:
        return 1.0
    finish: dict[str, float] = {}
    total = 0.0
    for s in program:
        t = seconds.get(step_key(s), seconds.get(step_skill(s), 0.0))
        total += t
        finish[s.out] = t + max((finish[v] for v in program_inputs(s) if v in finish), default=0.0)
    critical = max(finish.values())
    return total / critical if critical > 0 else 1.0


_WORD = re.compile(r"[a-z0-9']+")


def ngram_share(texts: Iterable[str], n: int = 3) -> float:
    """Distinct word n-grams over all word n-grams of ``texts`` (1.0: no n-gram repeats)."""
    seen: set[tuple[str, ...]] = set()
    total = 0
    for text in texts:
        words = _WORD.findall(text.lower())
        grams = [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]
        total += len(grams)
        seen.update(grams)
    return len(seen) / total if total else 0.0
