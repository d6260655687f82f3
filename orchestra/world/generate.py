"""generate_world: knowledge base, media and seed tasks of one procedural world, written to a folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from orchestra.config import WorldParams
from orchestra.errors import WorldError
from orchestra.espeak import available as speech_available
from orchestra.io import atomic_write_text, dump_json
from orchestra.schemas import Task, distribution, write_tasks_json
from orchestra.world.facts import MediaWriter
from orchestra.world.kb import build_kb, render_page
from orchestra.world.tasks import MIX_KEYS, build_task

OUTPUTS = ("tasks.json", "media", "kb", "truth")


def allocate_types(params: WorldParams) -> list[str]:
    """Task types for ``n_seeds`` tasks in the task_mix proportions (largest remainder), in a seeded order."""
    weights = {MIX_KEYS[k]: float(v) for k, v in params.task_mix.model_dump().items()}
    total = sum(weights.values())
    exact = {k: params.n_seeds * v / total for k, v in weights.items()}
    counts = {k: int(v) for k, v in exact.items()}
    rest = params.n_seeds - sum(counts.values())
    for k in sorted(exact, key=lambda k: (-(exact[k] - counts[k]), list(exact).index(k)))[:rest]:
        counts[k] += 1
    types = [k for k in weights for _ in range(counts[k])]
    order = np.random.default_rng([params.seed, 1]).permutation(len(types)).tolist()
    return [types[i] for i in order]


def allocate_categories(params: WorldParams) -> list[str]:
    """Categories for the tasks: as even as possible, in a seeded order."""
    cats = [params.categories[i % len(params.categories)] for i in range(params.n_seeds)]
    order = np.random.default_rng([params.seed, 2]).permutation(len(cats)).tolist()
    return [cats[i] for i in order]


def _jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    atomic_write_text(path, "".join(dump_json(r) + "\n" for r in rows))


def generate_world(params: WorldParams, out_dir: Path) -> dict[str, Any]:
    """Write tasks.json, media/, kb/pages.jsonl and truth/ for ``params`` into ``out_dir``.

    Same params give byte-identical files. ``out_dir`` may exist but must not already hold a world.
    Returns a summary: rows, distribution, entity/page/media counts and media bytes.
    """

    out_dir = Path(out_dir)
    clash = [name for name in OUTPUTS if (out_dir / name).exists()]
    if clash:
        raise WorldError(f"{out_dir} already holds world output {clash}; use an empty folder")
    out_dir.mkdir(parents=True, exist_ok=True)
    kb = build_kb(
        np.random.default_rng([params.seed, 0]),
        params.n_entities,
        list(params.categories),
        params.distractors_per_entity,
    )
    if params.speech and not speech_available():
        raise WorldError(
            "seed.world.speech is true but espeak-ng is not installed: install it (the Debian package "
            "espeak-ng; make setup does) or set seed.world.speech: false"
        )
    speech = params.speech
    writer = MediaWriter(params, kb, out_dir / "media", speech)
    tasks: list[Task] = []
    for i, (task_type, category) in enumerate(
        zip(allocate_types(params), allocate_categories(params), strict=True)
    ):
        rng = np.random.default_rng([params.seed, 3, i])
        tasks.append(build_task(writer, rng, f"w{params.seed}-{i + 1:04d}", task_type, category))
    (out_dir / "media").mkdir(exist_ok=True)
    write_tasks_json(out_dir / "tasks.json", tasks)
    pages = sorted((render_page(kb, e) for e in kb.entities), key=lambda p: p["url"])
    _jsonl(out_dir / "kb" / "pages.jsonl", pages)
    _jsonl(out_dir / "truth" / "entities.jsonl", [e.record() for e in kb.entities])
    _jsonl(out_dir / "truth" / "media.jsonl", sorted(writer.records, key=lambda r: r["id"]))
    media_bytes = sum(f.stat().st_size for f in (out_dir / "media").rglob("*") if f.is_file())
    summary = {
        "seed": params.seed,
        "rows": len(tasks),
        "entities": sum(e.distractor_of is None for e in kb.entities),
        "pages": len(pages),
        "media_files": len(writer.records),
        "media_bytes": media_bytes,
        "speech": speech,
        "distribution": distribution(tasks),
    }
    atomic_write_text(
        out_dir / "truth" / "world.json",
        dump_json({"params": params.model_dump(mode="json"), "summary": summary}) + "\n",
    )
    return summary
