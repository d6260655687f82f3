"""The anchor_facts stage: the checkable facts each seed's answer rests on, recovered by the real tools.

A seed without a solution program first gets a reference solution from ``anchors.expert``
(``orchestra.data.reference``); without one it is set aside with a reason naming that setting.

For every step of a seed's program the ``builtin`` extractor hands the step to the expert pool as one
sub-task (the goal the expert policy would write, its inputs filled with the recorded values) on the
expert the expert policy would pick, escalating by its rule (a result below
``agent.escalation_confidence``, or wrong, goes to the next stronger expert), and keeps the fact
only when an expert returns the recorded value, sure (the last expert's answer counts whatever its
confidence; ``orchestra.data.recheck``). A seed with a fact no expert recovers, a missing or corrupt
media file, or no program is set aside with the reason.

The ``openai`` extractor first asks its model, seed by seed in task order (one request at a time),
for one atomic checkable statement per program step, sent the question, the answer, the modal
inputs, the steps (out, op, arguments, recorded value) and the media its provider takes; it also
states ``media_facts``, other things the media show with the perception goal that reads each. A reply
that is not JSON of that schema, names a step the program lacks, names a step twice or leaves one out
sets the seed aside (``extractor reply rejected: ...``). The statements become the facts' text
(``stated_by`` the provider); everything else, the tools recovering every fact included, is the
builtin extractor's. A media fact is kept as material only when its goal, run as a sub-task on the
pool, returns its value; the others are written to ``media_facts_set_aside.jsonl`` with the reason.

Besides the seed's own facts it writes *material*: every other value a world seed's media files hold
that a perception can read (each colour's count, each chart label's value, a video's caption and
events), enumerated from the world's truth and kept only when the tools recover it the same way.
The rewriter builds new questions from anchors and material only, so every candidate stays grounded.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from orchestra.agent.expert import ExpertError, step_goal
from orchestra.agent.steps import step_subtasks
from orchestra.backends.base import BackendRegistry
from orchestra.backends.goals import literal
from orchestra.config import AgentParams, AnchorParams, Params
from orchestra.data.llm import JsonProvider, Statements, stage_provider, state_facts
from orchestra.data.recheck import Checker, fact_of, lone_node, step_inputs
from orchestra.data.reference import (
    NO_PROGRAM,
    NoReference,
    goal_step,
    solve_seeds,
    with_references,
)
from orchestra.data.seed_checks import media_missing
from orchestra.data.store import (
    ANCHORS_FILE,
    MATERIAL_FILE,
    SOLUTIONS_FILE,
    media_dir,
    read_seed_tasks,
    seeds_dir,
    stage_dir,
)
from orchestra.errors import OrchestraError, StageError
from orchestra.io import atomic_dir, atomic_write_text, dump_json, write_jsonl
from orchestra.schemas import AnchorFact, PerceiveStep, SubtaskStep, Task
from orchestra.stages import ANCHOR_FACTS
from orchestra.tools.base import ToolRegistry
from orchestra.world.perception import perceive

__all__ = ["AnchorRun", "build_anchor_facts", "extract_anchors", "material_steps"]


class AnchorRun:
    """What :func:`extract_anchors` found: anchors and material per kept seed, and set-aside seeds."""

    def __init__(self) -> None:
        self.anchors: list[AnchorFact] = []
        self.material: list[AnchorFact] = []
        self.rejected: list[dict[str, str]] = []
        self.unrecovered: list[dict[str, Any]] = []  # the extractor's media facts no sub-task recovered
        self.expert_calls: dict[str, int] = {}  # expert -> sub-tasks it ran
        self.wall_s = 0.0


def material_steps(task: Task, media_truth: dict[str, dict[str, Any]]) -> Iterator[PerceiveStep]:
    """Every perception the task's media files answer besides its own steps, with its true value
    (from the world's truth: this is the generator's side, no agent sees it)."""
    own = {
        (s.input_id, s.perception, tuple(sorted(s.args.items())))
        for s in task.solution_program or []
        if isinstance(s, PerceiveStep)
    }
    k = 0
    for m in task.omni_modal_input:
        rec = media_truth.get(m.id)
        if rec is None:
            continue
        for perception, args in _readable(rec["facts"]):
            if (m.id, perception, tuple(sorted(args.items()))) in own:
                continue
            try:
                value = perceive(rec["facts"], perception, args)
            except OrchestraError:
                continue
            k += 1
            yield PerceiveStep(out=f"m{k}", value=value, input_id=m.id, perception=perception, args=args)


def _readable(truth: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    kind = truth.get("kind")
    if kind == "shapes":
        for colour, shapes in sorted(truth["counts"].items()):
            yield "count_shapes", {"color": colour}
            for shape in sorted(shapes):
                yield "count_shapes", {"color": colour, "shape": shape}
    elif kind == "chart":
        for label in truth["labels"]:
            yield "chart_value", {"label": label}
    elif kind == "sign":
        yield ("read_number" if str(truth["text"]).isdigit() else "read_text"), {}
    elif kind == "dtmf":
        yield "dtmf_number", {}
    elif kind == "beeps":
        yield "count_beeps", {}
        yield "beep_pitch", {}
    elif kind == "morse":
        yield ("morse_number" if str(truth["text"]).isdigit() else "morse_text"), {}
    elif kind == "speech":
        yield ("speech_name" if truth.get("name") else "speech_number"), {}
    elif kind == "video":
        roles = {t["role"]: t["text"] for t in truth["text"]}
        if "caption" in roles:
            yield ("caption_number" if str(roles["caption"]).isdigit() else "caption_text"), {}
        if "scoreboard" in roles:
            yield "final_score_total", {}
        if any(e["kind"] == "appear" for e in truth["events"]):
            yield "count_appearances", {}
        changes: dict[str, int] = {}
        for e in truth["events"]:
            if e["kind"] == "color_change":
                changes[e["object"]] = changes.get(e["object"], 0) + 1
        for obj, n in sorted(changes.items()):
            if n == 1:
                yield "color_change_second", {"object": obj}
        if isinstance(truth.get("audio_track"), dict):  # a muxed video's sound: read as its own audio
            yield from _readable(truth["audio_track"])


async def _seed(
    checker: Checker,
    task: Task,
    media_truth: dict[str, dict[str, Any]],
    max_facts: int,
    run: AnchorRun,
    stated: Statements | None,
    unsolved: Mapping[str, str],
) -> None:
    tid = str(task.id)
    program = task.solution_program or []
    if stated is not None and tid in stated.rejected:
        run.rejected.append({"task_id": tid, "reason": stated.rejected[tid]})
        return
    if not program:
        run.rejected.append({"task_id": tid, "reason": unsolved.get(tid, NO_PROGRAM)})
        return
    if len(program) > max_facts:
        run.rejected.append(
            {"task_id": tid, "reason": f"{len(program)} facts > anchors.max_facts {max_facts}"}
        )
        return
    gone = media_missing(task, checker.media_root)
    if gone:
        run.rejected.append({"task_id": tid, "reason": gone})
        return
    facts: list[AnchorFact] = []
    ids = {s.out: f"E{k}" for k, s in enumerate(program, 1)}
    for (_, node, values, expected), step in zip(step_subtasks(task), program, strict=True):
        expert, why = await checker.check(
            task, step_goal(step, ids, step_inputs(task)), node, values, expected
        )
        if expert is None:
            run.rejected.append(
                {"task_id": tid, "reason": f"step {step.out} ({step.op}) not recovered: {why}"}
            )
            return
        fact = fact_of(task, step, expert)
        if stated is not None and tid in stated.facts:
            fact = fact.model_copy(update={"text": stated.facts[tid][step.out], "stated_by": stated.by})
        facts.append(fact)
    material: list[AnchorFact] = []
    for step in material_steps(task, media_truth):
        kind, node, refs = lone_node(task, step)
        expert, _ = await checker.check(task, kind, node, refs, step.value)
        if expert is not None:
            material.append(fact_of(task, step, expert))
    if stated is not None:
        material += await _stated_media(checker, task, stated, run)
    run.anchors.extend(facts)
    run.material.extend(material)


async def _stated_media(checker: Checker, task: Task, stated: Statements, run: AnchorRun) -> list[AnchorFact]:
    """The openai extractor's facts about ``task``'s media that a perception sub-task recovers, as
    material (its statement the text); the others go to ``run.unrecovered`` with the reason."""
    tid = str(task.id)
    cards = {c.name: c for c in checker.cards}
    kept = []
    for k, said in enumerate(stated.media.get(tid, []), 1):
        try:
            step = goal_step(said.goal, literal(said.value), f"s{k}", task, cards)
            if (
                not isinstance(step, PerceiveStep | SubtaskStep)
                or not step_goal(step, {}, step_inputs(task)).modalities()
            ):
                raise NoReference("its goal reads no modal input (#M<n>)")
        except (NoReference, ExpertError) as e:
            why = str(e)
        else:
            kind, node, refs = lone_node(task, step)
            expert, why = await checker.check(task, kind, node, refs, step.value)
            if expert is not None:
                kept.append(
                    fact_of(task, step, expert).model_copy(
                        update={"text": said.statement, "stated_by": stated.by}
                    )
                )
                continue
        row = {"task_id": tid, "goal": said.goal, "value": said.value, "reason": f"not recovered: {why}"}
        run.unrecovered.append(row)
    return kept


def extract_anchors(
    tasks: list[Task],
    world_dir: Path,
    params: AnchorParams,
    agent: AgentParams,
    tools: ToolRegistry,
    backends: BackendRegistry,
    concurrency: int = 2,
    stated: Statements | None = None,
    unsolved: Mapping[str, str] | None = None,
) -> AnchorRun:
    """Anchors and material for every seed (in task order), and the seeds set aside with reasons;
    ``stated``: the openai extractor's statements (:func:`state_facts`), None for the builtin one;
    ``unsolved``: why a seed without a program has none (the expert's runs)."""
    from orchestra.world.replay import load_truth

    try:
        media_truth = load_truth(world_dir).media
    except OrchestraError:
        media_truth = {}  # not a generated world: no material, the program steps are still checked
    checker = Checker(backends, tools, Path(world_dir) / "media", agent)
    runs = [AnchorRun() for _ in tasks]

    async def main() -> None:
        gate = asyncio.Semaphore(max(1, concurrency))

        async def one(task: Task, run: AnchorRun) -> None:
            async with gate:
                await _seed(checker, task, media_truth, params.max_facts, run, stated, unsolved or {})

        await asyncio.gather(*(one(t, r) for t, r in zip(tasks, runs, strict=True)))

    t0 = time.perf_counter()
    asyncio.run(main())
    out = AnchorRun()
    for r in runs:  # task order, whatever order the seeds finished in
        out.anchors.extend(r.anchors)
        out.material.extend(r.material)
        out.rejected.extend(r.rejected)
        out.unrecovered.extend(r.unrecovered)
    out.expert_calls = dict(sorted(checker.calls.items()))
    out.wall_s = round(time.perf_counter() - t0, 2)
    return out


def build_anchor_facts(params: Params, root: Path) -> dict[str, Any]:
    """The anchor_facts stage: read data/seed_tasks, write anchors.jsonl, material.jsonl,
    rejected.jsonl (seed, reason) and summary.json into data/anchor_facts (replaced atomically).
    ``anchors.provider`` of kind openai states the facts first (:func:`state_facts`); its failed call
    is a StageError, before any file is written."""
    from orchestra.agent.runtime import open_runtime

    key = params.anchors.provider
    spec = stage_provider(params, key, "anchors.provider")
    seeds = seeds_dir(root)
    tasks = read_seed_tasks(root)
    runtime = open_runtime(
        params.agent,
        params.tools,
        pages=seeds,
        media_root=media_dir(root),
        cache_dir=Path(root),
        providers=params.providers,
        max_turns=params.anchors.max_turns,
    )
    with runtime as env:
        tools, backends, cache = env.tools, env.backends, env.perception
        solved = solve_seeds(tasks, params, env)
        tasks = with_references(tasks, solved.solutions)
        stated = None
        if spec.kind == "openai":
            provider = JsonProvider(spec, key, "anchors.provider")
            stated = state_facts(tasks, provider, params.anchors.max_facts, media_dir(root))
        run = extract_anchors(
            tasks, seeds, params.anchors, params.agent, tools, backends, 2, stated, solved.rejected
        )
    reasons = Counter(r["reason"].split(":")[0] for r in run.rejected)
    if not run.anchors:
        raise StageError.empty(ANCHOR_FACTS, "anchor facts (every seed was set aside)", reasons)
    kept = len({a.task_id for a in run.anchors})
    summary = {
        "seeds": len(tasks),
        "kept_seeds": kept,
        "rows": len(run.anchors),
        "material": len(run.material),
        "rejected": len(run.rejected),
        "rejected_reasons": dict(reasons.most_common()),
        "by_kind": dict(sorted(Counter(a.kind for a in run.anchors).items())),
        "expert_calls": run.expert_calls,
        **({"expert": solved.summary} if solved.summary else {}),
        **({"media_facts_set_aside": len(run.unrecovered)} if stated is not None else {}),
    }
    measured = {  # differs run to run: the run record's
        "wall_s": run.wall_s,
        "cache": None if cache is None else {"hits": cache.stats.hits, "misses": cache.stats.misses},
    }
    with atomic_dir(stage_dir(root, ANCHOR_FACTS)) as tmp:
        write_jsonl(tmp / ANCHORS_FILE, run.anchors)
        write_jsonl(tmp / MATERIAL_FILE, run.material)
        if solved.summary:  # seeds without a program: the reference solutions the expert found
            write_jsonl(tmp / SOLUTIONS_FILE, solved.solutions)
        if stated is not None:  # the openai extractor's facts about the media that no sub-task recovered
            lines = "".join(json.dumps(r, sort_keys=True) + "\n" for r in run.unrecovered)
            atomic_write_text(tmp / "media_facts_set_aside.jsonl", lines)
        atomic_write_text(
            tmp / "rejected.jsonl", "".join(json.dumps(r, sort_keys=True) + "\n" for r in run.rejected)
        )
        atomic_write_text(tmp / "summary.json", dump_json(summary) + "\n")
    return {**summary, "run": measured}
