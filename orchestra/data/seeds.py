"""The seed_tasks stage: load seed tasks from the configured source into data/seed_tasks/."""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path
from typing import Any

from orchestra.config import Params, SeedParams
from orchestra.config.stages import SeedLimits
from orchestra.data.seed_checks import check_seed_tasks, copy_named_media
from orchestra.data.sources import DATASET_SOURCES, load_dataset_source
from orchestra.data.store import KB_DIR, MEDIA_DIR, TASKS_FILE, seeds_dir
from orchestra.errors import OrchestraError, RecordError, StageError
from orchestra.io import atomic_dir, atomic_write_text, copy_media, dump_json
from orchestra.schemas import Task, distribution, read_tasks_json, write_tasks_json
from orchestra.stages import SEED_TASKS


def omnigaia_metadata_path() -> Path:
    """The project's shipped copy of the public OmniGAIA test metadata (MIT, 360 tasks, no media)."""
    return Path(str(resources.files("orchestra") / "resources" / "omnigaia" / "test_metadata.json"))


def incoming_files(folder: Path) -> list[Path]:
    """The OmniGAIA-format JSON files dropped into ``folder`` (its media in ``folder/media/``)."""
    return sorted(p for p in Path(folder).glob("*.json") if p.is_file()) if Path(folder).is_dir() else []


def _add_incoming(tasks: list[Task], folder: Path, tmp: Path, limits: SeedLimits) -> dict[str, Any]:
    """Append the tasks of ``folder``'s JSON files to ``tasks`` and copy the media they name (only
    those, data/seed_checks.py); a task id already taken or a task failing the seed checks is an error
    naming the file."""
    seen = {str(t.id) for t in tasks}
    files = incoming_files(folder)
    added = 0
    for path in files:
        where = f"incoming seeds {path}"
        try:
            new = read_tasks_json(path)
        except OrchestraError as e:
            raise StageError(f"incoming seeds {path}: {e}") from e
        for task in new:
            if str(task.id) in seen:
                raise StageError(f"{where}: task id {task.id!r} is already taken")
            seen.add(str(task.id))
        copy_named_media(new, folder, tmp, where)
        check_seed_tasks(new, tmp / MEDIA_DIR, limits, where)
        tasks.extend(new)
        added += len(new)
    return {"incoming_files": len(files), "incoming_tasks": added}


def _omnigaia_file(src: Path, tmp: Path, limit: int | None) -> list[Task]:
    """The tasks of an OmniGAIA-format file (the first ``limit``), the media they name from the
    ``media/`` beside it and its knowledge base (``kb/pages.jsonl``) if it has one, copied into ``tmp``
    without following a link."""
    tasks = read_tasks_json(src)[:limit]
    copy_named_media(tasks, src.parent, tmp, str(src))
    if os.path.lexists(src.parent / KB_DIR):  # a link there is refused by the copy, not skipped
        try:
            copy_media(src.parent, f"{KB_DIR}/pages.jsonl", tmp / KB_DIR / "pages.jsonl")
        except RecordError as e:
            raise StageError(f"{src}: its knowledge base: {e}") from e
    return tasks


def seed_tasks_stage(params: Params, root: Path) -> dict[str, Any]:
    """The seed_tasks stage: the seed source and ``seed.incoming``'s files into ``root/seed_tasks``."""
    incoming = root / params.seed.incoming if params.seed.incoming else None
    return build_seed_tasks(params.seed, seeds_dir(root), incoming)


def build_seed_tasks(params: SeedParams, out_dir: Path, incoming: Path | None = None) -> dict[str, Any]:
    """Write ``tasks.json`` (OmniGAIA format, media paths relative to ``media/``) and ``summary.json``;
    the tasks of ``incoming``'s JSON files (see :func:`incoming_files`) follow the source's. An
    ``omnigaia_file`` brings the ``media/`` and ``kb/`` (pages.jsonl: what search and browse read)
    folders beside it.

    The whole folder is replaced atomically: a failure leaves the previous output as it was.
    """
    out_dir = Path(out_dir)
    with atomic_dir(out_dir) as tmp:
        extra: dict[str, Any] = {}
        if params.source == "world":
            from orchestra.world import generate_world

            world = generate_world(params.world, tmp)
            extra = {k: world[k] for k in ("seed", "entities", "pages", "media_files", "media_bytes")}
            tasks = read_tasks_json(tmp / TASKS_FILE)
        elif params.source == "omnigaia":
            tasks = read_tasks_json(omnigaia_metadata_path())
        elif params.source == "omnigaia_file":
            tasks = _omnigaia_file(Path(params.path or ""), tmp, params.limit)
        elif params.source in DATASET_SOURCES:
            tasks = load_dataset_source(params, tmp / MEDIA_DIR)
        else:  # pragma: no cover - Literal in SeedParams keeps this unreachable
            raise StageError(f"unknown seed source {params.source!r}")
        tasks = tasks[: params.limit]
        media = None if params.source == "omnigaia" else tmp / MEDIA_DIR  # metadata only: no media
        where = params.path if params.source == "omnigaia_file" else f"seed.source {params.source}"
        check_seed_tasks(tasks, media, params.limits, str(where))
        if incoming is not None:
            extra.update(_add_incoming(tasks, incoming, tmp, params.limits))
        if not tasks:
            raise StageError.empty(
                SEED_TASKS, "seed tasks", {f"seed.source {params.source} holds no task": 1}
            )
        write_tasks_json(tmp / TASKS_FILE, tasks)
        summary = {"source": params.source, "rows": len(tasks), **extra, "distribution": distribution(tasks)}
        atomic_write_text(tmp / "summary.json", dump_json(summary) + "\n")
    return summary
