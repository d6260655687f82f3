"""Replay a seed task's solution program against the world's own ground truth (truth/ and kb/)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestra.errors import WorldError
from orchestra.schemas import BrowseStep, ComputeStep, PerceiveStep, SearchStep, Task, read_tasks_json
from orchestra.text import format_value
from orchestra.world.kb import Entity, KnowledgeBase, browse_value, search_exact
from orchestra.world.perception import perceive
from orchestra.world.program import safe_eval


@dataclass(frozen=True)
class WorldTruth:
    kb: KnowledgeBase
    titles: dict[str, str]  # lower-cased page title -> url, from kb/pages.jsonl
    media: dict[str, dict[str, Any]]  # media id -> truth/media.jsonl record


def _rows(path: Path) -> list[dict[str, Any]]:
    try:
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except (OSError, json.JSONDecodeError) as e:
        raise WorldError(f"{path}: cannot read world file: {e}") from e


_CACHE: dict[tuple[str, int], WorldTruth] = {}


def load_truth(world_dir: Path) -> WorldTruth:
    """Read a generated world's pages, entities and media truth (cached per folder and file version)."""
    world_dir = Path(world_dir).resolve()
    media_file = world_dir / "truth" / "media.jsonl"
    try:
        key = (str(world_dir), media_file.stat().st_mtime_ns)
    except OSError as e:
        raise WorldError(f"{world_dir} is not a generated world (no truth/media.jsonl)") from e
    if key not in _CACHE:
        ents = [
            Entity(
                r["id"],
                r["name"],
                r["type"],
                r["category"],
                r["attributes"],
                r["relations"],
                r["distractor_of"],
            )
            for r in _rows(world_dir / "truth" / "entities.jsonl")
        ]
        titles = {p["title"].lower(): p["url"] for p in _rows(world_dir / "kb" / "pages.jsonl")}
        media = {r["id"]: r for r in _rows(media_file)}
        _CACHE.clear()
        _CACHE[key] = WorldTruth(KnowledgeBase(ents), titles, media)
    return _CACHE[key]


def _resolve(ref: str, env: dict[str, Any]) -> Any:
    if ref.startswith("$"):
        if ref[1:] not in env:
            raise WorldError(f"step refers to {ref} before it is set")
        return env[ref[1:]]
    return ref


def replay(task: Task, world_dir: Path) -> str:
    """Run ``task.solution_program`` on the world's truth; check every recorded value; return the answer."""
    if not task.solution_program:
        raise WorldError(f"task {task.id} has no solution program")
    truth = load_truth(world_dir)
    inputs = {m.id: m.path for m in task.omni_modal_input}
    env: dict[str, Any] = {}
    value: Any = None
    for step in task.solution_program:
        if isinstance(step, PerceiveStep):
            record = truth.media.get(step.input_id)
            if record is None or inputs.get(step.input_id) != record["path"]:
                raise WorldError(
                    f"task {task.id}: modal input {step.input_id} is not in the world's media truth"
                )
            value = perceive(record["facts"], step.perception, step.args)
        elif isinstance(step, SearchStep):
            value = search_exact(truth.titles, str(_resolve(step.query, env)))
        elif isinstance(step, BrowseStep):
            value = browse_value(truth.kb, str(_resolve(step.url, env)), step.field)
        elif isinstance(step, ComputeStep):
            value = safe_eval(step.expression, env)
        else:  # pragma: no cover - the schema's discriminated union allows only these four
            raise WorldError(f"task {task.id}: unknown step {step!r}")
        if step.value is not None and step.value != value:
            raise WorldError(
                f"task {task.id} step {step.out}: recorded {step.value!r}, replay gives {value!r}"
            )
        env[step.out] = value
    return format_value(value)


def replay_world(world_dir: Path) -> dict[str, Any]:
    """Replay every task of a world; raises WorldError on the first task whose answer differs."""
    world_dir = Path(world_dir)
    tasks = read_tasks_json(world_dir / "tasks.json")
    for task in tasks:
        got = replay(task, world_dir)
        if got != task.answer:
            raise WorldError(f"task {task.id}: replay gives {got!r}, the task says {task.answer!r}")
    return {"replayed": len(tasks)}
