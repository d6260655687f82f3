"""The verified_samples stage: five checks per candidate, the Great Expectations suite over them,
rejects with reasons, the split by seed, and the test split as the embedded benchmark."""

from __future__ import annotations

import json
import shutil
import time
from collections import Counter
from pathlib import Path
from typing import Any

from orchestra.config import Params
from orchestra.data.seed_checks import media_missing
from orchestra.data.store import (
    BENCHMARK_DIR,
    KB_DIR,
    MEDIA_DIR,
    TASKS_FILE,
    VERIFIED_FILE,
    benchmark_file,
    read_anchors,
    read_candidates,
    read_verified,
    run_dir,
    seeds_dir,
    stage_dir,
)
from orchestra.errors import StageError
from orchestra.io import atomic_dir, atomic_write_text, dump_json, media_file, write_jsonl
from orchestra.schemas import (
    Task,
    VerifiedSample,
    read_tasks_json,
    write_tasks_json,
)
from orchestra.stages import VERIFIED_SAMPLES

__all__ = ["build_verified_samples", "check_kept_with_suite", "check_verified"]


def _benchmark(tasks: list[Task], seeds: Path, out: Path) -> int:
    """``tasks`` in OmniGAIA format with the media they read and the wiki pages, under ``out``."""
    out.mkdir(parents=True)
    files = sorted({m.path for t in tasks for m in t.omni_modal_input})
    for rel in files:
        (out / MEDIA_DIR / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(media_file(seeds / MEDIA_DIR, rel), out / MEDIA_DIR / rel)
    if (seeds / KB_DIR / "pages.jsonl").is_file():  # a seed source without a knowledge base has none
        (out / KB_DIR).mkdir()
        shutil.copy2(seeds / KB_DIR / "pages.jsonl", out / KB_DIR / "pages.jsonl")
    write_tasks_json(out / TASKS_FILE, tasks)
    return len(files)


def build_verified_samples(params: Params, root: Path) -> dict[str, Any]:
    """Verify data/rewrite_candidates; write verified.jsonl (with the split), rejects.jsonl, the GE
    validation (_run/ge/: JSON result and Data Docs), benchmark/ (the test split in OmniGAIA format
    with its media and pages) and summary.json (the funnel, rejections per check, pass rates); the
    checks' timings and the paths of the GE result go to the run record."""
    from orchestra.data.decisions import seed_splits
    from orchestra.data.expectations import validate_checks
    from orchestra.data.reference import load_reference_seeds
    from orchestra.data.verify import CHECKS, verify_report

    root = Path(root)
    seeds = load_reference_seeds(root)
    candidates, anchors = read_candidates(root), read_anchors(root)
    t0 = time.perf_counter()
    report = verify_report(
        seeds,
        anchors,
        candidates,
        seeds_dir(root),
        params.verify,
        tool_params=params.tools,
        providers=params.providers,
    )
    checked = time.perf_counter() - t0
    by_id = {c.candidate_id: c for c in candidates}
    results = {r.candidate_id: r for r in report.results}
    splits = seed_splits([str(s.id) for s in seeds], params.decisions.split, params.decisions.seed)
    final = stage_dir(root, VERIFIED_SAMPLES)
    with atomic_dir(final) as tmp:
        ge_dir = run_dir(tmp) / "ge"  # GE's project, run results and Data Docs hold run ids and times
        ge = validate_checks(report.results, params.verify, ge_dir)
        result_copy = ge_dir / "validation_result.json"  # a stable name (GE's own path is timestamped)
        shutil.copy2(ge.validation_json, result_copy)
        kept = [
            VerifiedSample(
                candidate_id=cid,
                seed_id=by_id[cid].seed_id,
                split=splits[by_id[cid].seed_id],  # type: ignore[arg-type]
                task=by_id[cid].task,
                verification=results[cid],
            )
            for cid in sorted(ge.passed_ids)
        ]
        if not kept:
            failed_by = Counter(f"failed {c}" for r in ge.rejects for c in r["failed_checks"])
            raise StageError.empty(
                VERIFIED_SAMPLES, f"verified samples of {len(candidates)} candidates", failed_by
            )
        write_jsonl(tmp / VERIFIED_FILE, kept)
        atomic_write_text(
            tmp / "rejects.jsonl", "".join(json.dumps(r, sort_keys=True) + "\n" for r in ge.rejects)
        )
        test = [s.task for s in kept if s.split == "test"]
        media = _benchmark(test, seeds_dir(root), tmp / BENCHMARK_DIR)
        failed = Counter(c for r in ge.rejects for c in r["failed_checks"])
        summary = {
            "funnel": {
                "seeds": len(seeds),
                "seeds_with_anchors": len({a.task_id for a in anchors}),
                "candidates": len(candidates),
                "verified": len(kept),
            },
            "rows": len(kept),
            "rejected": len(ge.rejects),
            "rejected_by_check": {c: failed.get(c, 0) for c in CHECKS},
            "pass_rates": {k: round(v, 4) for k, v in report.pass_rates().items()},
            "by_split": dict(sorted(Counter(s.split for s in kept).items())),
            "cells": {
                f"{s}/{lv}": n
                for (s, lv), n in sorted(
                    Counter((by_id[k.candidate_id].strategy, k.task.level) for k in kept).items()
                )
            },
            "hard_share": round(sum(k.task.level == "Hard" for k in kept) / max(1, len(kept)), 3),
            "benchmark": {"tasks": len(test), "media_files": media},
            "ge_success": ge.success,
            "ge_expectations": _expectations(ge.statistics),
        }
        atomic_write_text(tmp / "summary.json", dump_json(summary) + "\n")
    run = {
        "ms_per_candidate": report.ms_per_candidate(),
        "verify_s": round(checked, 2),
        "ge_result": str(final / result_copy.relative_to(tmp)),
        "ge_data_docs": str(final / ge.data_docs_index.relative_to(tmp)),
    }
    return {**summary, "run": run}


def _expectations(statistics: dict[str, Any]) -> dict[str, Any]:
    """How many of the suite's expectations were evaluated, and held, on all candidates."""
    return {k: statistics.get(f"{k}_expectations") for k in ("evaluated", "successful")}


def check_verified(root: Path) -> tuple[bool, str]:
    """What may reach training: every kept sample passed all five checks, no seed is in two splits,
    and the benchmark holds exactly the test split with every media file it reads."""
    root = Path(root)
    samples = read_verified(root)
    if not samples:
        return False, "no verified samples"
    bad = [s.candidate_id for s in samples if not s.verification.passed]
    if bad:
        return False, f"{len(bad)} kept samples failed a check, e.g. {bad[:3]}"
    splits: dict[str, set[str]] = {}
    for s in samples:
        splits.setdefault(s.seed_id, set()).add(str(s.split))
    crossing = sorted(k for k, v in splits.items() if len(v) > 1)
    if crossing:
        return False, f"seeds in two splits: {crossing[:5]}"
    bench = benchmark_file(root).parent
    tasks = read_tasks_json(bench / TASKS_FILE)
    want = sorted(s.candidate_id for s in samples if s.split == "test")
    if sorted(str(t.id) for t in tasks) != want:
        return False, "the benchmark is not the test split"
    missing = [gone for t in tasks if (gone := media_missing(t, bench / MEDIA_DIR))]
    if missing:
        return False, f"benchmark media: {missing[:3]}"
    return True, f"{len(samples)} samples, {len(splits)} seeds, {len(tasks)} benchmark tasks"


def check_kept_with_suite(root: Path, params: Params) -> tuple[bool, str]:
    """The Great Expectations suite of the checks, run again on the kept samples alone: every
    expectation must hold (on all candidates the failures are the rejects; here there may be none)."""
    import tempfile

    from orchestra.data.expectations import validate_checks

    samples = read_verified(root)
    if not samples:
        return False, "no verified samples"
    with tempfile.TemporaryDirectory(prefix=".ge-check-", dir=root) as tmp:
        try:
            result = validate_checks([s.verification for s in samples], params.verify, Path(tmp) / "ge")
        except StageError as e:  # a sample's recorded verdict and its checks disagree
            return False, str(e)
    stats = result.statistics
    held = f"{stats.get('successful_expectations')}/{stats.get('evaluated_expectations')}"
    return result.success, f"suite {held} expectations held on {len(samples)} kept samples"
