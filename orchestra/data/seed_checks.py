"""What every seed task passes before seed_tasks writes it, whatever its source: ids safe in file names
and unique, bounded text (``seed.limits``), and media confined to the media folder — each a regular,
non-empty file of bounded size, reached through no symbolic link, whose first bytes are of the kind
the task declares. A failure is a StageError naming the task and what is wrong; the stage then
writes nothing, so the previous output stays.

The media of a folder someone else hands over (an ``omnigaia_file``'s, ``data/incoming``'s) are
copied file by file, only the files its tasks name (:func:`copy_named_media`): a link is never
followed and a file with a second hard link (which may be any file of the same file system) is
refused. docs/how-to/own-data.md has the threat model.
"""

from __future__ import annotations

import filecmp
import re
from collections.abc import Iterable
from pathlib import Path

import filetype

from orchestra.config.stages import SeedLimits
from orchestra.data.store import MEDIA_DIR
from orchestra.errors import RecordError, StageError
from orchestra.io import copy_media, media_file, media_path_problem
from orchestra.schemas import Task

__all__ = ["check_seed_tasks", "copy_named_media", "media_missing", "safe_id"]

#: a task id as file names use it (evaluation writes ``trajectories/<id>.json``)
_SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
#: the MIME families a declared media type may hold (a video container may carry a sound track only)
_KINDS = {"image": ("image/",), "audio": ("audio/", "video/"), "video": ("video/",)}


def safe_id(text: str) -> str:
    """``text`` as a task id: characters other than letters, digits, ``.``, ``_`` and ``-`` as ``_``."""
    out = re.sub(r"[^A-Za-z0-9._-]", "_", text)
    return out if out[:1].isalnum() else f"x{out}"


def _id_problem(tid: str, limits: SeedLimits) -> str | None:
    if len(tid) > limits.id_chars:
        return f"its id is {len(tid)} characters long (seed.limits.id_chars {limits.id_chars})"
    if not _SAFE_ID.fullmatch(tid):
        return "its id is not a letter or digit followed by letters, digits, '.', '_' or '-'"
    return None


def _text_problem(task: Task, limits: SeedLimits) -> str | None:
    q, a, n = len(task.question), len(task.answer), len(task.omni_modal_input)
    if q > limits.question_chars:
        return f"its question is {q:,} characters (seed.limits.question_chars {limits.question_chars:,})"
    if not task.question.strip():
        return "its question is empty"
    if a > limits.answer_chars:
        return f"its answer is {a:,} characters (seed.limits.answer_chars {limits.answer_chars:,})"
    if n > limits.media_per_task:
        return f"it names {n} media (seed.limits.media_per_task {limits.media_per_task})"
    return None


def _media_problem(media: Path, rel: str, kind: str, limits: SeedLimits) -> str | None:
    try:
        path = media_file(media, rel)
    except RecordError as e:
        return str(e)
    size = path.stat().st_size
    if size == 0:
        return f"media file {rel!r} is empty (0 bytes)"
    if size > limits.media_bytes:
        return f"media file {rel!r} is {size:,} bytes (seed.limits.media_bytes {limits.media_bytes:,})"
    if kind not in _KINDS:
        return f"media {rel!r} has type {kind!r} (image, audio or video)"
    found = filetype.guess_mime(str(path))
    if found is None or not found.startswith(_KINDS[kind]):
        return (
            f"media file {rel!r} is declared {kind}, but its bytes are {found or 'of no known media format'}"
        )
    return None


def _task_problem(task: Task, media: Path | None, limits: SeedLimits) -> str | None:
    problem = _id_problem(str(task.id), limits) or _text_problem(task, limits)
    for m in task.omni_modal_input if media is not None else ():
        problem = problem or _media_problem(media, m.path, m.type, limits)
    return problem


def media_missing(task: Task, media: Path) -> str | None:
    """Why one of ``task``'s media files cannot be read under ``media``, or None: ``media file
    missing: PATH``, or ``media file refused: WHY`` (outside it, a link, not a regular file), the
    reason a stage sets such a task aside with (the part before ':' is what its counts group by)."""
    for m in task.omni_modal_input:
        try:
            media_file(media, m.path)
        except RecordError as e:
            gone = media_path_problem(m.path) is None and not (media / m.path).exists()
            return f"media file missing: {m.path}" if gone else f"media file refused: {e}"
    return None


def check_seed_tasks(tasks: Iterable[Task], media: Path | None, limits: SeedLimits, where: str) -> None:
    """StageError naming ``where`` (the source) and the first task that fails the module's checks, its
    media read under ``media`` (None: a source that ships no media, the public OmniGAIA metadata)."""
    seen: set[str] = set()
    for task in tasks:
        tid = str(task.id)
        problem = _task_problem(task, media, limits)
        if tid in seen:
            problem = "its id is taken by an earlier task (ids key splits, lineage and results)"
        if problem:
            raise StageError(f"{where}: task {tid[:80]!r}: {problem}")
        seen.add(tid)


def copy_named_media(tasks: Iterable[Task], folder: Path, dst: Path, where: str) -> None:
    """Copy the media files ``tasks`` name from ``folder/media`` to ``dst/media`` (same relative paths)
    by :func:`orchestra.io.copy_media`, ``media`` itself included in the check (no link followed, no
    hard-linked file); a file two tasks name is copied once, two different files under one name are
    an error."""
    for task in tasks:
        for m in task.omni_modal_input:
            out = dst / MEDIA_DIR / m.path
            into = out.with_name(f".{out.name}.again") if out.exists() else out
            try:
                copy_media(folder, f"{MEDIA_DIR}/{m.path}", into)
            except RecordError as e:
                raise StageError(f"{where}: task {str(task.id)[:80]!r}: {e}") from e
            if into != out:
                same = filecmp.cmp(out, into, shallow=False)
                into.unlink()
                if not same:
                    raise StageError(f"{where}: another media file is named {m.path}")
