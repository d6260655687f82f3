"""Atomic file and directory writes (temp, then rename), a lock between processes, JSONL/Parquet record
I/O, a folder's digest, a task's media file confined to its media folder."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from orchestra.errors import RecordError

M = TypeVar("M", bound=BaseModel)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _umask()
_JSON_COLUMNS = "orchestra.json_columns"


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temp file in the same folder and ``os.replace``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_UMASK)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


@contextmanager
def atomic_dir(path: Path) -> Iterator[Path]:
    """Yield a fresh temp folder beside ``path``; on success it replaces ``path`` whole.

    On any error the temp folder is removed and what was at ``path`` stays untouched.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    os.chmod(tmp, 0o777 & ~_UMASK)
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = path.with_name(f".{path.name}.old")
    shutil.rmtree(old, ignore_errors=True)
    if path.exists():
        os.replace(path, old)
    os.replace(tmp, path)
    shutil.rmtree(old, ignore_errors=True)


@contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created if absent) while the block runs: ``flock``, so it
    holds between processes and between threads that open the file apart, and dies with its holder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def dir_digest(path: Path) -> str:
    """SHA-256 over every file of a folder (relative path and bytes, in path order); an absent folder
    digests as empty. The model digest of evaluation's ``run.json``, the registry and the audit."""
    h = hashlib.sha256()
    for f in sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else ():
        h.update(f.relative_to(path).as_posix().encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def media_path_problem(rel: str) -> str | None:
    """What is wrong with ``rel`` as a task's media path (relative to its media folder), or None: it
    must be relative, in normal form (no ``.``, ``..`` or empty parts, ``/`` between them) and free of
    control characters, so that it names a file under the folder and nothing else."""
    if not rel:
        return "it is empty"
    if any(ord(c) < 32 or ord(c) == 127 for c in rel):
        return "it holds a control character (NUL, newline, ...)"
    if "\\" in rel:
        return "it holds a backslash (media paths use '/')"
    if rel.startswith("/") or rel[1:3] == ":/":
        return "it is absolute (media paths are relative to the task file's media folder)"
    parts = rel.split("/")
    if ".." in parts:
        return "it climbs out of the media folder ('..')"
    if "" in parts or "." in parts:
        return "it is not in normal form (an empty or '.' part)"
    return None


def media_file(root: Path, rel: str) -> Path:
    """``root/rel``, a task's media file, checked to lie inside ``root``: ``rel`` passes
    :func:`media_path_problem`, no part of the way from ``root`` is a symbolic link (a link is never
    followed, wherever it points) and the end is a regular file (not a FIFO, a device or a folder).
    RecordError naming ``rel`` otherwise."""
    problem = media_path_problem(rel)
    if problem:
        raise RecordError(f"media path {rel!r}: {problem}")
    path = Path(root)
    for part in PurePosixPath(rel).parts:
        path = path / part
        try:
            mode = path.lstat().st_mode
        except OSError as e:
            raise RecordError(f"media path {rel!r}: {path} is missing ({e.strerror})") from e
        if stat.S_ISLNK(mode):
            raise RecordError(f"media path {rel!r}: {path} is a symbolic link, which is never followed")
    if not stat.S_ISREG(mode):
        raise RecordError(f"media path {rel!r}: {path} is not a regular file")
    return path


def _open_below(root: Path, rel: str) -> int:
    """A descriptor of ``root/rel`` opened part by part with ``O_NOFOLLOW`` (and ``O_NONBLOCK``, so a
    FIFO does not block the open); RecordError where a part is a link or missing."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in rel.split("/"):
            below = os.open(part, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
            os.close(fd)
            fd = below
    except OSError as e:
        os.close(fd)
        raise RecordError(
            f"media path {rel!r}: cannot be opened without following a link ({e.strerror})"
        ) from e
    return fd


def copy_media(root: Path, rel: str, dst: Path) -> int:
    """Copy the media file ``root/rel`` to ``dst`` (in a folder being staged: not itself atomic),
    read through a descriptor opened part by part with ``O_NOFOLLOW``, so a link put in the way after
    :func:`media_file`'s check is refused, not followed; the file must be a regular file with no second
    hard link (which may be any file of the same disk). Returns its size; RecordError naming ``rel``
    otherwise, with nothing written."""
    media_file(root, rel)
    with os.fdopen(_open_below(Path(root), rel), "rb") as src:
        st = os.fstat(src.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise RecordError(f"media path {rel!r}: not a regular file")
        if st.st_nlink > 1:
            raise RecordError(f"media path {rel!r}: a file with {st.st_nlink} hard links (copy it)")
        Path(dst).parent.mkdir(parents=True, exist_ok=True)
        with open(dst, "wb") as out:
            shutil.copyfileobj(src, out)
    return st.st_size


def dump_json(obj: object) -> str:
    """Canonical JSON: sorted keys, no ASCII escaping, so equal data gives equal bytes."""
    return json.dumps(obj, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def record_dict(record: BaseModel) -> dict:
    """A record as plain JSON data: aliases, and only the fields that were set or have a value."""
    return record.model_dump(mode="json", by_alias=True, exclude_unset=True)


def write_jsonl(path: Path, records: Iterable[BaseModel]) -> int:
    """Write records one JSON object per line, atomically; returns the row count."""
    lines = [dump_json(record_dict(r)) for r in records]
    atomic_write_text(Path(path), "".join(line + "\n" for line in lines))
    return len(lines)


def read_jsonl(path: Path, model: type[M]) -> list[M]:
    """Read a JSONL file into ``model`` records; a bad line raises RecordError naming it."""
    path = Path(path)
    if not path.is_file():
        raise RecordError(f"{path}: no such record file")
    out: list[M] = []
    with path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                out.append(model.model_validate_json(line))
            except ValidationError as e:
                raise RecordError(f"{path}:{n}: not a valid {model.__name__}: {e}") from e
    return out


def write_parquet(path: Path, records: Iterable[BaseModel]) -> int:
    """Write records as Parquet, atomically. Columns holding lists or objects in any row are
    stored as JSON text and named in the file's metadata, so they read back exactly."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [record_dict(r) for r in records]
    nested = sorted({k for row in rows for k, v in row.items() if isinstance(v, dict | list)})
    flat = [{k: dump_json(v) if k in nested else v for k, v in row.items()} for row in rows]
    table = pa.Table.from_pylist(flat)
    table = table.replace_schema_metadata({_JSON_COLUMNS: dump_json(nested)})
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        pq.write_table(table, tmp)
        os.chmod(tmp, 0o666 & ~_UMASK)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return len(rows)


def read_parquet(path: Path, model: type[M]) -> list[M]:
    """Read records written by :func:`write_parquet` back into ``model``."""
    import pyarrow.parquet as pq

    path = Path(path)
    if not path.is_file():
        raise RecordError(f"{path}: no such record file")
    table = pq.read_table(path)
    meta = table.schema.metadata or {}
    nested = set(json.loads(meta.get(_JSON_COLUMNS.encode(), b"[]")))
    out: list[M] = []
    for n, row in enumerate(table.to_pylist(), 1):
        data = {k: json.loads(v) if k in nested else v for k, v in row.items() if v is not None}
        try:
            out.append(model.model_validate(data))
        except ValidationError as e:
            raise RecordError(f"{path}: row {n}: not a valid {model.__name__}: {e}") from e
    return out
