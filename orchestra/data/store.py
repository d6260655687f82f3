"""The data folder's layout: each stage's folder, the files other stages read from it, and their readers.

A stage writes ``<data>/<stage>/`` whole (:func:`orchestra.io.atomic_dir`). What a run measured rather
than built (wall seconds, tool latencies, MLflow run ids, Great Expectations run results, machine paths)
goes under a :data:`RUN_DIR` folder (the stage's, or one beside the files it is about), which no digest
covers and DVC ignores: the rest of the folder is a function of the stage's inputs, the same bytes on
any machine, in any checkout folder.
"""

from __future__ import annotations

import json
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from orchestra.errors import StageError
from orchestra.io import atomic_write_text, dump_json, file_lock, read_jsonl
from orchestra.schemas import (
    AnchorFact,
    ReferenceSolution,
    RewriteCandidate,
    Task,
    Trajectory,
    VerifiedSample,
    read_tasks_json,
)
from orchestra.stages import (
    ANCHOR_FACTS,
    BENCHMARK_SCORES,
    DECISION_SAMPLES,
    EXPERT_TRAJECTORIES,
    POLICY_DAGRPO,
    POLICY_GRPO,
    POLICY_SFT,
    REWRITE_CANDIDATES,
    SEED_TASKS,
    VERIFIED_SAMPLES,
)

__all__ = [
    "ANCHORS_FILE",
    "BENCHMARK_DIR",
    "CANDIDATES_FILE",
    "CLOCK_FILE",
    "CLOCK_KEYS",
    "KB_DIR",
    "LOCK_FILE",
    "MATERIAL_FILE",
    "MEDIA_DIR",
    "POLICY_STAGES",
    "RUN_DIR",
    "RUN_FILE",
    "SAMPLES_FILE",
    "SCORES_FILE",
    "SOLUTIONS_FILE",
    "TASKS_FILE",
    "TIMING_FILE",
    "TRAJECTORIES_FILE",
    "VERIFIED_FILE",
    "benchmark_file",
    "join_clock",
    "media_dir",
    "model_dir",
    "policy_stage",
    "read_anchors",
    "read_candidates",
    "read_material",
    "read_run_record",
    "read_scores",
    "read_seed_tasks",
    "read_solutions",
    "read_trajectories",
    "read_verified",
    "run_dir",
    "samples_file",
    "scores_file",
    "seeds_dir",
    "split_clock",
    "stage_dir",
    "stage_lock",
    "write_run_record",
]

#: the run record's folder inside a stage folder (see the module docstring; .dvcignore names it too)
RUN_DIR = "_run"
#: the runner's record of one run of a stage: when, how long, and what the stage measured
RUN_FILE = "run.json"
#: the lock file of a sharded stage, in its run record's folder (:func:`stage_lock`)
LOCK_FILE = ".lock"
#: in a run record folder: one line per trajectory or evaluated item, its clock readings (:func:`split_clock`)
CLOCK_FILE = "clock.jsonl"
#: in a run record folder: latency percentiles and wall seconds (an evaluation's, benchmark_scores' rows)
TIMING_FILE = "timing.json"


#: seed_tasks: the tasks (OmniGAIA format), their media, the pages search and browse read
TASKS_FILE, MEDIA_DIR, KB_DIR = "tasks.json", "media", "kb"
#: anchor_facts: the facts each seed rests on, the other values its media hold, found programs
ANCHORS_FILE, MATERIAL_FILE, SOLUTIONS_FILE = "anchors.jsonl", "material.jsonl", "solutions.jsonl"
CANDIDATES_FILE = "candidates.jsonl"
#: verified_samples: the kept samples; the test split as the embedded benchmark (tasks.json + media)
VERIFIED_FILE, BENCHMARK_DIR = "verified.jsonl", "benchmark"
TRAJECTORIES_FILE = "trajectories.jsonl"
SAMPLES_FILE = "samples.jsonl"
SCORES_FILE = "scores.json"


def stage_dir(root: Path, name: str) -> Path:
    return Path(root) / name


def stage_lock(root: Path, name: str) -> AbstractContextManager[None]:
    """Held by whoever writes or reads a sharded stage's folder whole (the shards' merge, its lineage
    record, its hash) while another partition's process, here or on another worker, may write into it."""
    return file_lock(run_dir(stage_dir(root, name)) / LOCK_FILE)


def _need(path: Path, stage: str) -> Path:
    if not path.is_file():
        raise StageError(f"{path} is missing: materialize {stage} first")
    return path


def seeds_dir(root: Path) -> Path:
    return Path(root) / SEED_TASKS


def media_dir(root: Path) -> Path:
    """The folder the seed tasks' media paths are relative to."""
    return seeds_dir(root) / MEDIA_DIR


def read_seed_tasks(root: Path) -> list[Task]:
    return read_tasks_json(_need(seeds_dir(root) / TASKS_FILE, SEED_TASKS))


def read_anchors(root: Path) -> list[AnchorFact]:
    return read_jsonl(_need(Path(root) / ANCHOR_FACTS / ANCHORS_FILE, ANCHOR_FACTS), AnchorFact)


def read_material(root: Path) -> list[AnchorFact]:
    return read_jsonl(_need(Path(root) / ANCHOR_FACTS / MATERIAL_FILE, ANCHOR_FACTS), AnchorFact)


def read_solutions(root: Path) -> list[ReferenceSolution]:
    """The reference solutions anchor_facts found (none when every seed had a program)."""
    path = Path(root) / ANCHOR_FACTS / SOLUTIONS_FILE
    return read_jsonl(path, ReferenceSolution) if path.is_file() else []


def read_candidates(root: Path) -> list[RewriteCandidate]:
    path = Path(root) / REWRITE_CANDIDATES / CANDIDATES_FILE
    return read_jsonl(_need(path, REWRITE_CANDIDATES), RewriteCandidate)


def read_verified(root: Path) -> list[VerifiedSample]:
    return read_jsonl(_need(Path(root) / VERIFIED_SAMPLES / VERIFIED_FILE, VERIFIED_SAMPLES), VerifiedSample)


def benchmark_file(root: Path) -> Path:
    """The embedded benchmark: the test split in OmniGAIA format, its media beside it."""
    return _need(Path(root) / VERIFIED_SAMPLES / BENCHMARK_DIR / TASKS_FILE, VERIFIED_SAMPLES)


def read_trajectories(root: Path) -> list[Trajectory]:
    path = Path(root) / EXPERT_TRAJECTORIES / TRAJECTORIES_FILE
    return read_jsonl(_need(path, EXPERT_TRAJECTORIES), Trajectory)


def samples_file(root: Path) -> Path:
    """decision_samples' samples.jsonl (what training reads)."""
    return _need(Path(root) / DECISION_SAMPLES / SAMPLES_FILE, DECISION_SAMPLES)


#: each recipe's stage (sft, dagrpo, grpo)
POLICY_STAGES = {"sft": POLICY_SFT, "dagrpo": POLICY_DAGRPO, "grpo": POLICY_GRPO}


def policy_stage(recipe: str) -> str:
    """The stage that trains ``recipe``; an unknown recipe is a StageError listing the valid ones."""
    try:
        return POLICY_STAGES[recipe]
    except KeyError:
        raise StageError(f"unknown recipe {recipe!r}; valid: {', '.join(POLICY_STAGES)}") from None


def model_dir(root: Path, recipe: str) -> Path:
    """Where the stage of ``recipe`` publishes its model."""
    return Path(root) / policy_stage(recipe) / "model"


def scores_file(root: Path) -> Path:
    """benchmark_scores' scores.json (every row's summary)."""
    return _need(Path(root) / BENCHMARK_SCORES / SCORES_FILE, BENCHMARK_SCORES)


def read_scores(root: Path) -> dict[str, Any]:
    """benchmark_scores' scores.json: every row's summary."""
    return json.loads(scores_file(root).read_text(encoding="utf-8"))


def run_dir(folder: Path) -> Path:
    """The run record's folder inside a stage folder (``folder``: the stage folder or its temp copy)."""
    return Path(folder) / RUN_DIR


def write_run_record(root: Path, name: str, record: dict[str, Any]) -> None:
    atomic_write_text(run_dir(stage_dir(root, name)) / RUN_FILE, dump_json(record) + "\n")


def read_run_record(root: Path, name: str) -> dict[str, Any]:
    """The record of the run that built stage ``name``'s folder; empty when there is none (a folder
    pulled from DVC has none: the run happened elsewhere)."""
    path = run_dir(stage_dir(root, name)) / RUN_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except json.JSONDecodeError:
        return {}
    return data if isinstance(data, dict) else {}


#: the keys under which records hold clock readings (seconds measured, not decided): a stage writes them
#: to its run record, never to its data (:func:`split_clock`)
CLOCK_KEYS = frozenset(
    {"latency_s", "start_s", "end_s", "critical_path_s", "render_s", "policy_s", "wall_s", "started_at"}
)
#: subtrees that hold settings, not measurements (a state's backend cards: their declared ``latency_s``)
SETTINGS_KEYS = frozenset({"backends"})


def split_clock(data: Any) -> tuple[Any, Any]:
    """``data`` (JSON-like) without its clock readings (every value under a key of :data:`CLOCK_KEYS`,
    at any depth but inside :data:`SETTINGS_KEYS`), and the readings alone in a tree of the same shape
    (None where a branch has none), which :func:`join_clock` puts back."""
    if isinstance(data, dict):
        kept, clock = {}, {}
        for key, value in data.items():
            if key in CLOCK_KEYS:
                clock[key] = value
                continue
            if key in SETTINGS_KEYS:
                kept[key] = value
                continue
            kept[key], sub = split_clock(value)
            if sub is not None:
                clock[key] = sub
        return kept, clock or None
    if isinstance(data, list):
        parts = [split_clock(v) for v in data]
        clocks = [c for _, c in parts]
        return [k for k, _ in parts], clocks if any(c is not None for c in clocks) else None
    return data, None


def join_clock(data: Any, clock: Any) -> Any:
    """``data`` with the readings :func:`split_clock` took out of it put back."""
    if clock is None:
        return data
    if isinstance(data, dict):
        out = dict(data)
        for key, value in clock.items():
            out[key] = value if key in CLOCK_KEYS else join_clock(data.get(key), value)
        return out
    return [join_clock(d, c) for d, c in zip(data, clock, strict=True)]
