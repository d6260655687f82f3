"""What the policy trains on and is scored by: decision samples prepared for a view, canonical decisions."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

from orchestra.agent.decision import (
    Action,
    Format,
    ParseError,
    parse_decision,
    render_decision,
    resolve,
)
from orchestra.agent.redo import expand_redo, redo_line
from orchestra.agent.refs import REF_PATTERN
from orchestra.agent.state import OrchestraState, Style, render_state, validation_context
from orchestra.backends.goals import GoalError, browse_goal, parse_goal, perception_goal
from orchestra.config import AgentParams
from orchestra.io import read_jsonl
from orchestra.schemas import DecisionSample, Delegate, Finish
from orchestra.training.tree_ids import tree_ids

__all__ = [
    "DecisionScore",
    "PolicyView",
    "Prepared",
    "canonical",
    "load_samples",
    "prepare",
    "redo_refs",
    "score_decisions",
    "span_refs",
    "structure",
    "target_texts",
]


@dataclass(frozen=True)
class PolicyView:
    """How a trained policy reads states and writes decisions (saved beside its weights). In the
    ``marked`` style the question's spans are marked and the targets name them (``#C1``); with
    ``ids="tree"`` the samples it learns from are renumbered into tree ids (tree_ids.py), ``expert``
    keeps the expert's bottom-up numbering."""

    style: Style = "marked"
    fmt: Format = "lines"
    ids: Literal["expert", "tree"] = "tree"

    def messages(self, state: OrchestraState, agent: AgentParams) -> list[dict[str, str]]:
        return render_state(
            state, agent.state_tokens, fmt=self.fmt, style=self.style, evidence_tokens=agent.evidence_tokens
        )

    def target(self, decision: Action, state: OrchestraState) -> str:
        """The text the policy should write for ``decision`` in ``state`` (in the ``marked`` style
        span references, and in ``lines`` a re-plan that reruns results as ``redo`` lines)."""
        if self.style == "marked" and self.fmt == "lines":
            decision = redo_refs(decision, state)
        if self.style == "marked":
            decision = span_refs(decision, validation_context(state).spans)
        return render_decision(decision, self.fmt)


@dataclass(frozen=True)
class Prepared:
    """A decision sample as a view trains and is scored on it, made once by :func:`prepare`: ``sample``
    the record in the view's ids (its state dict dropped: ``state`` holds it, validated and renumbered
    alike); ``prompt``, the view's rendering of the state, and ``target``, the text the view writes
    for the decision, are made on first use and kept (a recipe reads only some: outcome GRPO renders
    no train state, DA-GRPO on the policy's own states needs no target of the expert's)."""

    sample: DecisionSample
    state: OrchestraState
    view: PolicyView
    agent: AgentParams

    @property
    def decision(self) -> Action:
        return self.sample.decision

    @cached_property
    def prompt(self) -> list[dict[str, str]]:
        return self.view.messages(self.state, self.agent)

    @cached_property
    def target(self) -> str:
        return self.view.target(self.decision, self.state)


def prepare(samples: Iterable[DecisionSample], view: PolicyView, agent: AgentParams) -> list[Prepared]:
    """``samples`` as ``view`` trains on and is scored on them, each state validated once (and with
    ``ids="tree"`` renumbered into tree ids, the decision alike: tree_ids.py)."""
    out = []
    for s in samples:
        state, decision = OrchestraState.model_validate(s.state), s.decision
        if view.ids == "tree":
            state, decision = tree_ids(state, decision)
        out.append(Prepared(s.model_copy(update={"state": None, "decision": decision}), state, view, agent))
    return out


def target_texts(samples: Iterable[Prepared]) -> set[str]:
    """The target text of every sample (the ``seen`` set of the exact rate on unseen targets)."""
    return {p.target for p in samples}


def redo_refs(action: Action, state: OrchestraState) -> Action:
    """``action`` as ``redo`` lines (agent/redo.py) where it is exactly what they stand for in
    ``state``: each sub-task of the batch that depends on none of the batch is an evidence item's
    sub-task as planned (the newest such item), and expanding those redos gives ``action`` back
    (:func:`canonical`); any other action as it is. A marked result is named by its mark (``redo ?1
    vision_expert``: state.redo_marks), in the marks' order."""
    if not isinstance(action, Delegate) or not state.context:
        return action
    ctx = validation_context(state)
    batch = {st.id for st in action.subtasks}
    redos = []
    for st in action.subtasks:
        if set(st.depends_on) & batch:
            continue
        same = [
            e.id
            for e in reversed(state.context)
            if (p := ctx.planned[e.id]).goal == st.goal
            and p.tools == st.tools
            and p.modalities == st.modalities
        ]
        if not same:
            return action
        redos.append(redo_line(same[0], st.backend))
    short = Delegate(subtasks=redos)
    if canonical(expand_redo(short, ctx.planned)) != canonical(action):
        return action
    mark = {sid: ref for ref, sid in ctx.marks.items()}
    order = list(ctx.marks)
    named = [st.model_copy(update={"id": mark.get(st.id, st.id)}) for st in redos]
    named.sort(key=lambda st: order.index(st.id) if st.id in order else len(order))
    return Delegate(subtasks=named)


def span_refs(action: Action, spans: Mapping[str, str]) -> Action:
    """``action`` as a policy that reads marked questions writes it: each perception argument that is
    a question span (a chart label, a colour, a shape) becomes the reference naming it (``#C1``), and
    so does each field a browse goal reads that the question names (``read the field #F2``).
    A value the question names several times takes its occurrences' keys in turn, sub-task by
    sub-task (the plan's order follows the question's), the last one again when they run out.
    Resolving the references (decision.resolve_spans) gives ``action`` back."""
    if not isinstance(action, Delegate) or not spans:
        return action
    keys: dict[str, list[str]] = {}
    for key, span in spans.items():
        keys.setdefault(span, []).append(f"#{key}")
    out = []
    for st in action.subtasks:
        try:
            goal = parse_goal(st.goal)
        except GoalError:
            goal = None
        if goal is not None and goal.kind == "browse" and (refs := keys.get(goal.meta["field"])):
            ref = refs.pop(0) if len(refs) > 1 else refs[0]
            out.append(st.model_copy(update={"goal": browse_goal(goal.args["url"], ref)}))
            continue
        if goal is None or goal.perception is None or goal.modal is None:
            out.append(st)
            continue
        args = {}
        for k, v in goal.meta.get("args", {}).items():
            refs = keys.get(str(v))
            args[k] = (refs.pop(0) if len(refs) > 1 else refs[0]) if refs else v
        text = perception_goal(goal.perception.name, args, f"#{goal.modal}")
        out.append(st.model_copy(update={"goal": text}))
    return Delegate(subtasks=out)


def load_samples(path: Path, splits: Iterable[str] | None = None) -> list[DecisionSample]:
    """The decision samples in ``path`` (a samples.jsonl) as stored, only ``splits`` when given."""
    keep = None if splits is None else set(splits)
    return [s for s in read_jsonl(path, DecisionSample) if keep is None or s.split in keep]


def _norm(text: str) -> str:
    return " ".join(text.split()).casefold()


def canonical(action: Action, structural: bool = False) -> tuple[Any, ...]:
    """A form equal for two decisions that say the same thing: new sub-task ids (and the ``#E``
    references to them) are replaced by what the node is, so numbering and order do not matter.
    ``structural`` drops the goal text (the count, tools, backends, modalities, dependencies)."""
    if isinstance(action, Finish):
        return ("finish",) if structural else ("finish", _norm(action.answer))
    if not isinstance(action, Delegate):
        return ("search", action.model, action.skill, "" if structural else _norm(action.query))
    nodes = {st.id: st for st in action.subtasks}
    keys: dict[str, Any] = {}

    def key(sid: str, seen: frozenset[str]) -> Any:
        if sid not in nodes:
            return sid  # existing evidence keeps its id
        if sid in seen:
            return ("cycle",)
        if sid not in keys:
            st, inner = nodes[sid], seen | {sid}
            deps = tuple(sorted(repr(key(d, inner)) for d in st.depends_on))
            goal = REF_PATTERN.sub(
                lambda m: repr(key(f"E{m.group(2)}", inner)) if m.group(1) == "E" else m.group(0), st.goal
            )
            keys[sid] = (st.backend, st.skill, tuple(st.tools), tuple(st.modalities), deps) + (
                () if structural else (_norm(goal),)
            )
        return keys[sid]

    return ("delegate", tuple(sorted(repr(key(sid, frozenset())) for sid in nodes)))


def structure(action: Action) -> tuple[Any, ...]:
    return canonical(action, structural=True)


@dataclass(frozen=True)
class DecisionScore:
    """Rates over ``n`` decisions: parse, valid in the state, exact (canonical equality), structural;
    ``exact_unseen`` over the ``n_unseen`` whose target text never occurs in training."""

    n: int
    parse: float
    valid: float
    exact: float
    structural: float
    n_unseen: int = 0
    exact_unseen: float = 0.0

    def as_metrics(self, prefix: str = "") -> dict[str, float]:
        keys = ("n", "parse", "valid", "exact", "structural", "n_unseen", "exact_unseen")
        return {f"{prefix}{k}": float(getattr(self, k)) for k in keys}


def score_decisions(
    outputs: Sequence[str], samples: Sequence[Prepared], seen: Collection[str] = ()
) -> tuple[DecisionScore, list[Mapping[str, Any]]]:
    """Each policy output (in its sample's view's format) against the sample's expert decision, and
    per-sample rows (for a report); span references (``#C1``) count as the spans they name. ``seen``:
    the target texts of training (:attr:`Prepared.target`), for the exact rate on unseen targets."""
    seen = set(seen)
    rows: list[Mapping[str, Any]] = []
    for text, p in zip(outputs, samples, strict=True):
        sample, state, fmt = p.sample, p.state, p.view.fmt
        ctx = validation_context(state)
        parsed = parse_decision(text, fmt=fmt)
        ok = not isinstance(parsed, ParseError)
        checked = parse_decision(text, fmt=fmt, context=ctx) if ok else parsed
        valid = not isinstance(checked, ParseError)
        if ok:
            resolved = resolve(parsed, ctx)  # type: ignore[arg-type]
            parsed = parsed if isinstance(resolved, ParseError) else resolved
        expert = sample.decision
        rows.append(
            {
                "sample_id": sample.sample_id,
                "kind": sample.kind,
                "parse": ok,
                "valid": valid,
                "exact": ok and canonical(parsed) == canonical(expert),  # type: ignore[arg-type]
                "structural": ok and structure(parsed) == structure(expert),  # type: ignore[arg-type]
                "unseen": p.target not in seen,
                "error": "" if valid else str(checked),
                "output": text,
            }
        )
    n = len(rows)

    def rate(k: str, among: Sequence[Mapping[str, Any]] = rows) -> float:
        return sum(bool(r[k]) for r in among) / len(among) if among else 0.0

    unseen = [r for r in rows if r["unseen"]]
    score = DecisionScore(
        n, rate("parse"), rate("valid"), rate("exact"), rate("structural"), len(unseen), rate("exact", unseen)
    )
    return score, rows
