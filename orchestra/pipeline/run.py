"""Run a stage of the table: skip it when its lineage record matches, else call its function on the
params it declares, then record its lineage and its run."""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from orchestra import lineage
from orchestra.config import Params
from orchestra.data.store import read_run_record, stage_lock, write_run_record
from orchestra.errors import StageError
from orchestra.pipeline.scope import scoped
from orchestra.stages import STAGES, Stage, get_stage

__all__ = ["folder_md5", "load_function", "run_check", "run_stage", "stale"]

#: the key of a stage's metadata that holds what its run measured (wall seconds, run ids, paths): it goes
#: to the run record, not to the lineage record
RUN_KEY = "run"


def load_function(ref: str) -> Callable[..., Any]:
    """The function a ``module:function`` reference of the stage table names."""
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


def _held(stage: Stage, root: Path) -> AbstractContextManager[None]:
    """The stage's lock where partitions in other processes share its folder (a sharded stage)."""
    return stage_lock(root, stage.name) if stage.sharded else nullcontext()


def folder_md5(stage: Stage, root: Path, meta: dict[str, Any]) -> str | None:
    """The stage folder's DVC hash, read under its lock; None while a sharded stage's shards are missing
    (``meta``: what :func:`run_stage` returned; another partition may still be writing its shard)."""
    if not meta.get("complete", True):
        return None
    with _held(stage, root):
        return lineage.dir_md5(Path(root) / stage.name)


def run_stage(
    name: str, params: Params, root: Path, shards: list[int] | None = None, force: bool = False
) -> dict[str, Any]:
    """Run stage ``name`` writing under ``root/<name>/``, then record its lineage; returns its metadata
    (``up_to_date``: True when its lineage record matched and nothing ran; ``run``: the record of the
    run that built the folder). ``shards``: the shards of a sharded stage to run (default all);
    ``force``: run even when up to date."""
    stage = get_stage(name)
    if shards is not None and not stage.sharded:
        sharded = [s.name for s in STAGES.values() if s.sharded]
        raise StageError(f"{name} has no shards; only {', '.join(sharded)} is partitioned")
    rec = None if force else lineage.up_to_date(stage, params, root)
    if rec is not None:
        return {**rec["summary"], RUN_KEY: read_run_record(root, name), "up_to_date": True}
    fp = lineage.fingerprint(stage, params, root)
    fn, view = load_function(stage.fn), scoped(params, stage.params, name)
    started, t0 = datetime.now(UTC), time.perf_counter()
    meta = fn(view, root, shards, fp["digest"]) if stage.sharded else fn(view, root)
    run = {
        "started": started.isoformat(timespec="seconds"),
        "seconds": round(time.perf_counter() - t0, 1),
        **meta.pop(RUN_KEY, {}),
    }
    if meta.get("complete", True):  # a sharded run of some shards records nothing until all are in
        with _held(stage, root):
            lineage.record(name, root, fp, meta)
            write_run_record(root, name, run)
    return {**meta, RUN_KEY: run, "up_to_date": False}


def run_check(stage: Stage, check_name: str, params: Params, root: Path) -> tuple[bool, str]:
    """Check ``check_name`` of ``stage`` on its output: (passed, detail)."""
    (check,) = [c for c in stage.checks if c.name == check_name]
    fn = load_function(check.fn)
    return fn(root, scoped(params, stage.params, stage.name)) if check.with_params else fn(root)


def stale(params: Params, root: Path) -> list[str]:
    """The stages to run, in lineage order: those not up to date and everything downstream of them."""
    out: list[str] = []
    for stage in STAGES.values():
        if any(up in out for up in stage.upstream) or lineage.up_to_date(stage, params, root) is None:
            out.append(stage.name)
    return out
