"""The anchor_facts stage: the checkable facts each seed's answer rests on, recovered by the real tools.

For every step of a seed's solution program the ``builtin`` extractor hands the step to the expert
pool as one sub-task (the goal the expert policy would write, its inputs filled with the recorded
values) on the expert the expert policy would pick, escalating by its rule (a result below
``agent.escalation_confidence``, or wrong, goes to the next stronger expert), and keeps the fact
only when an expert returns the recorded value, sure (the last expert's answer counts whatever its
confidence). A seed with a fact no expert recovers, a missing or corrupt media
file, or no solution program is set aside with the reason.

The ``openai`` extractor first asks its model, seed by seed in task order (one request at a time),
for one atomic checkable statement per program step, sent the question, the answer, the modal
inputs and the steps (out, op, arguments, recorded value). A reply that is not JSON of that schema,
names a step the program lacks, names a step twice or leaves one out sets the seed aside
(``extractor reply rejected: ...``). The statements become the facts' text (``stated_by`` the
provider); everything else, the tools recovering every fact included, is the builtin extractor's.

Besides the seed's own facts it writes *material*: every other value the seed's media files hold
that a perception can read (each colour's count, each chart label's value, a video's caption and
events), enumerated from the world's truth and kept only when the tools recover it the same way.
The rewriter builds new questions from anchors and material only, so every candidate stays grounded.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from orchestra.agent.expert import ExpertError, StepGoal, step_backend, step_goal, stronger_backend
from orchestra.agent.refs import modal_key
from orchestra.backends.base import BackendRegistry
from orchestra.backends.calibrate import same_value, step_input, step_subtasks
from orchestra.backends.perceptions import PERCEPTIONS
from orchestra.config import AgentParams, AnchorParams, Params
from orchestra.data.llm import JsonProvider, Statements, stage_provider, state_facts
from orchestra.data.reference import NO_PROGRAM, SOLUTIONS_FILE, solve_seeds, with_references
from orchestra.errors import OrchestraError, StageError
from orchestra.io import atomic_dir, atomic_write_text, dump_json, write_jsonl
from orchestra.schemas import (
    AnchorFact,
    BrowseStep,
    ComputeStep,
    PerceiveStep,
    SearchStep,
    SubTask,
    SubtaskStep,
    Task,
)
from orchestra.text import format_value
from orchestra.tools.base import ToolRegistry
from orchestra.world.perception import perceive

__all__ = ["AnchorRun", "build_anchor_facts", "extract_anchors", "material_steps"]

_MODALITY = {"search": "web", "browse": "web", "compute": "compute"}


class AnchorRun:
    """What :func:`extract_anchors` found: anchors and material per kept seed, and set-aside seeds."""

    def __init__(self) -> None:
        self.anchors: list[AnchorFact] = []
        self.material: list[AnchorFact] = []
        self.rejected: list[dict[str, str]] = []
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


def _fact(task: Task, step: Any, expert: str) -> AnchorFact:
    tid = str(task.id)
    value = format_value(step.value)
    base = {"task_id": tid, "fact_id": f"{tid}:{step.out}", "step": step.out, "value": step.value}
    if isinstance(step, PerceiveStep):
        mod = next(m for m in task.omni_modal_input if m.id == step.input_id)
        goal = PERCEPTIONS[step.perception].render(step.args)
        return AnchorFact(
            **base,
            kind="perception",
            modality=mod.type,  # type: ignore[arg-type]
            text=f"{goal} in the {mod.type} {mod.id}: {value}",
            source=mod.id,
            perception=step.perception,
            args=dict(step.args),
            checked_by=expert,
        )
    if isinstance(step, SearchStep | BrowseStep):
        what = f"the page titled as {step.query!r} is" if isinstance(step, SearchStep) else f"{step.field} ="
        return AnchorFact(
            **base,
            kind="kb",
            modality="web",
            text=f"{what} {value}",
            source=step.value if isinstance(step, SearchStep) else step.url,
            field=step.field if isinstance(step, BrowseStep) else None,
            checked_by=expert,
        )
    if isinstance(step, SubtaskStep):
        return _subtask_fact(task, step, base, value, expert)
    assert isinstance(step, ComputeStep)
    return AnchorFact(
        **base, kind="compute", modality="compute", text=f"{step.expression} = {value}", checked_by=expert
    )


def _subtask_fact(task: Task, step: SubtaskStep, base: dict[str, Any], value: str, expert: str) -> AnchorFact:
    """A model backend's sub-task as a fact: a perception when it reads a modal input (the first it
    names), a knowledge lookup for the search and browse skills, a computation otherwise."""
    keys = {modal_key(i): m for i, m in enumerate(task.omni_modal_input)}
    mod = next((keys[k] for k in re.findall(r"#(M[1-9][0-9]*)\b", step.goal) if k in keys), None)
    text = f"{step.goal}: {value}"
    if mod is not None:
        return AnchorFact(
            **base,
            kind="perception",
            modality=mod.type,
            text=text,
            source=mod.id,
            checked_by=expert,  # type: ignore[arg-type]
        )
    kb = step.skill in ("search", "browse")
    return AnchorFact(
        **base,
        kind="kb" if kb else "compute",
        modality="web" if kb else "compute",
        text=text,
        checked_by=expert,
    )


class _Checker:
    """Runs one step as a sub-task on the expert the expert policy would pick, then, while the
    result is unsure or wrong, on the stronger experts its escalation rule names (see the module
    docstring): the same tool calls trajectories make, so the perception cache serves them later."""

    def __init__(self, backends: BackendRegistry, tools: ToolRegistry, media_root: Path, agent: AgentParams):
        self.backends, self.tools, self.media_root, self.agent = backends, tools, media_root, agent
        self.cards = backends.cards()
        self.calls: dict[str, int] = {}

    async def check(
        self, task: Task, kind: StepGoal, node: SubTask, values: dict[str, Any], expected: Any
    ) -> tuple[str | None, str]:
        """(the expert that recovered the value, or None; the reason when none did)."""
        try:
            name: str | None = step_backend(kind, self.cards, self.agent, node.id)
        except ExpertError as e:
            return None, str(e)
        tried: set[str] = set()
        reason = ""
        while name is not None:
            tried.add(name)
            backend = self.backends.get(name)
            sti = step_input(task, node, values, name, self.media_root, self.agent)
            self.calls[name] = self.calls.get(name, 0) + 1
            res = await backend.run(sti, [self.tools.get(n) for n in sti.subtask.tools])
            after = stronger_backend(self.cards, kind.skill, tried)
            sure = res.confidence is None or res.confidence >= self.agent.escalation_confidence
            if res.ok and same_value(res.value, expected, kind.skill == "code") and (sure or after is None):
                return name, ""
            got = res.error if not res.ok else f"read {format_value(res.value)!r}"
            reason = f"{name} {got} (recorded {format_value(expected)!r})"
            name = after
        return None, reason


def _inputs(task: Task) -> dict[str, tuple[str, str]]:
    return {m.id: (modal_key(i), m.type) for i, m in enumerate(task.omni_modal_input)}


def _material_node(task: Task, step: PerceiveStep) -> tuple[StepGoal, SubTask, dict[str, Any]]:
    kind = step_goal(step, {}, _inputs(task))
    node = SubTask(id="E1", goal=kind.goal, modalities=kind.modalities(), tools=list(kind.tools))
    return kind, node, {key: f"#{key}" for key, _ in _inputs(task).values()}


async def _seed(
    checker: _Checker,
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
    for m in task.omni_modal_input:
        path = checker.media_root / m.path
        if not path.is_file():
            run.rejected.append({"task_id": tid, "reason": f"media file missing: {m.path}"})
            return
    facts: list[AnchorFact] = []
    ids = {s.out: f"E{k}" for k, s in enumerate(program, 1)}
    for (_, node, values, expected), step in zip(step_subtasks(task), program, strict=True):
        expert, why = await checker.check(task, step_goal(step, ids, _inputs(task)), node, values, expected)
        if expert is None:
            run.rejected.append(
                {"task_id": tid, "reason": f"step {step.out} ({step.op}) not recovered: {why}"}
            )
            return
        fact = _fact(task, step, expert)
        if stated is not None and tid in stated.facts:
            fact = fact.model_copy(update={"text": stated.facts[tid][step.out], "stated_by": stated.by})
        facts.append(fact)
    material: list[AnchorFact] = []
    for step in material_steps(task, media_truth):
        kind, node, refs = _material_node(task, step)
        expert, _ = await checker.check(task, kind, node, refs, step.value)
        if expert is not None:
            material.append(_fact(task, step, expert))
    run.anchors.extend(facts)
    run.material.extend(material)


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
    checker = _Checker(backends, tools, Path(world_dir) / "media", agent)
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
    out.expert_calls = dict(sorted(checker.calls.items()))
    out.wall_s = round(time.perf_counter() - t0, 2)
    return out


def build_anchor_facts(params: Params, root: Path) -> dict[str, Any]:
    """The anchor_facts stage: read data/seed_tasks, write anchors.jsonl, material.jsonl,
    rejected.jsonl (seed, reason) and summary.json into data/anchor_facts (replaced atomically).
    ``anchors.provider`` of kind openai states the facts first (:func:`state_facts`); its failed call
    is a StageError, before any file is written."""
    from orchestra.agent.systems import Environment, backend_pool
    from orchestra.data.seeds import load_seed_tasks
    from orchestra.tools.cache import open_perception_cache
    from orchestra.tools.registry import default_registry

    key = params.anchors.provider
    spec = stage_provider(params, key, "anchors.provider")
    seeds_dir = Path(root) / "seed_tasks"
    tasks = load_seed_tasks(seeds_dir)
    backends = backend_pool(params.agent, params.providers)
    cache = open_perception_cache(Path(root), params.tools)
    with cache or nullcontext(), default_registry(seeds_dir, params.tools, cache=cache) as tools:
        env = Environment(tools, backends, params.agent, seeds_dir / "media", params.anchors.max_turns)
        solved = solve_seeds(tasks, params, env)
        tasks = with_references(tasks, solved.solutions)
        stated = None
        if spec.kind == "openai":
            provider = JsonProvider(spec, key, "anchors.provider")
            stated = state_facts(tasks, provider, params.anchors.max_facts)
        run = extract_anchors(
            tasks, seeds_dir, params.anchors, params.agent, tools, backends, 2, stated, solved.rejected
        )
    reasons = Counter(r["reason"].split(":")[0] for r in run.rejected)
    if not run.anchors:
        raise StageError.empty("anchor_facts", "anchor facts (every seed was set aside)", reasons)
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
    }
    timings = {
        "wall_s": run.wall_s,
        "cache": None if cache is None else {"hits": cache.stats.hits, "misses": cache.stats.misses},
    }
    with atomic_dir(Path(root) / "anchor_facts") as tmp:
        write_jsonl(tmp / "anchors.jsonl", run.anchors)
        write_jsonl(tmp / "material.jsonl", run.material)
        if solved.summary:  # seeds without a program: the reference solutions the expert found
            write_jsonl(tmp / SOLUTIONS_FILE, solved.solutions)
        atomic_write_text(
            tmp / "rejected.jsonl", "".join(json.dumps(r, sort_keys=True) + "\n" for r in run.rejected)
        )
        atomic_write_text(tmp / "summary.json", dump_json(summary) + "\n")
        atomic_write_text(tmp / "timings.json", dump_json(timings) + "\n")  # measured: differs run to run
    return {**summary, **timings}
