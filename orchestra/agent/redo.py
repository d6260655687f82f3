"""Redo: a sub-task the state already holds run again, and every sub-task that depends on it re-issued.

A re-plan after an unsure or failed result is, in most states, that sub-task again (on a stronger
backend, or the same one) and each sub-task above it re-issued with the new result in place of the old;
in tree ids (training/tree_ids.py) the path from the root rebuilt: ``E112`` unsure becomes ``E212``,
``E21``, ``E2``. The ``lines`` format says it in one line, ``redo E112 vision_expert``, and
:func:`expand_redo` writes the sub-tasks it stands for from the state's evidence (each item keeps its
sub-task as planned, :meth:`Evidence.planned`), as span references (``#C1``) are resolved: what the
runtime runs is an ordinary delegate, and what a policy is scored on is that delegate.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from orchestra.agent.graph import tree_mapping
from orchestra.agent.refs import ReferenceError_, next_subtask_id, rename_refs
from orchestra.schemas import Delegate, SubTask

__all__ = ["MARK_PATTERN", "REDO", "expand_redo", "is_redo", "redo_line"]

#: the goal of a redo line's placeholder sub-task (its id is the evidence to run again, or its mark)
REDO = "redo"
#: a mark the ``marked`` view puts on a result to run again (state.redo_marks), which a redo line may
#: name instead of the evidence id (decision.resolve puts the id in)
MARK_PATTERN = re.compile(r"\?[1-9][0-9]*")


def redo_line(evidence_id: str, backend: str | None) -> SubTask:
    """The placeholder a ``redo <id> <backend>`` line parses to."""
    return SubTask(id=evidence_id, goal=REDO, backend=backend)


def is_redo(st: SubTask) -> bool:
    return st.goal == REDO


def expand_redo(action: Delegate, planned: Mapping[str, SubTask]) -> Delegate:
    """``action`` with each redo placeholder replaced by the sub-tasks it stands for: the named
    evidence's sub-task on the redo's backend (its own when none is named), and each sub-task that
    depends on it, directly or not, re-issued on its own backend with the new ids in its goal and
    dependencies. ``planned``: the state's evidence ids -> their sub-tasks as planned, in the
    state's order. New ids are tree ids after the state's (the next root, then its path), or the
    ids after the largest one where those would collide. Raises :class:`ReferenceError_` for a redo
    of an id the state does not hold."""
    redo = {st.id: st for st in action.subtasks if is_redo(st)}
    if not redo:
        return action
    rest = [st for st in action.subtasks if not is_redo(st)]
    for sid in redo:
        if sid not in planned:
            raise ReferenceError_(f"redo {sid}: the state holds no sub-task {sid}")
    dependants: dict[str, list[str]] = {}
    for st in planned.values():
        for d in st.depends_on:
            dependants.setdefault(d, []).append(st.id)
    affected: set[str] = set()
    todo = list(redo)
    while todo:
        sid = todo.pop()
        if sid not in affected:
            affected.add(sid)
            todo += dependants.get(sid, [])
    order = [sid for sid in planned if sid in affected]
    first = int(next_subtask_id([*planned, *(st.id for st in rest)])[1:])
    temp = {old: f"E{first + k}" for k, old in enumerate(order)}
    new = [
        planned[old].model_copy(
            update={
                "id": temp[old],
                "goal": rename_refs(planned[old].goal, temp),
                "depends_on": [temp.get(d, d) for d in planned[old].depends_on],
                "backend": (redo[old].backend or planned[old].backend)
                if old in redo
                else planned[old].backend,
            }
        )
        for old in order
    ]
    deps = {sid: list(st.depends_on) for sid, st in planned.items()}
    deps.update({st.id: list(st.depends_on) for st in [*rest, *new]})
    taken = set(planned) | {st.id for st in rest}
    try:
        tree = tree_mapping(deps)
        names = {t: tree[t] for t in temp.values()}
        if set(names.values()) & taken or len(set(names.values())) < len(names):
            raise ValueError("tree ids taken")
        visit = list(tree)
        new.sort(key=lambda st: visit.index(st.id))
    except ValueError:
        names = {t: t for t in temp.values()}
    renamed = [
        st.model_copy(
            update={
                "id": names[st.id],
                "goal": rename_refs(st.goal, names),
                "depends_on": [names.get(d, d) for d in st.depends_on],
            }
        )
        for st in new
    ]
    return Delegate(subtasks=[*rest, *renamed])
