"""The ``lines`` decision format a small trained policy writes: one line per sub-task, or the answer.

A delegate is one line per sub-task, five fields and the goal::

    E1 video_fast video_text M1 - read the caption number in #M1
    E3 code_expert code_executor - E1,E2 compute abs(#E1 - #E2)

(id, backend or ``-`` for the runtime's choice — ``backend@skill`` to ask a skill —, tools joined
by ``,`` or ``-``, modal inputs or ``-``, dependencies or ``-``, then the goal to the end of the
line). A finish is ``= <answer>``. ``redo E12 vision_expert`` runs the state's sub-task ``E12`` again on
``vision_expert`` and re-issues what depends on it (agent/redo.py: the parser's placeholder sub-task
is expanded against the state); ``redo ?1 vision_expert`` names the result the state marks ``?1``.
The JSON form says the same in about three times the tokens.
"""

from __future__ import annotations

from pydantic import ValidationError

from orchestra.agent.redo import REDO, is_redo, redo_line
from orchestra.schemas import Delegate, Finish, SubTask, brief

__all__ = ["parse_lines", "render_lines"]


def _field(values: list[str]) -> str:
    return ",".join(values) or "-"


def _values(text: str) -> list[str]:
    return [] if text == "-" else [v for v in text.split(",") if v]


def render_lines(action: Delegate | Finish) -> str:
    """The canonical ``lines`` text of a delegate or a finish."""
    if isinstance(action, Finish):
        return f"= {action.answer}"
    out = []
    for st in action.subtasks:
        if is_redo(st):
            out.append(f"{REDO} {st.id} {st.backend or '-'}")
            continue
        backend = "-" if st.backend is None else st.backend + (f"@{st.skill}" if st.skill else "")
        fields = [st.id, backend, _field(st.tools), _field(st.modalities), _field(st.depends_on)]
        out.append(" ".join([*fields, " ".join(st.goal.split())]))
    return "\n".join(out)


def parse_lines(text: str) -> Delegate | Finish | tuple[str, str]:
    """The action in ``text``, or ``(error kind, reason)`` (the caller makes the ParseError).

    Blank lines are ignored; a line starting ``=`` is a finish (the first one wins, and nothing
    before it may be a sub-task line)."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return "bad_format", "empty output: expected sub-task lines or '= answer'"
    if lines[0].startswith("="):
        answer = lines[0][1:].strip()
        return Finish(answer=answer) if answer else ("no_answer", "'=' with no answer")
    subtasks = []
    for n, line in enumerate(lines, 1):
        parts = line.split(None, 5)
        if parts[0] == REDO:
            if len(parts) != 3:
                return "bad_format", f"line {n}: expected 'redo id backend', got {line[:80]!r}"
            try:
                subtasks.append(redo_line(parts[1], None if parts[2] == "-" else parts[2]))
            except ValidationError as e:
                return "schema", f"line {n}: {brief(e)}"
            continue
        if len(parts) < 6:
            return (
                "bad_format",
                f"line {n}: expected 'id backend tools modalities deps goal', got {line[:80]!r}",
            )
        sid, backend, tools, mods, deps, goal = parts
        name, _, skill = backend.partition("@")
        try:
            subtasks.append(
                SubTask(
                    id=sid,
                    goal=goal,
                    tools=_values(tools),
                    modalities=_values(mods),
                    depends_on=_values(deps),
                    backend=None if name == "-" else name,
                    skill=skill or None,
                )
            )
        except ValidationError as e:
            return "schema", f"line {n}: {brief(e)}"
    return Delegate(subtasks=subtasks)
