"""The expert_trajectories and decision_samples stages over verified samples (train and val splits)."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

from orchestra.config import Params
from orchestra.data.store import (
    CLOCK_FILE,
    SAMPLES_FILE,
    TRAJECTORIES_FILE,
    media_dir,
    read_trajectories,
    read_verified,
    run_dir,
    samples_file,
    seeds_dir,
    split_clock,
    stage_dir,
)
from orchestra.errors import StageError
from orchestra.io import atomic_dir, atomic_write_text, dump_json, read_jsonl, record_dict, write_jsonl
from orchestra.schemas import DecisionSample, Delegate, Trajectory, VerifiedSample
from orchestra.stages import DECISION_SAMPLES, EXPERT_TRAJECTORIES

__all__ = ["build_decision_samples", "build_expert_trajectories", "check_decision_samples"]


def build_expert_trajectories(params: Params, root: Path, concurrency: int = 2) -> dict[str, Any]:
    """Run the ``orchestra`` system with the expert policy on every train and val sample (the test
    split is the benchmark: no trajectories there); keep the runs that reach the labelled answer.
    Writes trajectories.jsonl (without the clock: each run's timings go to ``_run/clock.jsonl``,
    :func:`orchestra.data.store.join_clock` puts them back), failed.jsonl (sample, answer, error) and
    summary.json."""
    from orchestra.agent.policies import OraclePolicy
    from orchestra.agent.runtime import open_runtime
    from orchestra.agent.systems import run_task

    root = Path(root)
    samples = [s for s in read_verified(root) if s.split in ("train", "val")]
    agent = params.agent
    t0 = time.perf_counter()
    runtime = open_runtime(
        agent,
        params.tools,
        pages=seeds_dir(root),
        media_root=media_dir(root),
        cache_dir=root,
        providers=params.providers,
    )
    with runtime as env:
        cache = env.perception

        async def main() -> list[Trajectory]:
            gate = asyncio.Semaphore(max(1, concurrency))

            async def one(s: VerifiedSample) -> Trajectory:
                async with gate:
                    return await run_task(s.task, "orchestra", OraclePolicy(s.task, agent), env)

            return await asyncio.gather(*(one(s) for s in samples))

        trajs = asyncio.run(main())
    kept, failed = [], []
    for s, tr in zip(samples, trajs, strict=True):
        if tr.answer == s.task.answer and tr.error is None:
            kept.append(tr)
        else:
            failed.append({"candidate_id": s.candidate_id, "answer": tr.answer, "error": tr.error})
    if not kept:
        why = Counter(f["error"] or f"answered {f['answer']!r}, not the label" for f in failed)
        raise StageError.empty(EXPERT_TRAJECTORIES, f"successful runs of {len(samples)} samples", why)
    # sub-tasks delegated after the first decision: escalations and redone failures
    later = sum(1 for tr in kept for st in tr.steps for r in st.results if r.get("turn", 0) > 0)
    summary = {
        "samples": len(samples),
        "rows": len(kept),
        "failed": len(failed),
        "success_rate": round(len(kept) / max(1, len(samples)), 4),
        "decisions": sum(len(tr.steps) for tr in kept),
        "subtasks_after_first_turn": later,
    }
    measured = {  # differs run to run, as the trajectories' own timings do: the run record's
        "wall_s": round(time.perf_counter() - t0, 2),
        "cache": None if cache is None else {"hits": cache.stats.hits, "misses": cache.stats.misses},
    }
    rows = [split_clock(record_dict(tr)) for tr in kept]
    with atomic_dir(stage_dir(root, EXPERT_TRAJECTORIES)) as tmp:
        atomic_write_text(tmp / TRAJECTORIES_FILE, "".join(dump_json(r) + "\n" for r, _ in rows))
        clock = "".join(dump_json({"task_id": r["task_id"], "clock": c}) + "\n" for r, c in rows)
        atomic_write_text(run_dir(tmp) / CLOCK_FILE, clock)
        atomic_write_text(tmp / "failed.jsonl", "".join(json.dumps(f, sort_keys=True) + "\n" for f in failed))
        atomic_write_text(tmp / "summary.json", dump_json(summary) + "\n")
    return {**summary, "run": measured}


def build_decision_samples(params: Params, root: Path) -> dict[str, Any]:
    """Cut every kept trajectory into decision samples (its split's); on train, add the off-path
    states and re-renderings ``decisions.off_path`` asks for. Writes samples.jsonl and summary.json
    (counts per split, per kind, per decision type)."""
    from orchestra.data.decisions import cut_trajectory, is_parallel_batch, off_path_states

    root = Path(root)
    by_id = {s.candidate_id: s for s in read_verified(root)}
    out: list[DecisionSample] = []
    for tr in read_trajectories(root):
        sample = by_id[tr.task_id]
        out.extend(cut_trajectory(sample, tr))
        if sample.split == "train":
            program = sample.task.solution_program or []
            out.extend(
                off_path_states(
                    sample, tr, program, params.decisions.off_path, params.agent, params.decisions.seed
                )
            )
    if not out:
        raise StageError.empty(DECISION_SAMPLES, "decision samples", {"no kept expert trajectory": 1})
    delegates = [d for d in out if isinstance(d.decision, Delegate)]
    summary = {
        "rows": len(out),
        "by_split": dict(sorted(Counter(d.split for d in out).items())),
        "by_kind": dict(sorted(Counter(d.kind for d in out).items())),
        "by_split_kind": {
            f"{k[0]}/{k[1]}": n for k, n in sorted(Counter((d.split, d.kind) for d in out).items())
        },
        "delegate": len(delegates),
        "finish": sum(d.decision.kind == "finish" for d in out),
        "parallel_batches": sum(is_parallel_batch(d.decision) for d in delegates),
        "subtasks": sum(len(d.decision.subtasks) for d in delegates),  # type: ignore[union-attr]
        "backends": dict(
            sorted(Counter(s.backend for d in delegates for s in d.decision.subtasks).items())  # type: ignore[union-attr]
        ),
        "seeds_by_split": {
            k: len({d.seed_id for d in out if d.split == k}) for k in sorted({d.split for d in out})
        },
    }
    with atomic_dir(stage_dir(root, DECISION_SAMPLES)) as tmp:
        write_jsonl(tmp / SAMPLES_FILE, out)
        atomic_write_text(tmp / "summary.json", dump_json(summary) + "\n")
    return summary


def check_decision_samples(root: Path) -> tuple[bool, str]:
    """What may reach training: every completion parses back to its decision and is valid in its
    state (the runtime's own parser and validator), and no seed's samples cross splits."""
    from orchestra.agent.decision import ParseError, parse_decision
    from orchestra.agent.state import OrchestraState, validation_context

    samples = read_jsonl(samples_file(root), DecisionSample)
    if not samples:
        return False, "no decision samples"
    splits: dict[str, set[str]] = {}
    for d in samples:
        splits.setdefault(d.seed_id, set()).add(d.split)
        if d.state is None:
            return False, f"{d.sample_id} has no structured state"
        ctx = validation_context(OrchestraState.model_validate(d.state))
        got = parse_decision(d.completion, context=ctx)
        if isinstance(got, ParseError):
            return False, f"{d.sample_id}: its completion does not validate: {got}"
        if got != d.decision:
            return False, f"{d.sample_id}: its completion parses to another decision"
    crossing = sorted(k for k, v in splits.items() if len(v) > 1)
    if crossing:
        return False, f"seeds in two splits: {crossing[:5]}"
    return True, f"{len(samples)} samples valid, {len(splits)} seeds"
