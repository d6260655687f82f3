"""The seed_tasks stage: load seed tasks from the configured source into data/seed_tasks/."""

from __future__ import annotations

import shutil
from importlib import resources
from pathlib import Path
from typing import Any

from orchestra.config import SeedParams
from orchestra.errors import StageError
from orchestra.io import atomic_dir, atomic_write_text, dump_json
from orchestra.schemas import Task, distribution, read_tasks_json, write_tasks_json

TASKS_FILE = "tasks.json"
MEDIA_DIR = "media"


def omnigaia_metadata_path() -> Path:
    """The project's shipped copy of the public OmniGAIA test metadata (MIT, 360 tasks, no media)."""
    return Path(str(resources.files("orchestra") / "resources" / "omnigaia" / "test_metadata.json"))


def load_seed_tasks(out_dir: Path) -> list[Task]:
    """Read what the seed_tasks stage wrote."""
    path = Path(out_dir) / TASKS_FILE
    if not path.is_file():
        raise StageError(f"{path} is missing: materialize seed_tasks first")
    return read_tasks_json(path)


def build_seed_tasks(params: SeedParams, out_dir: Path) -> dict[str, Any]:
    """Write ``tasks.json`` (OmniGAIA format, media paths relative to ``media/``) and ``summary.json``.

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
            src = Path(params.path or "")
            tasks = read_tasks_json(src)
            media = src.parent / MEDIA_DIR
            if media.is_dir():
                shutil.copytree(media, tmp / MEDIA_DIR)
        else:  # pragma: no cover - Literal in SeedParams keeps this unreachable
            raise StageError(f"unknown seed source {params.source!r}")
        if params.limit is not None:
            tasks = tasks[: params.limit]
        write_tasks_json(tmp / TASKS_FILE, tasks)
        summary = {"source": params.source, "rows": len(tasks), **extra, "distribution": distribution(tasks)}
        atomic_write_text(tmp / "summary.json", dump_json(summary) + "\n")
    return summary
