"""Real seed datasets read from a local copy (``seed.path``), never downloaded: COCO 2017, FineVideo and
LongVideoBench, the sources Orchestra-o1 seeds its pipeline from. Each becomes OmniGAIA-format task
records with the modal files copied (hard-linked where the file system allows) under ``media/``, and
whatever answer and hints the dataset has. Layouts, as the datasets publish them:

- ``coco``: ``annotations/instances_<split>.json`` (and ``captions_<split>.json`` when present) and
  the images in ``<split>/``; ``seed.split`` defaults to ``val2017``. One task per image: how many
  objects of its most frequent category (non-crowd instances) it shows; the captions are the hints.
- ``finevideo``: the dataset's parquet shards (columns ``mp4``: the video's bytes, ``json``: its
  metadata) anywhere under the folder. One task per ``content_metadata.qAndA`` item.
- ``longvideobench``: ``lvb_<split>.json`` (``seed.split`` defaults to ``val``), ``videos/`` and
  ``subtitles/``. One multiple-choice task per entry, answered by the option's letter; an entry
  without ``correct_choice`` (the test file's) has no answer and is an error.

Tasks are taken in the dataset's order and ``seed.limit`` stops reading early, so a small slice of a
large copy costs only that slice.
"""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from orchestra.config import SeedParams
from orchestra.data.seed_checks import safe_id
from orchestra.errors import RecordError, StageError
from orchestra.io import media_file
from orchestra.schemas import ModalInput, Task

__all__ = ["DATASET_SOURCES", "dataset_files", "load_dataset_source"]

DATASET_SOURCES = ("coco", "finevideo", "longvideobench")
_LETTERS = "ABCDEFGHIJ"


def _root(params: SeedParams) -> Path:
    if not params.path:
        raise StageError(
            f"seed.path is not set: seed.source {params.source!r} reads a local copy of the dataset"
        )
    root = Path(params.path).expanduser()
    if not root.is_dir():
        raise StageError(f"seed.path {str(root)!r} is not a folder (seed.source {params.source!r} reads one)")
    return root


def _read_json(path: Path, what: str) -> Any:
    if not path.is_file():
        raise StageError(f"seed.path: {path} is missing ({what})")
    try:
        return json.loads(path.read_bytes())
    except (OSError, ValueError) as e:
        raise StageError(f"seed.path: {path} is not readable JSON: {e}") from e


def _place(root: Path, name: str, media: Path, rel: str) -> str:
    """Put the dataset's file ``root/name`` at ``media/rel`` (a hard link, or a copy across file
    systems); returns ``rel``. ``name`` comes from the dataset's annotations: it must stay inside
    ``root`` and reach its file through no symbolic link (orchestra.io.media_file)."""
    try:
        src = media_file(root, name)
    except RecordError as e:
        raise StageError(f"seed.path: {e} (a task names it)") from e
    dst = media / rel
    dst.parent.mkdir(parents=True, exist_ok=True)
    if not dst.exists():
        try:
            os.link(src, dst)
        except OSError:
            shutil.copyfile(src, dst)
    return rel


def _need(record: dict[str, Any], key: str, where: str) -> Any:
    if key not in record:
        raise StageError(f"seed.path: {where} has no {key!r} (keys: {', '.join(sorted(record))})")
    return record[key]


def _coco(params: SeedParams, root: Path, media: Path) -> Iterator[Task]:
    split = params.split or "val2017"
    inst = _read_json(root / "annotations" / f"instances_{split}.json", "COCO instances annotations")
    caps_file = root / "annotations" / f"captions_{split}.json"
    caps = _read_json(caps_file, "COCO captions") if caps_file.is_file() else {"annotations": []}
    where = f"instances_{split}.json"
    names = {c["id"]: c["name"] for c in _need(inst, "categories", where)}
    counts: dict[int, Counter[int]] = {}
    for a in _need(inst, "annotations", where):
        if not a.get("iscrowd", 0):
            counts.setdefault(a["image_id"], Counter())[a["category_id"]] += 1
    captions: dict[int, list[str]] = {}
    for a in caps.get("annotations", []):
        captions.setdefault(a["image_id"], []).append(" ".join(str(a["caption"]).split()))
    for img in sorted(_need(inst, "images", where), key=lambda i: i["id"]):
        found = counts.get(img["id"])
        if not found:
            continue  # nothing countable in this image
        cat, n = min(found.items(), key=lambda kv: (-kv[1], kv[0]))
        name = names.get(cat)
        if name is None:
            raise StageError(f"seed.path: {where} annotates category {cat}, which it does not list")
        rel = _place(root / split, img["file_name"], media, f"images/{img['file_name']}")
        hints = [f"Caption: {c}" for c in captions.get(img["id"], [])]
        yield Task(
            id=f"coco-{img['id']}",
            question=f"How many objects of the COCO category '{name}' does the image show?",
            omni_modal_input=[ModalInput(type="image", id=f"image_{img['id']}", path=rel)],
            annotated_solution=[*hints, f"Step 1: Count the '{name}' instances in the image: {n}."],
            sources=[{"type": "dataset", "url": img.get("coco_url"), "key_information": f"{n} x {name}"}],
            answer=str(n),
            total_steps=1,
            Level="Easy",
            required_external_tools=[],
            task_type="image",
        )


def _finevideo_rows(root: Path) -> Iterator[tuple[bytes, dict[str, Any]]]:
    import pyarrow.parquet as pq

    shards = sorted(root.rglob("*.parquet"))
    if not shards:
        raise StageError(f"seed.path: no FineVideo parquet shards (*.parquet) under {root}")
    for shard in shards:
        try:
            pf = pq.ParquetFile(shard)
        except (OSError, ValueError) as e:  # pyarrow's ArrowInvalid is a ValueError
            raise StageError(f"seed.path: {shard} is not a readable parquet file: {e}") from e
        missing = {"mp4", "json"} - set(pf.schema_arrow.names)
        if missing:
            raise StageError(f"seed.path: {shard} lacks the FineVideo columns {sorted(missing)}")
        for batch in pf.iter_batches(batch_size=8, columns=["mp4", "json"]):
            for row in batch.to_pylist():
                meta = row["json"]
                yield row["mp4"], json.loads(meta) if isinstance(meta, str | bytes) else meta


def _finevideo(params: SeedParams, root: Path, media: Path) -> Iterator[Task]:
    for k, (mp4, meta) in enumerate(_finevideo_rows(root)):
        name = meta.get("original_video_filename") or f"finevideo_{k:06d}.mp4"
        vid = safe_id(Path(name).stem)
        content = meta.get("content_metadata") or {}
        qas = [q for q in content.get("qAndA") or [] if q.get("question") and q.get("answer")]
        if not qas or not mp4:
            continue
        rel = f"videos/{vid}.mp4"
        dst = media / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_bytes(mp4)
        about = [content.get("title"), content.get("description")]
        for i, qa in enumerate(qas, 1):
            yield Task(
                id=f"finevideo-{vid}-q{i}",
                question=" ".join(str(qa["question"]).split()),
                omni_modal_input=[ModalInput(type="video", id=f"video_{vid}", path=rel)],
                annotated_solution=[f"Video: {t}" for t in about if t],
                sources=[
                    {
                        "type": "dataset",
                        "url": f"finevideo:{name}",
                        "key_information": meta.get("youtube_title"),
                    }
                ],
                answer=" ".join(str(qa["answer"]).split()),
                task_type="video w/ audio",
                category=meta.get("content_parent_category"),
            )


def _longvideobench(params: SeedParams, root: Path, media: Path) -> Iterator[Task]:
    split = params.split or "val"
    name = f"lvb_{split}.json"
    entries = _read_json(root / name, "LongVideoBench annotations")
    if not isinstance(entries, list):
        raise StageError(f"seed.path: {root / name} is not a list of questions")
    for e in entries:
        eid = _need(e, "id", name)
        if e.get("correct_choice") is None:
            raise StageError(
                f"seed.path: {name} entry {eid!r} has no correct_choice (the test file has no answers)"
            )
        options = list(_need(e, "candidates", name))
        if not 0 <= int(e["correct_choice"]) < len(options) <= len(_LETTERS):
            raise StageError(
                f"seed.path: {name} entry {eid!r}: correct_choice {e['correct_choice']} of {len(options)}"
            )
        listed = " ".join(f"{_LETTERS[i]}. {o}" for i, o in enumerate(options))
        rel = _place(root / "videos", _need(e, "video_path", name), media, f"videos/{e['video_path']}")
        sources: list[dict[str, Any]] = []
        if e.get("subtitle_path"):
            sub = _place(root / "subtitles", e["subtitle_path"], media, f"subtitles/{e['subtitle_path']}")
            sources.append({"type": "subtitles", "url": sub, "key_information": None})
        yield Task(
            id=f"lvb-{eid}",
            question=f"{' '.join(str(e['question']).split())} Options: {listed} "
            "Answer with the option's letter.",
            omni_modal_input=[ModalInput(type="video", id=f"video_{e['video_id']}", path=rel)],
            sources=sources,
            answer=_LETTERS[int(e["correct_choice"])],
            Level=e.get("level"),
            task_type="video",
            category=e.get("topic_category"),
        )


def load_dataset_source(params: SeedParams, media: Path) -> list[Task]:
    """The tasks of ``params.source`` (one of :data:`DATASET_SOURCES`), at most ``params.limit``, their
    modal files placed under ``media``; :class:`StageError` naming ``seed.path`` for a missing or
    malformed copy."""
    read = {"coco": _coco, "finevideo": _finevideo, "longvideobench": _longvideobench}[params.source]
    tasks: list[Task] = []
    for task in read(params, _root(params), Path(media)):
        tasks.append(task)
        if params.limit is not None and len(tasks) >= params.limit:
            break  # before the next task's media is placed
    if not tasks:
        raise StageError(f"seed.path {params.path!r}: no {params.source} tasks found")
    return tasks


def dataset_files(params: SeedParams) -> dict[str, str]:
    """What the lineage records of a dataset copy: each annotation file's (JSON, parquet) size and
    modification time; hashing a 20 GB copy on every check would cost more than the stage."""
    root = Path(params.path or "")
    if not root.is_dir():
        return {"seed.path": "missing"}
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file() and p.suffix in (".json", ".parquet"):
            st = p.stat()
            out[p.relative_to(root).as_posix()] = f"{st.st_size}:{st.st_mtime_ns}"
    return out
