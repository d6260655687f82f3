"""Reference solutions of seeds that carry no program: an expert policy's answer-verified trajectory.

Every stage after ``anchor_facts`` reads one form per sample, a program: a DAG of sub-tasks with goals,
tools, inputs and expected values (``Task.solution_program``). A world seed brings its own. For a seed
without one, ``anchors.expert`` (a providers key, or ``checkpoint:DIR``) runs the ``orchestra`` system on
it up to ``anchors.attempts`` times, the first greedy, the others sampled; a run whose answer matches the
seed's (the scorer's exact match, or a 1% tolerance when both are numbers) is turned into a program by
:func:`trajectory_program`, and the cheapest such run (cost, then fewer sub-tasks, then the earlier
attempt) becomes the seed's :class:`~orchestra.schemas.ReferenceSolution`. A seed no run solves is set
aside with what each run did.

The program keeps the sub-tasks the final answer rests on (its ``#E`` reference and their inputs,
transitively), in dependency order, each with the value its evidence holds: a goal in the builtin
grammar becomes its perceive, search, browse or compute step; any other goal (a model backend's)
becomes a :class:`~orchestra.schemas.SubtaskStep` run on the backend that ran it.
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestra.agent.memory import Evidence
from orchestra.agent.refs import REF_PATTERN, find_refs
from orchestra.answers import numeric_match
from orchestra.backends.base import BackendCard
from orchestra.backends.goals import GoalError, parse_goal
from orchestra.backends.selection import infer_demand
from orchestra.config import Params
from orchestra.data.seed_checks import media_missing
from orchestra.errors import OrchestraError, StageError
from orchestra.schemas import (
    BrowseStep,
    ComputeStep,
    PerceiveStep,
    ReferenceSolution,
    SearchStep,
    SolutionStep,
    SubtaskStep,
    Task,
    Trajectory,
)
from orchestra.text import format_value

__all__ = [
    "NO_PROGRAM",
    "NoReference",
    "Solved",
    "answer_matches",
    "goal_step",
    "load_reference_seeds",
    "pick_solution",
    "solve_seeds",
    "trajectory_program",
    "with_references",
]

#: the reference solutions anchor_facts found, beside its anchors
#: why a seed without a program is set aside when no expert was asked to solve it
NO_PROGRAM = (
    "no solution program and anchors.expert is not set (name an expert policy there: a providers key "
    "or checkpoint:DIR)"
)


class NoReference(OrchestraError):
    """A run reached the answer, but its trajectory is no program (the reason says why)."""


def answer_matches(prediction: str | None, gold: str) -> bool:
    """The evaluation scorer's verdict: exact match after normalisation, or, when both are one number,
    equal within 1% (``orchestra.answers.numeric_match``)."""
    return prediction is not None and bool(numeric_match(prediction, gold))


def _sink(traj: Trajectory, evidence: Mapping[str, Evidence]) -> str:
    """The id of the evidence the run's final answer is."""
    finishes = [s.decision for s in traj.steps if s.decision is not None and s.decision.kind == "finish"]
    if not finishes:
        raise NoReference("the run ended without a finish decision (its answer came from the evidence alone)")
    said = " ".join(str(getattr(finishes[-1], "answer", "")).split())
    ref = REF_PATTERN.fullmatch(said)
    if ref is not None and ref.group(1) == "E":
        if f"E{ref.group(2)}" not in evidence:
            raise NoReference(f"the finish answer {said} names no successful sub-task")
        return f"E{ref.group(2)}"
    if find_refs(said):
        raise NoReference(f"the finish answer {said!r} is not one sub-task's value")
    same = [e.id for e in evidence.values() if answer_matches(format_value(e.value), said)]
    if not same:
        raise NoReference(f"the finish answer {said!r} is no sub-task's value: the policy answered it itself")
    return same[-1]


def _goal_refs(e: Evidence) -> list[str]:
    return [r.key for r in find_refs(e.planned_goal or e.goal) if r.kind == "E"]


def _needed(sink: str, evidence: Mapping[str, Evidence]) -> list[str]:
    """``sink`` and every evidence it rests on, dependencies first (then by id)."""
    need: set[str] = set()
    stack = [sink]
    while stack:
        eid = stack.pop()
        if eid in need:
            continue
        if eid not in evidence:
            raise NoReference(f"a kept sub-task rests on {eid}, which did not succeed")
        need.add(eid)
        stack.extend(set(evidence[eid].depends_on) | set(_goal_refs(evidence[eid])))
    order: list[str] = []
    while len(order) < len(need):
        ready = sorted(
            (
                i
                for i in need - set(order)
                if set(evidence[i].depends_on) | set(_goal_refs(evidence[i])) <= set(order)
            ),
            key=lambda i: int(i[1:]),
        )
        if not ready:
            raise NoReference("the sub-tasks the answer rests on depend on each other in a cycle")
        order.append(ready[0])
    return order


def _skill(
    goal: str, backend: str | None, modal_types: Sequence[str], cards: Mapping[str, BackendCard]
) -> str:
    """The skill a goal outside the grammar asks of its backend: the demand's strongest skill the backend
    has (its strongest skill when the goal names none of them)."""
    demand = infer_demand(goal, modal_types)
    card = cards.get(backend or "")
    own = {k: v for k, v in (card.skills if card else {}).items() if v > 0}
    if own:
        return max(own, key=lambda k: (demand.get(k, 0.0), own[k], k))
    return max(demand, key=lambda k: (demand[k], k))


def _model_backend(goal: str, modal_types: Sequence[str], cards: Mapping[str, BackendCard]) -> str:
    """The model backend (not a builtin expert) a goal outside the grammar goes to: the best match of
    its demand; NoReference when the pool has none."""
    models = [c for c in cards.values() if c.kind != "builtin"]
    if not models:
        raise NoReference(
            f"the goal {goal[:80]!r} is outside the builtin grammar and no model backend runs it"
        )
    demand = infer_demand(goal, modal_types)
    return max(models, key=lambda c: (sum(demand.get(k, 0.0) * v for k, v in c.skills.items()), c.name)).name


def goal_step(
    raw: str,
    value: Any,
    out: str,
    task: Task,
    cards: Mapping[str, BackendCard],
    *,
    var: Mapping[str, str] | None = None,
    backend: str | None = None,
    tools: Sequence[str] = (),
) -> SolutionStep:
    """The program step that runs goal ``raw`` and records ``value``: a perceive, search, browse or
    compute step for a goal in the builtin grammar, else a :class:`SubtaskStep` on ``backend`` (the
    best-matching model backend of ``cards`` when None). ``var``: evidence id -> program variable of
    the results it reads (``#E3`` -> ``v2``)."""
    var = var or {}
    text = REF_PATTERN.sub(lambda m: var[f"E{m.group(2)}"] if m.group(1) == "E" else m.group(0), raw)
    try:
        goal = parse_goal(text)
    except GoalError:
        goal = None
    if goal is not None and goal.kind == "perceive":
        assert goal.modal is not None and goal.perception is not None
        index = int(goal.modal[1:]) - 1
        if index >= len(task.omni_modal_input):
            raise NoReference(f"the goal {raw!r} reads #{goal.modal}, which is not a modal input")
        args = dict(goal.meta.get("args", {}))
        input_id = task.omni_modal_input[index].id
        return PerceiveStep(
            out=out, value=value, input_id=input_id, perception=goal.perception.name, args=args
        )
    if goal is not None and goal.kind in ("search", "browse"):
        arg = goal.args["query"] if goal.kind == "search" else goal.args["url"]
        ref = f"${arg}" if arg in var.values() else arg
        if ref == arg and any(re.search(rf"\b{v}\b", arg) for v in var.values()):
            raise NoReference(f"a {goal.kind} goal mixes a result with text ({raw!r})")
        if goal.kind == "search":
            return SearchStep(out=out, value=value, query=ref)
        return BrowseStep(out=out, value=value, url=ref, field=str(goal.meta["field"]))
    if goal is not None and goal.kind == "compute":
        return ComputeStep(out=out, value=value, expression=str(goal.meta["expression"]))
    types = [m.type for k, m in enumerate(task.omni_modal_input) if f"#M{k + 1}" in raw]
    backend = backend or _model_backend(raw, types, cards)
    return SubtaskStep(
        out=out,
        value=value,
        goal=REF_PATTERN.sub(lambda m: f"${var[f'E{m.group(2)}']}" if m.group(1) == "E" else m.group(0), raw),
        skill=_skill(raw, backend, types, cards),
        tools=list(tools),
        backend=backend,
    )


def trajectory_program(task: Task, traj: Trajectory, cards: Sequence[BackendCard] = ()) -> list[SolutionStep]:
    """The program a successful run amounts to (module docstring); NoReference when it is none."""
    from orchestra.agent.systems import evidence_of

    evidence = {e.id: e for e in evidence_of(traj) if e.ok}
    order = _needed(_sink(traj, evidence), evidence)
    var = {eid: f"v{k}" for k, eid in enumerate(order, 1)}
    by_name = {c.name: c for c in cards}
    steps = []
    for eid in order:
        e = evidence[eid]
        raw = e.planned_goal or e.goal
        steps.append(
            goal_step(raw, e.value, var[eid], task, by_name, var=var, backend=e.backend, tools=e.tools)
        )
    return steps


def pick_solution(
    task: Task, runs: Sequence[Trajectory], expert: str, cards: Sequence[BackendCard] = ()
) -> tuple[ReferenceSolution | None, list[str]]:
    """The cheapest run that reached ``task``'s answer as its reference solution (None when none did),
    and one line per run saying what it did."""
    found: list[tuple[tuple[float, int, int], ReferenceSolution]] = []
    notes: list[str] = []
    for k, tr in enumerate(runs, 1):
        if tr.error is not None or not answer_matches(tr.answer, task.answer):
            why = tr.error or f"answered {tr.answer!r}"
            step_errors = [s.error for s in tr.steps if s.error]
            notes.append(f"run {k} {why}" + (f" ({step_errors[-1][:160]})" if step_errors else ""))
            continue
        try:
            program = trajectory_program(task, tr, cards)
        except NoReference as e:
            notes.append(f"run {k} reached the answer, but {e}")
            continue
        subtasks = int(tr.accounting.get("subtasks", 0))
        sol = ReferenceSolution(
            task_id=str(task.id),
            program=program,
            expert=expert,
            attempt=k,
            attempts=len(runs),
            solved=1,  # counted below
            answer=str(tr.answer),
            cost=round(tr.cost, 9),
            tokens=tr.tokens,
            subtasks=subtasks,
        )
        found.append(((sol.cost, subtasks, k), sol))
        notes.append(f"run {k} solved it with {len(program)} steps at cost {sol.cost:g}")
    if not found:
        return None, notes
    best = min(found, key=lambda f: f[0])[1]
    return best.model_copy(update={"solved": len(found)}), notes


def with_references(tasks: Sequence[Task], solutions: Sequence[ReferenceSolution]) -> list[Task]:
    """``tasks`` with each program-less one's reference solution as its program (others as they are)."""
    by_id = {s.task_id: s for s in solutions}
    out = []
    for t in tasks:
        sol = by_id.get(str(t.id))
        if not t.solution_program and sol is not None:
            t = t.model_copy(update={"solution_program": list(sol.program)})
        out.append(t)
    return out


def load_reference_seeds(root: Path) -> list[Task]:
    """The seed tasks as every stage after anchor_facts reads them: with a program each, their own or
    the reference solution anchor_facts found (``anchor_facts/solutions.jsonl``)."""
    from orchestra.data.store import read_seed_tasks, read_solutions

    return with_references(read_seed_tasks(root), read_solutions(root))


def run_expert(
    tasks: Sequence[Task], policies: Sequence[Any], env: Any, concurrency: int = 2
) -> list[list[Trajectory]]:
    """Every task run by every policy (in order), ``concurrency`` tasks at once; a run's failure is in
    its trajectory (an LM error becomes an invalid decision), never an exception."""
    from orchestra.agent.systems import run_task

    async def main() -> list[list[Trajectory]]:
        gate = asyncio.Semaphore(max(1, concurrency))

        async def one(task: Task) -> list[Trajectory]:
            async with gate:
                return [await run_task(task, "orchestra", p, env) for p in policies]

        return list(await asyncio.gather(*(one(t) for t in tasks)))

    if not tasks:
        return []
    try:
        return asyncio.run(main())
    except OrchestraError as e:
        raise StageError(f"anchors.expert could not run: {e}") from e


@dataclass
class Solved:
    """What :func:`solve_seeds` found: reference solutions, why the other program-less seeds have none
    (task id -> reason), and the figures the stage reports (empty when every seed had a program)."""

    solutions: list[ReferenceSolution] = field(default_factory=list)
    rejected: dict[str, str] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)


def _expert_policies(params: Params) -> list[Any]:
    """``anchors.expert`` as one greedy policy and ``attempts - 1`` sampled copies."""
    from orchestra.agent.lm_policy import lm_policy, named_provider, sampling_copy
    from orchestra.agent.policies import PolicyError
    from orchestra.lm.chat import LMError

    a = params.anchors
    assert a.expert is not None
    try:
        spec = named_provider(a.expert, params.providers, "anchors.expert")
        first = lm_policy(spec, params.agent, name=f"expert:{a.expert}")
    except (PolicyError, LMError) as e:
        raise StageError(f"anchors.expert {a.expert!r} cannot be loaded: {e}") from e
    return [first] + [sampling_copy(first, a.temperature, a.seed + k) for k in range(1, a.attempts)]


def solve_seeds(tasks: Sequence[Task], params: Params, env: Any) -> Solved:
    """Reference solutions for the program-less ``tasks``: ``anchors.expert`` runs each on ``env`` (the
    stage's tools and backend pool) ``anchors.attempts`` times (module docstring)."""
    bare = [t for t in tasks if not t.solution_program]
    if not bare:
        return Solved()
    media = Path(env.media_root)
    out = Solved()
    todo = []
    for t in bare:
        gone = media_missing(t, media)
        if gone:
            out.rejected[str(t.id)] = gone
        else:
            todo.append(t)
    expert = params.anchors.expert
    out.summary = {"seeds_without_program": len(bare), "expert": expert, "attempts": params.anchors.attempts}
    if expert is None:
        out.rejected.update({str(t.id): NO_PROGRAM for t in todo})
    else:
        runs = run_expert(todo, _expert_policies(params), env)
        cards = env.backends.cards()
        for task, trs in zip(todo, runs, strict=True):
            sol, notes = pick_solution(task, trs, expert, cards)
            if sol is None:
                out.rejected[str(task.id)] = f"expert did not solve it in {len(trs)} runs: " + "; ".join(
                    notes
                )
            else:
                out.solutions.append(sol)
    out.summary.update(
        solved=len(out.solutions),
        set_aside=len(out.rejected),
        solved_by_attempt={str(k): n for k, n in sorted(Counter(s.attempt for s in out.solutions).items())},
        program_steps={str(k): n for k, n in sorted(Counter(len(s.program) for s in out.solutions).items())},
        cost=round(sum(s.cost for s in out.solutions), 6),
    )
    return out
