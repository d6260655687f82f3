"""The progress reward: what a decision does for the task's reference solution, in whole levels.

A decision is judged as the project's expert judges a state (:mod:`orchestra.agent.expert`): a
sub-task completes a pending program step only when its goal, the state's evidence values
substituted, is that step's goal exactly and it lists the step's tools (and, for a step the expert
escalates, runs on the backend it escalates to). A step may build on another the same batch
completes, through the ``#E`` reference of the sub-task completing it, so a whole plan can score in
one turn. No string similarity: two decisions that complete the same steps with the same waste tie.

The reward is net progress, in [-1, 1]:

- a finish: 1 when its answer, substituted as the runtime does, equals the task's answer; else -1
  (the task is lost);
- text that does not parse, or a decision the runtime would reject (:func:`validate_decision`, and a
  finish answer whose references the runtime cannot substitute): -1, the floor
  (:data:`~orchestra.training.rewards.REJECTED`: at 0 it paid more than a wasteful plan, and RL
  learnt to write invalid text);
- a delegate: ``(useful - wasted - serialised) / pending``, clipped to [-1, 1], where ``useful``
  counts sub-tasks completing a pending step, ``wasted`` the others (a wrong reading, a duplicate,
  work the program does not need, and every sub-task built on a wasted one), ``serialised`` the
  useful sub-tasks that wait on a same-batch sub-task their step does not read, and ``pending`` the
  steps not yet done (the whole program when the answer is in: then every sub-task is waste).

So a wrong plan scores below the right part of it alone, a wrong finish (with rejected text) below
any decision the runtime runs that keeps the task alive, and a useful re-check above a wrong finish.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from orchestra.agent.decision import Format, search_to_delegate
from orchestra.agent.expert import (
    Progress,
    goal_values,
    modal_inputs,
    program_inputs,
    progress,
    rendered_goal,
    step_goal,
)
from orchestra.agent.refs import next_subtask_id
from orchestra.agent.state import OrchestraState
from orchestra.answers import answers_equal
from orchestra.schemas import Delegate, Finish, MaestroSearch, SolutionStep, SubTask
from orchestra.training.rewards import REJECTED, resolve_answer, runtime_action

__all__ = ["progress_reward"]


class _Want(NamedTuple):
    """A pending step as the expert would delegate it: its rendered goal, tools and modal input."""

    goal: str
    tools: set[str]
    modal: str | None


def _matches(st: SubTask, want: _Want, values: Mapping[str, Any], escalate_to: str | None) -> bool:
    mods = {m.strip().lstrip("#") for m in st.modalities}
    return (
        rendered_goal(st.goal, values) == want.goal
        and want.tools <= set(st.tools)
        and (want.modal is None or want.modal in mods)
        and (escalate_to is None or st.backend == escalate_to)
    )


def _plan(
    subtasks: Sequence[SubTask], state: OrchestraState, program: Sequence[SolutionStep], prog: Progress
) -> dict[str, str]:
    """Sub-task id -> the pending step it completes, each step and sub-task used once: steps are tried
    in program order, again while a step completed in this batch makes another one ready."""
    values = goal_values(state) | {st.id: f"#{st.id}" for st in subtasks}  # same-batch refs stay
    inputs, ids, done = modal_inputs(state), dict(prog.done), {}
    changed = True
    while changed:
        changed = False
        for step in program:
            if step.out in ids or any(v not in ids for v in program_inputs(step)):
                continue
            kind = step_goal(step, ids, inputs)
            goal = rendered_goal(kind.goal, values)
            if goal is None:
                continue
            want, escalate_to = _Want(goal, set(kind.tools), kind.modal), prog.escalate.get(step.out)
            hit = next(
                (st for st in subtasks if st.id not in done and _matches(st, want, values, escalate_to)), None
            )
            if hit is not None:
                ids[step.out], done[hit.id] = hit.id, step.out
                changed = True
    return done


def _serialised(subtasks: Sequence[SubTask], done: Mapping[str, str], program: Sequence[SolutionStep]) -> int:
    """Useful sub-tasks that depend on a same-batch sub-task their step does not read (a wasted one
    is counted once, as waste)."""
    batch = {st.id for st in subtasks}
    by_var = {v: k for k, v in done.items()}
    reads = {s.out: {by_var.get(v) for v in program_inputs(s)} for s in program}
    out = 0
    for st in (st for st in subtasks if st.id in done):
        needed = reads[done[st.id]]
        out += any(d.strip().lstrip("#") in batch - needed for d in st.depends_on)
    return out


def _delegate_score(
    d: Delegate, state: OrchestraState, program: Sequence[SolutionStep], escalate_below: float | None
) -> float:
    prog = progress(state, program, escalate_below=escalate_below)
    pending = [s for s in program if s.out not in prog.done]
    done = _plan(d.subtasks, state, program, prog)
    useful, wasted = len(done), len(d.subtasks) - len(done)
    net = (useful - wasted - _serialised(d.subtasks, done, program)) / (len(pending) or len(program))
    return max(-1.0, min(1.0, net))


def progress_reward(
    text: str,
    state: OrchestraState,
    program: Sequence[SolutionStep],
    answer: str,
    fmt: Format = "lines",
    escalate_below: float | None = None,
) -> float:
    """The progress reward of one policy output in ``state`` (module docstring): ``program`` is the
    task's reference solution, ``answer`` its labelled answer, ``escalate_below`` the expert's
    escalation threshold (``agent.escalation_confidence``; None: no escalation)."""
    action = runtime_action(text, state, fmt)
    if action is None:
        return REJECTED
    if isinstance(action, Finish):
        return 1.0 if answers_equal(resolve_answer(action.answer, state), answer) else -1.0
    if isinstance(action, MaestroSearch):
        action = search_to_delegate(action, next_subtask_id(e.id for e in state.context))
    return _delegate_score(action, state, program, escalate_below)
