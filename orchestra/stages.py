"""Pipeline stages as plain functions (params, data root) -> metadata; Dagster and DVC both call them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchestra.config import Params
from orchestra.errors import StageError

StageFn = Callable[[Params, Path], dict[str, Any]]


def _seed_tasks(params: Params, root: Path) -> dict[str, Any]:
    from orchestra.data.seeds import build_seed_tasks

    return build_seed_tasks(params.seed, root / "seed_tasks")


STAGES: dict[str, StageFn] = {"seed_tasks": _seed_tasks}


def run_stage(name: str, params: Params, root: Path) -> dict[str, Any]:
    """Run stage ``name`` writing under ``root/<name>/``; returns its metadata."""
    try:
        fn = STAGES[name]
    except KeyError:
        raise StageError(f"unknown stage {name!r}; valid stages: {', '.join(STAGES)}") from None
    return fn(params, root)
