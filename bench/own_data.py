"""Own data: held-out world seeds as a user's file (no program) solved by the project's trained policy.

Usage: python bench/own_data.py [--data data] [--out .bench-own-data] [--attempts 2] [--limit N]

After ``make pipeline``: the world seeds of the val and test splits (never trained on) are written as an
OmniGAIA-format file with their questions, answers and media, and the wiki's pages beside it (what
search and browse read) — no solution program, no truth. The lineage runs on it up to
``decision_samples`` (``orchestra.stages.run_stage``, in ``--out``) with ``anchors.expert:
checkpoint:<data>/policy_sft/model``: the SFT policy solves each seed (the first run greedy, the others
sampled), and its cheapest run that reaches the answer is the seed's reference solution. Prints the
share it solves (and how many references are the world's own program), the anchors kept, candidates
per strategy, verified samples and decision samples, then ``RESULT own_data solved=… verified=…``.
The perception cache of ``--data`` serves the tool calls (the same media the pipeline read).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

from orchestra.config import load_params
from orchestra.data.decisions import seed_splits
from orchestra.data.store import (
    KB_DIR,
    media_dir,
    model_dir,
    read_seed_tasks,
    read_solutions,
    seeds_dir,
    stage_dir,
)
from orchestra.pipeline.run import run_stage
from orchestra.schemas import Task, write_tasks_json
from orchestra.stages import (
    ANCHOR_FACTS,
    DECISION_SAMPLES,
    EXPERT_TRAJECTORIES,
    REWRITE_CANDIDATES,
    SEED_TASKS,
    VERIFIED_SAMPLES,
)

#: the data stages it runs on the held-out file, up to the samples a policy would train on
DATA_STAGES = (
    SEED_TASKS,
    ANCHOR_FACTS,
    REWRITE_CANDIDATES,
    VERIFIED_SAMPLES,
    EXPERT_TRAJECTORIES,
    DECISION_SAMPLES,
)


def held_out_file(data: Path, out: Path, params_file: Path, limit: int | None) -> dict[str, Task]:
    """The val and test seeds of ``data`` as a program-less OmniGAIA file under ``out/user``; returns the
    world's own tasks by id (the bench's knowledge, never the pipeline's)."""
    params = load_params(params_file)
    world = read_seed_tasks(data)
    splits = seed_splits([str(t.id) for t in world], params.decisions.split, params.decisions.seed)
    held = [t for t in world if splits[str(t.id)] != "train"][:limit]
    user = out / "user"
    shutil.rmtree(user, ignore_errors=True)
    (user / "kb").mkdir(parents=True)
    shutil.copy2(seeds_dir(data) / KB_DIR / "pages.jsonl", user / KB_DIR / "pages.jsonl")
    for t in held:
        for m in t.omni_modal_input:
            dst = user / "media" / m.path
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(media_dir(data) / m.path, dst)  # a copy: seed_tasks refuses hard links
    keep = ("id", "question", "answer", "omni_modal_input", "level", "task_type", "category")
    write_tasks_json(user / "tasks.json", [Task(**{k: getattr(t, k) for k in keep}) for t in held])
    return {str(t.id): t for t in held}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=Path("data"))
    ap.add_argument("--params", type=Path, default=Path("params.yaml"))
    ap.add_argument("--out", type=Path, default=Path(".bench-own-data"))
    ap.add_argument("--attempts", type=int, default=2, help="expert runs per seed (first greedy)")
    ap.add_argument("--limit", type=int, default=None, help="the first N held-out seeds")
    args = ap.parse_args()
    data, out = args.data.resolve(), args.out.resolve()
    model = model_dir(data, "sft")
    if not (model / "config.json").is_file():
        print(f"error: {model} has no trained policy: run make pipeline first", file=sys.stderr)
        return 2
    world = held_out_file(data, out, args.params, args.limit)
    overlay = {
        "extends": str(args.params.resolve()),
        "paths": {"data_dir": "data"},
        "seed": {"source": "omnigaia_file", "path": str(out / "user" / "tasks.json"), "incoming": None},
        "anchors": {"expert": f"checkpoint:{model}", "attempts": args.attempts},
        "tools": {"cache_path": str(data / "cache" / "perception.sqlite")},
    }
    (out / "params.yaml").write_text(json.dumps(overlay, indent=2) + "\n")
    params = load_params(out / "params.yaml")
    root = out / "data"
    took = {}
    for stage in DATA_STAGES:
        t0 = time.perf_counter()
        run_stage(stage, params, root, force=True)
        took[stage] = round(time.perf_counter() - t0, 1)
        print(f"  {stage:<20} {took[stage]:>7.1f} s")
    anchors = json.loads((stage_dir(root, ANCHOR_FACTS) / "summary.json").read_text())
    expert = anchors["expert"]
    solutions = read_solutions(root)
    same = sum(
        [s.model_dump(exclude={"out"}) for s in sol.program]
        == [s.model_dump(exclude={"out"}) for s in world[sol.task_id].solution_program or []]
        for sol in solutions
    )
    cands, verified, decisions = (
        json.loads((stage_dir(root, s) / "summary.json").read_text())
        for s in (REWRITE_CANDIDATES, VERIFIED_SAMPLES, DECISION_SAMPLES)
    )
    per_strategy: dict[str, int] = {}
    for cell, n in cands["cells"].items():
        per_strategy[cell.split("/")[0]] = per_strategy.get(cell.split("/")[0], 0) + n
    n = len(world)
    print(f"held-out seeds: {n} (val and test splits of {data})")
    solved = f"{expert['solved']} of {n} ({expert['solved'] / n:.3f})"
    print(f"solved by the SFT policy: {solved}; by attempt {expert['solved_by_attempt']}")
    print(f"references that are the world's own program: {same}")
    print(f"set aside: {anchors['rejected_reasons']}")
    print(
        f"anchors: {anchors['rows']} facts of {anchors['kept_seeds']} seeds, material {anchors['material']}"
    )
    print(f"candidates: {cands['rows']} per strategy {per_strategy}; skipped {cands.get('skipped', {})}")
    print(f"verified: {verified['rows']} (rejected by check {verified['rejected_by_check']})")
    print(f"decision samples: {decisions['rows']} {decisions['by_split']}")
    print(
        f"RESULT own_data seeds={n} solved={expert['solved'] / n:.3f} world_program={same} "
        f"anchors={anchors['rows']} candidates={cands['rows']} verified={verified['rows']} "
        f"decision_samples={decisions['rows']} seconds={sum(took.values()):.0f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
