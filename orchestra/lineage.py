"""Lineage records: what each stage read (params, code, upstream outputs) and wrote, kept beside its output.

Every stage writes ``data/<stage>/lineage.json`` after it succeeds: the params it reads, a digest of its
code, the DVC-style hash of every upstream output it read and of its own output. A stage whose record
matches the present params, code and inputs (and whose output is unchanged since) is up to date and is
not recomputed; `orchestra audit` walks the same records from a score back to the seeds.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Container, Mapping
from pathlib import Path
from typing import Any

from orchestra.config import Params
from orchestra.data.sources import DATASET_SOURCES, dataset_files
from orchestra.data.store import RUN_DIR
from orchestra.io import atomic_write_text, dump_json
from orchestra.stages import CODE_ROOT, SEED_TASKS, Stage, code_paths

__all__ = [
    "LINEAGE_FILE",
    "dir_md5",
    "fingerprint",
    "output_md5",
    "read_record",
    "record",
    "up_to_date",
]

LINEAGE_FILE = "lineage.json"


def _file_md5(path: Path) -> str:
    h = hashlib.md5(usedforsecurity=False)
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def dir_md5(path: Path, exclude: Container[str] = ()) -> str:
    """The hash DVC gives a folder output (md5 of its sorted ``[{md5, relpath}]`` listing, ``.dir``),
    without the run records (every folder named :data:`RUN_DIR`, which DVC ignores too); ``exclude``:
    more relative paths left out. ``"missing"`` when there is no folder."""
    path = Path(path)
    if not path.is_dir():
        return "missing"
    entries = [
        {"md5": _file_md5(f), "relpath": rel}
        for f in path.rglob("*")
        if f.is_file()
        and (rel := f.relative_to(path).as_posix()) not in exclude
        and RUN_DIR not in rel.split("/")[:-1]
    ]
    entries.sort(key=lambda e: e["relpath"])
    listing = json.dumps(entries, sort_keys=True).encode("utf-8")
    return hashlib.md5(listing, usedforsecurity=False).hexdigest() + ".dir"


def output_md5(root: Path, name: str) -> str:
    """Stage ``name``'s output as its lineage record hashes it: its folder, less the record itself."""
    return dir_md5(Path(root) / name, exclude=(LINEAGE_FILE,))


def _code_digest(paths: tuple[str, ...]) -> str:
    h = hashlib.sha256()
    for rel in paths:
        base = CODE_ROOT / rel
        files = [base] if base.is_file() else sorted(base.rglob("*")) if base.is_dir() else []
        for f in files:
            if f.is_file() and "__pycache__" not in f.parts and f.suffix != ".pyc":
                h.update(f.relative_to(CODE_ROOT).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
        if not files:
            h.update(f"{rel}: missing\0".encode())
    return h.hexdigest()


def _params_subset(params: Params, keys: tuple[str, ...]) -> dict[str, Any]:
    data = params.model_dump(mode="json")
    out: dict[str, Any] = {}
    for key in keys:
        node: Any = data
        for part in key.split("."):
            node = node.get(part) if isinstance(node, Mapping) else None
        out[key] = node
    return out


def _external(name: str, params: Params, root: Path) -> dict[str, str]:
    """Inputs from outside the data folder's stage outputs: seed files a user points at or drops in."""
    if name != SEED_TASKS:
        return {}
    out = {"incoming": dir_md5(root / params.seed.incoming) if params.seed.incoming else "off"}
    if params.seed.source == "omnigaia_file" and params.seed.path:
        src = Path(params.seed.path)
        out["seed.path"] = _file_md5(src) if src.is_file() else "missing"
        out["seed.path media"] = dir_md5(src.parent / "media")
        out["seed.path kb"] = dir_md5(src.parent / "kb")  # the pages beside it, which seed_tasks copies
    if params.seed.source in DATASET_SOURCES:
        out.update(dataset_files(params.seed))
    return out


def fingerprint(stage: Stage, params: Params, root: Path) -> dict[str, Any]:
    """What ``stage`` would read now; ``digest`` names the whole of it."""
    out: dict[str, Any] = {
        "params": _params_subset(params, stage.params),
        "code": _code_digest(code_paths(stage)),
        "inputs": {up: output_md5(root, up) for up in stage.upstream},
        "external": _external(stage.name, params, root),
    }
    out["digest"] = hashlib.sha256(dump_json(out).encode("utf-8")).hexdigest()
    return out


def read_record(root: Path, name: str) -> dict[str, Any] | None:
    path = Path(root) / name / LINEAGE_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None  # a record cut short is no record: the stage runs again
    return data if isinstance(data, dict) else None


def record(name: str, root: Path, fp: Mapping[str, Any], summary: Mapping[str, Any]) -> dict[str, Any]:
    """Write ``<name>/lineage.json`` for the output just built from ``fp``; returns it."""
    rec = {
        "stage": name,
        **fp,
        "outputs": output_md5(root, name),
        "summary": dict(summary),
    }
    atomic_write_text(Path(root) / name / LINEAGE_FILE, dump_json(rec) + "\n")
    return rec


def up_to_date(stage: Stage, params: Params, root: Path) -> dict[str, Any] | None:
    """The record of ``stage`` when its output was built from what it would read now and is unchanged
    since; ``None`` when it must run."""
    rec = read_record(root, stage.name)
    if rec is None or rec.get("digest") != fingerprint(stage, params, root)["digest"]:
        return None
    if rec.get("outputs") != output_md5(root, stage.name):
        return None  # edited or cut short after it was built
    return rec
