"""Measured skill vectors: run every builtin expert on a calibration world and write what it scored.

``calibrate`` generates a world from its own seed (never the benchmark's), then for every task
step whose skill an expert has, hands that expert the step as one sub-task — the goal the expert
policy would write, its inputs filled with the world's recorded values — and checks the value it
returns against the recorded one. Per (expert, skill): accuracy, p50 wall seconds (also per tool), items. The
registry gets the accuracies as the experts' skill levels and the table as ``measured``; each
expert's ``latency.base_s`` becomes its p50 over all items, and a builtin expert's price its
compute (p50 seconds times a price per second). This harness reads the world's truth
on purpose: it is a measurement, like the benches; no agent sees it.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestra.agent.steps import same_value, step_input, step_subtasks
from orchestra.backends.base import BackendRegistry
from orchestra.backends.registry import Registry
from orchestra.config import AgentParams, BackendSpec, LatencySpec, PriceSpec, SkillMeasure, WorldParams
from orchestra.schemas import Task, read_tasks_json
from orchestra.tools.base import ToolRegistry

__all__ = ["CalibrationItem", "calibrate", "calibrated_registry"]


@dataclass(frozen=True)
class CalibrationItem:
    expert: str
    skill: str
    task_id: str
    correct: bool
    seconds: float
    value: Any = None
    expected: Any = None
    confidence: float | None = None
    routine: str = ""
    tool: str = ""


async def _run_all(
    tasks: list[Task],
    backends: BackendRegistry,
    tools: ToolRegistry,
    media_root: Path,
    agent: AgentParams,
    progress: Callable[[int, int], None] | None,
) -> list[CalibrationItem]:
    jobs = []
    for task in tasks:
        for skill, node, values, expected in step_subtasks(task):
            for backend in backends:
                if backend.skills.get(skill, 0.0) <= 0:
                    continue
                sti = step_input(task, node, values, backend.name, media_root, agent)
                jobs.append((backend, skill, str(task.id), sti, expected, skill == "code"))
    out: list[CalibrationItem] = []
    for k, (backend, skill, tid, sti, expected, code) in enumerate(jobs):
        t0 = time.perf_counter()
        res = await backend.run(sti, [tools.get(n) for n in sti.subtask.tools])
        took = time.perf_counter() - t0
        ok = res.ok and same_value(res.value, expected, code)
        routine = sti.subtask.goal.split(" in #M")[0] if sti.subtask.modalities else skill
        out.append(
            CalibrationItem(
                backend.name,
                skill,
                tid,
                ok,
                took,
                res.value,
                expected,
                res.confidence,
                routine,
                *sti.subtask.tools[:1],
            )
        )
        if progress is not None:
            progress(k + 1, len(jobs))
    return out


def calibrate(
    agent: AgentParams,
    registry: Registry,
    world: WorldParams,
    *,
    progress: Callable[[int, int], None] | None = None,
) -> list[CalibrationItem]:
    """Run every builtin expert of ``registry`` (with ``agent.backends`` on top) on a fresh world
    made from ``world`` (in a temporary folder) and return one item per (expert, step)."""
    from orchestra.backends.base import registry_from_params
    from orchestra.backends.builtin import builtin_factory
    from orchestra.backends.pool import builtin_backends
    from orchestra.tools.registry import default_registry
    from orchestra.world import generate_world

    specs = {k: v for k, v in {**registry.experts, **agent.backends}.items() if v.kind == "builtin"}
    backends = registry_from_params(specs, {"builtin": builtin_factory}) if specs else builtin_backends(agent)
    with tempfile.TemporaryDirectory(prefix="calibration-world-") as tmp:
        root = Path(tmp)
        generate_world(world, root)
        tasks = [t for t in read_tasks_json(root / "tasks.json") if t.solution_program]
        with default_registry(root, None) as tools:
            return asyncio.run(_run_all(tasks, backends, tools, root / "media", agent, progress))


def _table(items: list[CalibrationItem]) -> dict[str, dict[str, SkillMeasure]]:
    groups: dict[tuple[str, str], list[CalibrationItem]] = {}
    for it in items:
        groups.setdefault((it.expert, it.skill), []).append(it)
    out: dict[str, dict[str, SkillMeasure]] = {}
    for (expert, skill), its in sorted(groups.items()):
        out.setdefault(expert, {})[skill] = SkillMeasure(
            accuracy=round(sum(i.correct for i in its) / len(its), 3),
            p50_s=round(statistics.median(i.seconds for i in its), 4),
            n=len(its),
            tools={
                tool: round(statistics.median(i.seconds for i in its if i.tool == tool), 4)
                for tool in sorted({i.tool for i in its if i.tool})
            },
        )
    return out


def calibrated_registry(
    registry: Registry, items: list[CalibrationItem], world: WorldParams, price_per_s: float = 0.01
) -> Registry:
    """``registry`` with measured skill levels, ``measured`` tables and p50 base latencies for every
    expert that calibration ran (others unchanged), and what was measured on under ``calibration``.

    A builtin expert's only cost is compute, so its price per call becomes its measured p50
    seconds times ``price_per_s`` (a careful expert that runs three passes costs three times more)."""
    table = _table(items)
    experts: dict[str, BackendSpec] = {}
    for name, spec in registry.experts.items():
        measured = table.get(name)
        if not measured:
            experts[name] = spec
            continue
        skills = {**spec.skills, **{k: m.accuracy for k, m in measured.items()}}
        p50 = statistics.median(i.seconds for i in items if i.expert == name)
        experts[name] = spec.model_copy(
            update={
                "skills": skills,
                "measured": measured,
                "latency": LatencySpec(base_s=round(p50, 4), per_1k_tokens_s=spec.latency.per_1k_tokens_s),
                "price": PriceSpec(per_call=max(1e-6, round(price_per_s * p50, 6)))
                if spec.kind == "builtin"
                else spec.price,
            }
        )
    info = {
        "world_seed": world.seed,
        "n_seeds": world.n_seeds,
        "noise": world.noise.model_dump(mode="json"),
        "items": len(items),
        "price_per_s": price_per_s,
    }
    return registry.model_copy(update={"experts": experts, "calibration": info})
