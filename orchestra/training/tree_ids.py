"""Tree ids: a decision sample renumbered so that sub-tasks are named by their place in the plan's tree
and listed in the order the question mentions them (pre-order), as a small policy learns to write them.

The expert numbers a plan bottom-up (``E1 read the caption``, ..., ``E5 compute abs(#E3 - #E4)``), so a
policy writing it must emit the innermost operation of the question first, while the question names
the outermost first. Renumbered, the root of each plan is ``E<k>`` (the k-th root, in the order the
expert created them) and the i-th dependency of node ``E<p>`` is ``E<p><i>``: the policy writes the
plan in the question's order, and no id needs counting ahead (a node's id is its parent's plus one
digit; the next plan's root is one more than the roots in the state). A node two parents share keeps
the id of its first visit. The runtime accepts any ids, so nothing changes at run time: only the
training and validation samples are renumbered, the state and the decision alike (canonical equality
does not depend on ids)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel

from orchestra.agent.decision import Action
from orchestra.agent.graph import tree_mapping
from orchestra.agent.refs import rename_refs
from orchestra.agent.state import OrchestraState
from orchestra.schemas import Delegate, Finish

__all__ = ["tree_ids", "tree_mapping"]

R = TypeVar("R", bound=BaseModel)


def _renamed(record: R, mapping: Mapping[str, str], id_key: str, texts: tuple[str, ...]) -> R:
    """An evidence item, history entry or sub-task with its id, dependencies and the ids in ``texts``
    renamed (a field that is None stays None)."""
    update: dict[str, Any] = {"depends_on": [mapping.get(d, d) for d in record.depends_on]}  # type: ignore[attr-defined]
    for key in (id_key, *texts):
        value = getattr(record, key)
        if value is not None:
            update[key] = mapping.get(value, value) if key == id_key else rename_refs(value, mapping)
    return record.model_copy(update=update)


def tree_ids(state: OrchestraState, decision: Action) -> tuple[OrchestraState, Action]:
    """``state`` and ``decision`` with the evidence, history and decision renumbered by
    :func:`tree_mapping` over every node of the state and the decision, the decision's sub-tasks in
    pre-order; both as they are where the ids would collide."""
    new = decision.subtasks if isinstance(decision, Delegate) else []
    deps = {e.id: list(e.depends_on) for e in state.context}
    deps.update({st.id: list(st.depends_on) for st in new})
    try:
        mapping = tree_mapping(deps)
    except ValueError:
        return state, decision

    context = [_renamed(e, mapping, "id", ("goal", "planned_goal", "error")) for e in state.context]
    history = [_renamed(h, mapping, "subtask_id", ("goal", "note")) for h in state.history]
    state = state.model_copy(update={"context": context, "history": history})
    if isinstance(decision, Delegate):
        order = list(mapping)
        subtasks = sorted(new, key=lambda st: order.index(st.id))
        decision = Delegate(subtasks=[_renamed(st, mapping, "id", ("goal",)) for st in subtasks])
    elif isinstance(decision, Finish):
        decision = Finish(answer=rename_refs(decision.answer, mapping))
    return state, decision
