"""Decision formats (JSON delegate/finish, Maestro tags): parser, typed errors, validity, rendering."""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from orchestra.agent.graph import GraphError, check_nodes
from orchestra.agent.redo import MARK_PATTERN, expand_redo, is_redo
from orchestra.agent.refs import SUBTASK_ID_PATTERN, Ref, ReferenceError_, find_refs, substitute_spans
from orchestra.errors import OrchestraError
from orchestra.schemas import Delegate, Finish, MaestroSearch, SubTask, brief
from orchestra.text import format_value

__all__ = [
    "Action",
    "DecisionError",
    "ErrorKind",
    "Format",
    "MaestroSearch",
    "ParseError",
    "ValidationContext",
    "parse_decision",
    "render_decision",
    "resolve",
    "resolve_spans",
    "search_to_delegate",
    "validate_decision",
]

Format = Literal["json", "maestro", "lines"]


class ErrorKind(StrEnum):
    """Why a policy output is not a usable decision. ``stage`` is 'format' (the text is not a
    well-formed decision) or 'validity' (well-formed, but wrong for the current state)."""

    BAD_JSON = "bad_json"  # no JSON object can be decoded from the text
    BAD_FORMAT = "bad_format"  # Maestro: no <search>/<answer> action, or not "Model@@Skill: Query"
    SCHEMA = "schema"  # JSON object with missing/extra/mistyped fields or an unknown kind
    EMPTY_BATCH = "empty_batch"  # delegate with no sub-tasks
    NO_ANSWER = "no_answer"  # finish with a missing or blank answer
    BAD_ID = "bad_id"  # a sub-task id that is not E<n>
    DUPLICATE_ID = "duplicate_id"  # an id used twice in the batch or already used earlier
    UNKNOWN_DEPENDENCY = "unknown_dependency"  # depends_on names an id that does not exist
    CYCLE = "cycle"  # depends_on forms a cycle
    UNKNOWN_BACKEND = "unknown_backend"
    UNKNOWN_TOOL = "unknown_tool"
    UNKNOWN_SKILL = "unknown_skill"  # a skill the named backend (or any backend) lacks
    UNKNOWN_MODALITY = "unknown_modality"  # modality mask entry M<n> beyond the modal inputs
    UNKNOWN_REFERENCE = "unknown_reference"  # #M<n>/#E<n> that does not exist or has no value
    UNDECLARED_DEPENDENCY = "undeclared_dependency"  # #E<n> of a same-batch node it does not depend on

    @property
    def stage(self) -> Literal["format", "validity"]:
        return "format" if self in _FORMAT_KINDS else "validity"


_FORMAT_KINDS = frozenset(
    ErrorKind(k) for k in ("bad_json", "bad_format", "schema", "empty_batch", "no_answer", "bad_id")
)


class ParseError(BaseModel):
    """A policy output that is not a usable decision: the class of problem and why."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: ErrorKind
    reason: str

    @property
    def stage(self) -> Literal["format", "validity"]:
        return self.kind.stage

    def __str__(self) -> str:
        return f"{self.kind.value}: {self.reason}"


class DecisionError(OrchestraError):
    """Raised by callers that need a decision and got a :class:`ParseError` (kept as ``.error``)."""

    def __init__(self, error: ParseError) -> None:
        super().__init__(str(error))
        self.error = error


Action = Delegate | Finish | MaestroSearch


@dataclass(frozen=True)
class ValidationContext:
    """What a decision is checked against: the backend pool (name -> skills), the tool names, the
    number of modal inputs, the ids of existing evidence and which of those succeeded, the spans of
    the question, each evidence item's sub-task as planned (what a ``redo`` line runs again) and the
    results marked to run again (``?1``: the name a redo line may give one)."""

    backends: Mapping[str, Collection[str]] = field(default_factory=dict)
    tools: Collection[str] = frozenset()
    n_modal: int = 0
    evidence_ids: Collection[str] = frozenset()
    ok_ids: Collection[str] | None = None  # None: every evidence id has a value
    spans: Mapping[str, str] = field(default_factory=dict)  # '#C1' -> its span (refs.question_spans)
    planned: Mapping[str, SubTask] = field(default_factory=dict)  # evidence id -> Evidence.planned()
    marks: Mapping[str, str] = field(default_factory=dict)  # '?1' -> the evidence id (state.redo_marks)

    def resolvable(self) -> Collection[str]:
        return self.evidence_ids if self.ok_ids is None else self.ok_ids


# --- syntax -------------------------------------------------------------------------------------------

_FENCE = re.compile(r"```[ \t]*(?:json|JSON)?[ \t]*\n?(.*?)```", re.DOTALL)
_MODAL = re.compile(r"#?(M[1-9][0-9]*)")
_DEP = re.compile(rf"#?({SUBTASK_ID_PATTERN.pattern})")
_TAG = re.compile(r"<(search|answer)>(.*?)(?:</\1>|\Z)", re.DOTALL)
_SEARCH = re.compile(r"\s*([^\s@:]+)\s*@@\s*([^\s:]+)\s*:\s*(.*?)\s*\Z", re.DOTALL)


def _err(kind: ErrorKind, reason: str) -> ParseError:
    return ParseError(kind=kind, reason=reason)


def _first_object(text: str) -> dict[str, Any] | ParseError:
    """The first JSON object in ``text``: inside a ```json fence if there is one, else anywhere."""
    fenced = _FENCE.search(text)
    candidates = [fenced.group(1), text] if fenced else [text]
    decoder = json.JSONDecoder()
    first_err: str | None = None
    for chunk in candidates:
        for m in re.finditer(r"\{", chunk):
            try:
                obj, _ = decoder.raw_decode(chunk, m.start())
            except json.JSONDecodeError as e:
                first_err = first_err or f"{e.msg} at line {e.lineno} column {e.colno}"
                continue
            if isinstance(obj, dict):
                return obj
    if first_err is None:
        return _err(ErrorKind.BAD_JSON, "no JSON object ('{...}') in the output")
    return _err(ErrorKind.BAD_JSON, f"not valid JSON: {first_err}")


def _parse_json(text: str) -> Action | ParseError:
    obj = _first_object(text)
    if isinstance(obj, ParseError):
        return obj
    kind = obj.get("kind")
    if kind == "finish":
        answer = obj.get("answer")
        if isinstance(answer, int | float):
            obj = {**obj, "answer": format_value(answer)}  # LM noise: unquoted numbers
        elif answer is None or (isinstance(answer, str) and not answer.strip()):
            return _err(ErrorKind.NO_ANSWER, "finish needs a non-empty 'answer'")
        model: type[BaseModel] = Finish
    elif kind == "delegate":
        subtasks = obj.get("subtasks")
        if isinstance(subtasks, list) and not subtasks:
            return _err(ErrorKind.EMPTY_BATCH, "delegate needs at least one sub-task")
        model = Delegate
    else:
        why = "missing 'kind'" if kind is None else f"unknown kind {kind!r}"
        return _err(ErrorKind.SCHEMA, f"{why}; expected 'delegate' or 'finish'")
    try:
        action = model.model_validate(obj)
    except ValidationError as e:
        return _err(ErrorKind.SCHEMA, brief(e))
    return _normalise(action) if isinstance(action, Delegate) else action  # type: ignore[return-value]


def _normalise(d: Delegate) -> Delegate | ParseError:
    """Check ids are E<n> (a redo may name a mark, ``?1``); accept '#M1'/'#E1' for 'M1'/'E1' in
    modalities and depends_on."""
    out = []
    for st in d.subtasks:
        if not (SUBTASK_ID_PATTERN.fullmatch(st.id) or is_redo(st) and MARK_PATTERN.fullmatch(st.id)):
            return _err(ErrorKind.BAD_ID, f"sub-task id {st.id!r} must look like E1, E2, ...")
        mods, deps = [], []
        for m in st.modalities:
            mm = _MODAL.fullmatch(m.strip())
            if not mm:
                return _err(ErrorKind.SCHEMA, f"{st.id}: modality {m!r} must look like M1, M2, ...")
            mods.append(mm.group(1))
        for dep in st.depends_on:
            dm = _DEP.fullmatch(dep.strip())
            if not dm:
                return _err(ErrorKind.BAD_ID, f"{st.id}: dependency {dep!r} must look like E1, E2, ...")
            deps.append(dm.group(1))
        out.append(st.model_copy(update={"modalities": mods, "depends_on": deps}))
    return Delegate(subtasks=out)


def _parse_lines(text: str) -> Action | ParseError:
    from orchestra.agent.lines import parse_lines

    out = parse_lines(text)
    if isinstance(out, tuple):
        return _err(ErrorKind(out[0]), out[1])
    return _normalise(out) if isinstance(out, Delegate) else out


def _parse_maestro(text: str) -> Action | ParseError:
    m = _TAG.search(text)
    if not m:
        return _err(ErrorKind.BAD_FORMAT, "no <search>…</search> or <answer>…</answer> action")
    body = m.group(2).strip()
    if m.group(1) == "answer":
        if not body:
            return _err(ErrorKind.NO_ANSWER, "<answer> is empty")
        return Finish(answer=body)
    sm = _SEARCH.fullmatch(body)
    if not sm:
        return _err(ErrorKind.BAD_FORMAT, f"search must read 'Model@@Skill: Query', got {body[:80]!r}")
    if not sm.group(3):
        return _err(ErrorKind.BAD_FORMAT, "search has an empty query")
    return MaestroSearch(model=sm.group(1), skill=sm.group(2), query=sm.group(3))


# --- validity ---------------------------------------------------------------------------------------


def _refs_error(
    text: str, where: str, ctx: ValidationContext, later: Collection[str] = (), batch: Collection[str] = ()
) -> ParseError | None:
    for ref in find_refs(text):
        if _resolves(ref, ctx, later):
            continue
        if ref.kind == "E" and ref.key in batch:
            return _err(
                ErrorKind.UNDECLARED_DEPENDENCY,
                f"{where} uses #{ref.key} from the same batch without depending on it",
            )
        why = "a failed sub-task with no value" if ref.key in ctx.evidence_ids else "nothing that exists yet"
        if ref.kind == "M":
            why = f"a modal input beyond the {ctx.n_modal} given"
        return _err(ErrorKind.UNKNOWN_REFERENCE, f"{where}: #{ref.key} names {why}")
    return None


def _resolves(ref: Ref, ctx: ValidationContext, later: Collection[str]) -> bool:
    if ref.kind == "M":
        return ref.number <= ctx.n_modal
    return ref.key in ctx.resolvable() or ref.key in later


def _check_subtask(
    st: SubTask, ctx: ValidationContext, ancestors: set[str], batch: set[str], label: str | None = None
) -> ParseError | None:
    where = label or st.id
    if st.backend is not None and st.backend not in ctx.backends:
        valid = ", ".join(sorted(ctx.backends)) or "none"
        return _err(ErrorKind.UNKNOWN_BACKEND, f"{where}: unknown backend {st.backend!r}; valid: {valid}")
    if st.skill is not None:
        skills = (
            set(ctx.backends[st.backend]) if st.backend else {s for v in ctx.backends.values() for s in v}
        )
        if st.skill not in skills:
            owner = f"backend {st.backend!r}" if st.backend else "any backend"
            return _err(
                ErrorKind.UNKNOWN_SKILL,
                f"{where}: {owner} has no skill {st.skill!r}; valid: {', '.join(sorted(skills))}",
            )
    unknown = [t for t in st.tools if t not in ctx.tools]
    if unknown:
        valid = ", ".join(sorted(ctx.tools)) or "none"
        return _err(ErrorKind.UNKNOWN_TOOL, f"{where}: unknown tool(s) {unknown}; valid: {valid}")
    beyond = [m for m in st.modalities if int(m[1:]) > ctx.n_modal]
    if beyond:
        return _err(ErrorKind.UNKNOWN_MODALITY, f"{where}: {beyond} but only {ctx.n_modal} modal input(s)")
    return _refs_error(
        st.goal, f"{where} goal" if label is None else f"{where} query", ctx, later=ancestors, batch=batch
    )


def validate_decision(action: Action, ctx: ValidationContext) -> ParseError | None:
    """None if ``action`` is valid in ``ctx``, else the first problem found.

    Delegate: graph checks (duplicate id, unknown dependency, cycle) first, then per sub-task in
    order: backend, skill, tools, modality mask, references in the goal (``#E<n>`` must be
    resolvable evidence or an ancestor in the batch). Finish: references in the answer. Search:
    backend, its skill, references in the query.
    """
    if isinstance(action, Finish):  # the runtime substitutes evidence values into it, never a modal input
        modal = next((r for r in find_refs(action.answer) if r.kind == "M"), None)
        if modal is not None:
            why = f"answer: #{modal.key} names a modal input, which has no value to answer with"
            return _err(ErrorKind.UNKNOWN_REFERENCE, why)
        return _refs_error(action.answer, "answer", ctx)
    if isinstance(action, MaestroSearch):
        return _check_subtask(
            SubTask(id="E1", goal=action.query, backend=action.model, skill=action.skill),
            ctx,
            set(),
            set(),
            label="search",
        )
    normal = _normalise(action)  # a Delegate built in code has not been through the parser
    if isinstance(normal, ParseError):
        return normal
    action = normal
    try:
        check_nodes(action.subtasks, external=ctx.evidence_ids)
    except GraphError as e:
        return _err(ErrorKind(e.kind), str(e))
    deps = {st.id: list(st.depends_on) for st in action.subtasks}
    batch = set(deps)
    for st in action.subtasks:
        ancestors: set[str] = set()
        todo = [d for d in st.depends_on if d in batch]
        while todo:
            d = todo.pop()
            if d not in ancestors:
                ancestors.add(d)
                todo += [x for x in deps[d] if x in batch]
        err = _check_subtask(st, ctx, ancestors, batch)
        if err:
            return err
    return None


def parse_decision(
    text: str, *, fmt: Format = "json", context: ValidationContext | None = None
) -> Action | ParseError:
    """Parse one policy output into a typed action, or a :class:`ParseError` — never raises on bad text.

    JSON: tolerates prose around the object and ```json fences (the first fenced block wins, then
    the first decodable object); unquoted numeric answers become strings; '#M1'/'#E1' in
    modalities/depends_on are read as 'M1'/'E1'. Maestro: the first ``<search>``/``<answer>`` tag;
    a missing closing tag at the end of the text is tolerated. With ``context`` the action is also
    checked by :func:`validate_decision`, after its ``redo`` lines are expanded and its span
    references (``#C1``) are replaced by the question spans they name (:func:`resolve`).
    """
    if fmt == "json":
        action = _parse_json(text)
    elif fmt == "maestro":
        action = _parse_maestro(text)
    elif fmt == "lines":
        action = _parse_lines(text)
    else:
        raise ValueError(f"unknown decision format {fmt!r}; valid: json, maestro, lines")
    if isinstance(action, ParseError) or context is None:
        return action
    action = resolve(action, context)
    if isinstance(action, ParseError):
        return action
    return validate_decision(action, context) or action


def resolve(action: Action, ctx: ValidationContext) -> Action | ParseError:
    """``action`` as the runtime runs it in ``ctx``'s state: ``redo`` placeholders (of an evidence id,
    or of a mark, ``?1``) expanded into the sub-tasks they stand for (agent/redo.py), then span
    references resolved (:func:`resolve_spans`). A redo on a backend that shares no skill with the one
    the result came from cannot run (its sub-agent would refuse the goal): ``unknown_skill``."""
    if isinstance(action, Delegate):
        subtasks = []
        for st in action.subtasks:
            if is_redo(st) and MARK_PATTERN.fullmatch(st.id):
                if st.id not in ctx.marks:
                    why = f"redo {st.id}: the state marks {len(ctx.marks)} results"
                    return _err(ErrorKind.UNKNOWN_REFERENCE, why)
                st = st.model_copy(update={"id": ctx.marks[st.id]})
            ran = ctx.planned[st.id].backend if is_redo(st) and st.id in ctx.planned else None
            if (
                ran in ctx.backends
                and st.backend in ctx.backends
                and not ctx.backends[ran] & ctx.backends[st.backend]
            ):
                return _err(
                    ErrorKind.UNKNOWN_SKILL,
                    f"redo {st.id}: it ran on {ran} ({', '.join(sorted(ctx.backends[ran]))}); "
                    f"{st.backend} has none of those skills",
                )
            subtasks.append(st)
        try:
            action = expand_redo(action.model_copy(update={"subtasks": subtasks}), ctx.planned)
        except ReferenceError_ as e:
            return _err(ErrorKind.UNKNOWN_REFERENCE, str(e))
    return resolve_spans(action, ctx.spans)


def resolve_spans(action: Action, spans: Mapping[str, str]) -> Action | ParseError:
    """``action`` with every span reference (``#C1``, ``#N2``) in goals, queries and the answer replaced
    by the question span it names; an unknown reference is a :class:`ParseError` (``unknown_reference``)."""
    try:
        if isinstance(action, Finish):
            return action.model_copy(update={"answer": substitute_spans(action.answer, spans)})
        if isinstance(action, MaestroSearch):
            return action.model_copy(update={"query": substitute_spans(action.query, spans)})
        subtasks = [
            st.model_copy(update={"goal": substitute_spans(st.goal, spans)}) for st in action.subtasks
        ]
    except ReferenceError_ as e:
        return _err(ErrorKind.UNKNOWN_REFERENCE, str(e))
    return Delegate(subtasks=subtasks)


# --- rendering ---------------------------------------------------------------------------------------


def _subtask_json(st: SubTask) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": st.id,
        "goal": st.goal,
        "modalities": list(st.modalities),
        "tools": list(st.tools),
    }
    if st.backend is not None:
        out["backend"] = st.backend
    if st.skill is not None:
        out["skill"] = st.skill
    out["depends_on"] = list(st.depends_on)
    return out


def render_decision(action: Action, fmt: Format = "json") -> str:
    """The canonical text of ``action`` (what the policy should write; SFT completions use it).

    JSON: one line, fixed key order (kind, subtasks[id, goal, modalities, tools, backend?, skill?,
    depends_on] | answer), unset backend/skill omitted. Maestro: ``<search> Model@@Skill: Query
    </search>`` (a delegate of one sub-task with backend and skill) or ``<answer>…</answer>``.
    """
    if fmt == "maestro":
        if isinstance(action, Finish):
            return f"<answer>{action.answer}</answer>"
        if isinstance(action, Delegate):
            if len(action.subtasks) != 1 or not (action.subtasks[0].backend and action.subtasks[0].skill):
                raise DecisionError(
                    _err(
                        ErrorKind.BAD_FORMAT,
                        "Maestro format holds one sub-task with a backend and a skill",
                    )
                )
            st = action.subtasks[0]
            action = MaestroSearch(model=st.backend or "", skill=st.skill or "", query=st.goal)
        return f"<search> {action.model}@@{action.skill}: {action.query} </search>"
    if fmt == "lines" and isinstance(action, Delegate | Finish):
        from orchestra.agent.lines import render_lines

        return render_lines(action)
    if fmt not in ("json", "lines"):
        raise ValueError(f"unknown decision format {fmt!r}; valid: json, maestro, lines")
    if isinstance(action, Finish):
        obj: dict[str, Any] = {"kind": "finish", "answer": action.answer}
    elif isinstance(action, Delegate):
        obj = {"kind": "delegate", "subtasks": [_subtask_json(st) for st in action.subtasks]}
    else:
        raise DecisionError(
            _err(ErrorKind.BAD_FORMAT, f"a Maestro search has no {fmt} form; use search_to_delegate")
        )
    return json.dumps(obj, ensure_ascii=False)


def search_to_delegate(
    search: MaestroSearch, subtask_id: str, modalities: list[str] | None = None
) -> Delegate:
    """A Maestro search as a one-node delegate (so both formats run through the same scheduler)."""
    return Delegate(
        subtasks=[
            SubTask(
                id=subtask_id,
                goal=search.query,
                modalities=modalities or [],
                backend=search.model,
                skill=search.skill,
            )
        ]
    )
