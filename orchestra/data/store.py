"""The data folder's layout: each stage's folder, the files other stages read from it, and their readers.

A stage writes ``<data>/<stage>/`` whole (:func:`orchestra.io.atomic_dir`). What a run measured rather
than built (wall seconds, tool latencies, MLflow run ids, Great Expectations run results, machine paths)
goes under a :data:`RUN_DIR` folder (the stage's, or one beside the files it is about), which no digest
covers and DVC ignores: the rest of the folder is a function of the stage's inputs, the same bytes on
any machine, in any checkout folder.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from orchestra.io import atomic_write_text, dump_json

__all__ = [
    "CLOCK_KEYS",
    "RUN_DIR",
    "RUN_FILE",
    "join_clock",
    "read_run_record",
    "run_dir",
    "split_clock",
    "stage_dir",
    "write_run_record",
]

#: the run record's folder inside a stage folder (see the module docstring; .dvcignore names it too)
RUN_DIR = "_run"
#: the runner's record of one run of a stage: when, how long, and what the stage measured
RUN_FILE = "run.json"


def stage_dir(root: Path, name: str) -> Path:
    return Path(root) / name


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
CLOCK_KEYS = frozenset({"latency_s", "start_s", "end_s", "critical_path_s", "render_s", "policy_s", "wall_s"})
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
