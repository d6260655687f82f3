"""The DA-GRPO rubric reward: format, validity, tool reasonableness and decision quality against the expert.

Four scores in [0, 1] per policy output, judged in its state (Orchestra-o1's rubric): ``format``
(it parses), ``validity`` (valid there: the runtime's own check), ``tools`` (do the sub-tasks' tools
cover what the expert's decision needs, without redundancy) and ``decision`` (closeness to the
expert's decision for the same state, crediting a sound different decomposition).

Delegates are compared node by node: a node's inputs are the modal inputs it reads, the values of
the evidence its goal references (so renumbering does not matter) and the same-batch nodes it
references, followed through the pairing of policy with expert nodes (:func:`_pair`).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rapidfuzz import fuzz

from orchestra.agent.decision import (
    Action,
    Format,
    ParseError,
    parse_decision,
    resolve,
    search_to_delegate,
    validate_decision,
)
from orchestra.agent.refs import REF_PATTERN, ReferenceError_, modal_key, next_subtask_id, substitute
from orchestra.agent.state import OrchestraState, validation_context
from orchestra.answers import answers_equal
from orchestra.backends.base import BackendCard
from orchestra.config import RubricWeights
from orchestra.errors import ConfigError, OrchestraError
from orchestra.schemas import Delegate, Finish, MaestroSearch, SubTask
from orchestra.text import ValueFormatError, format_value

__all__ = [
    "REJECTED",
    "RewardError",
    "RubricScores",
    "decision_reward",
    "format_reward",
    "resolve_answer",
    "rubric",
    "runtime_action",
    "tool_reward",
    "validity_reward",
]

#: relative weights of a node pair's credit: tools, inputs, goal text, backend
PAIR_WEIGHTS = (3, 3, 3, 1)
#: a goal that is not the expert's phrase (normalised) earns at most this share of the goal weight
GOAL_NEAR = 0.6
#: share of the decision score that rests on the dependency score (the rest is node agreement)
DEPENDENCY_SHARE = 0.4

_SCORES = ("format", "validity", "tools", "decision")


class RewardError(OrchestraError):
    """The expert decision a reward is judged against is not usable in its state (a data bug)."""


@dataclass(frozen=True)
class RubricScores:
    """The four rubric scores in [0, 1]; ``reason`` says why a policy output (or a reward model's
    reply) scored 0 where it did ('' when nothing failed)."""

    format: float
    validity: float
    tools: float
    decision: float
    reason: str = ""

    def __post_init__(self) -> None:
        for name in _SCORES:
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:  # also rejects NaN
                raise ValueError(f"rubric score {name} = {value!r} is outside [0, 1]")

    def total(self, weights: RubricWeights) -> float:
        """The weighted sum of the scores, normalised by the sum of the weights (so 0..1)."""
        ws = [getattr(weights, name) for name in _SCORES]
        if sum(ws) <= 0:
            raise ConfigError("train.dagrpo.rubric: the rubric weights sum to 0")
        return sum(w * getattr(self, name) for w, name in zip(ws, _SCORES, strict=True)) / sum(ws)


def format_reward(text: str, fmt: Format) -> float:
    """1.0 if ``text`` parses as a decision in ``fmt``, else 0.0."""
    return 0.0 if isinstance(parse_decision(text, fmt=fmt), ParseError) else 1.0


def validity_reward(text: str, state: OrchestraState, fmt: Format) -> float:
    """1.0 if ``text`` parses and is a valid decision in ``state`` (the runtime's own check), else 0.0."""
    out = parse_decision(text, fmt=fmt, context=validation_context(state))
    return 0.0 if isinstance(out, ParseError) else 1.0


#: what a grounded reward (progress, lookahead) pays a decision the runtime rejects: the floor, no
#: better than a lost task. At 0, above a wasteful plan's net, RL learnt to write invalid text where
#: it was unsure (validity on val 0.89 -> 0.51 in 70 steps of the recipes bench): in evaluation the
#: policy itself, not the expert, writes the next decision from the same state, and it loops.
REJECTED = -1.0


def runtime_action(text: str, state: OrchestraState, fmt: Format) -> Action | None:
    """``text`` as the runtime would execute it in ``state`` (parsed with its own check, a finish's
    answer substitutable), or None where the runtime rejects it."""
    action = parse_decision(text, fmt=fmt, context=validation_context(state))
    if isinstance(action, ParseError):
        return None
    if isinstance(action, Finish):
        try:
            resolve_answer(action.answer, state)
        except ReferenceError_:
            return None
    return action


def rubric(text: str, state: OrchestraState, expert: Action, fmt: Format = "lines") -> RubricScores:
    """All four scores of one policy output against the expert's decision for ``state``.

    Text that does not parse scores 0 throughout. A parsed decision that is invalid in the state
    scores format 1, validity 0 and also tools 0 and decision 0: the runtime never executes it (the
    turn is lost to an 'invalid' history entry), and graded credit would let an invalid near-copy of
    the expert (a cycle, a misspelt tool) outscore a valid but mediocre decision under the default
    weights. :func:`tool_reward` and :func:`decision_reward` still grade invalid actions when called
    on their own. An expert decision that is invalid in ``state`` raises :class:`RewardError`.
    """
    _expert(expert, state)
    action = parse_decision(text, fmt=fmt)
    if isinstance(action, ParseError):
        return RubricScores(0.0, 0.0, 0.0, 0.0, reason=str(action))
    ctx = validation_context(state)
    resolved = resolve(action, ctx)
    if isinstance(resolved, ParseError):
        return RubricScores(1.0, 0.0, 0.0, 0.0, reason=str(resolved))
    action = resolved
    error = validate_decision(action, ctx)
    if error is not None:
        return RubricScores(1.0, 0.0, 0.0, 0.0, reason=str(error))
    return RubricScores(1.0, 1.0, tool_reward(action, state, expert), decision_reward(action, state, expert))


@dataclass(frozen=True)
class _Node:
    """A sub-task as the reward compares it."""

    id: str
    tools: frozenset[str]
    modal: frozenset[str]  # 'M1', ...: modalities and #M references
    external: frozenset[str]  # '=<value>' of each existing evidence the goal references
    internal: tuple[str, ...]  # same-batch ids the goal references
    after: frozenset[str]  # same-batch ids it depends on
    goal: str  # whitespace-normalised, existing evidence references replaced by their values
    backend: str | None


def _values(state: OrchestraState) -> dict[str, str]:
    """Text of every reference that resolves in ``state``: ok evidence values, modal input ids."""
    out = {modal_key(i): m.id for i, m in enumerate(state.modal_inputs)}
    for e in (e for e in state.context if e.ok):
        try:
            out[e.id] = format_value(e.value)
        except ValueFormatError:
            continue  # no value: #E<n> does not resolve
    return out


def _as_delegate(action: Action, state: OrchestraState) -> Delegate | Finish:
    if isinstance(action, MaestroSearch):
        return search_to_delegate(action, next_subtask_id(e.id for e in state.context))
    return action


def _expert(expert: Action, state: OrchestraState) -> Delegate | Finish:
    error = validate_decision(expert, validation_context(state))
    if error is not None:
        raise RewardError(f"the expert decision is not valid in its state: {error}")
    return _as_delegate(expert, state)


def _node(st: SubTask, batch: Collection[str], values: Mapping[str, str]) -> _Node:
    modal = {m.strip().lstrip("#") for m in st.modalities}
    external: set[str] = set()
    internal: list[str] = []

    def repl(m: re.Match[str]) -> str:
        key = m.group(1) + m.group(2)
        if m.group(1) == "M":
            modal.add(key)
        elif key in batch:
            internal.append(key)
        elif key in values:
            external.add("=" + values[key])
            return values[key]
        return m.group(0)

    goal = " ".join(REF_PATTERN.sub(repl, st.goal).split())
    deps = frozenset(x.strip().lstrip("#") for x in st.depends_on) & set(batch)
    tools, mods, ext = frozenset(st.tools), frozenset(modal), frozenset(external)
    return _Node(st.id, tools, mods, ext, tuple(internal), deps, goal, st.backend)


def _nodes(d: Delegate, values: Mapping[str, str]) -> list[_Node]:
    batch = {st.id for st in d.subtasks}
    return [_node(st, batch, values) for st in d.subtasks]


def _jaccard(a: Collection[str], b: Collection[str]) -> float:
    union = set(a) | set(b)
    return 1.0 if not union else len(set(a) & set(b)) / len(union)


def _ancestors(nodes: Sequence[_Node]) -> dict[str, set[str]]:
    """Same-batch ids each node runs after (through depends_on and references, transitively)."""
    parents = {n.id: set(n.after) | set(n.internal) for n in nodes}
    out: dict[str, set[str]] = {}
    for n in nodes:
        seen: set[str] = set()
        todo = list(parents[n.id])
        while todo:
            x = todo.pop()
            if x not in seen and x in parents:
                seen.add(x)
                todo += parents[x]
        out[n.id] = seen
    return out


def _backend_sim(a: str | None, b: str | None, cards: Mapping[str, BackendCard]) -> float:
    """1 for the same backend, 0.5 for the runtime's choice or a backend sharing a skill, else 0."""
    if a == b:
        return 1.0
    if a is None or b is None:
        return 0.5
    shared = a in cards and b in cards and set(cards[a].skills) & set(cards[b].skills)
    return 0.5 if shared else 0.0


def _pair_credit(
    p: _Node, x: _Node, mapping: Mapping[str, str], cards: Mapping[str, BackendCard]
) -> tuple[float, bool]:
    """(credit in [0, 1], pairable) of policy node ``p`` against expert node ``x``, given the pairs so
    far (``mapping``: policy id -> expert id). Credit is ``PAIR_WEIGHTS`` over tool agreement
    (Jaccard), input agreement (Jaccard; same-batch references through ``mapping``), goal agreement
    (1 for the expert's phrase, else ``GOAL_NEAR`` times the rapidfuzz ratio, references resolved
    alike) and backend agreement; a pair needs some tool or input in common."""
    tools = _jaccard(p.tools, x.tools)
    p_in = p.modal | p.external | {"@" + mapping.get(i, "?" + i) for i in p.internal}
    inputs = _jaccard(p_in, x.modal | x.external | {"@" + i for i in x.internal})

    def mapped(m: re.Match[str]) -> str:
        return "#" + mapping.get(m.group(1) + m.group(2), "?") if m.group(1) == "E" else m.group(0)

    p_goal, x_goal = REF_PATTERN.sub(mapped, p.goal).casefold(), x.goal.casefold()
    goal = 1.0 if p_goal == x_goal else GOAL_NEAR * fuzz.ratio(p_goal, x_goal) / 100
    wt, wi, wg, wb = PAIR_WEIGHTS
    credit = wt * tools + wi * inputs + wg * goal + wb * _backend_sim(p.backend, x.backend, cards)
    credit /= sum(PAIR_WEIGHTS)
    return credit, tools > 0 or inputs > 0


def _pair(
    policy: Sequence[_Node], expert: Sequence[_Node], cards: Mapping[str, BackendCard]
) -> dict[str, tuple[str, float]]:
    """Policy id -> (expert id, credit), one-to-one, greedily: among the policy nodes whose
    same-batch parents are all decided, the best-credited pair first (ties: policy, then expert
    order). A cycle's nodes are decided in listed order, their unpaired parents matching nothing."""
    parents = {n.id: (set(n.after) | set(n.internal)) & {m.id for m in policy} for n in policy}
    pairs: dict[str, tuple[str, float]] = {}
    decided: set[str] = set()
    free = list(expert)
    while len(decided) < len(policy):
        todo = [n for n in policy if n.id not in decided]
        ready = [n for n in todo if parents[n.id] <= decided] or todo[:1]
        mapping = {p: x for p, (x, _) in pairs.items()}
        best: tuple[float, _Node, _Node] | None = None
        for p in ready:
            for x in free:
                credit, ok = _pair_credit(p, x, mapping, cards)
                if ok and (best is None or credit > best[0]):
                    best = (credit, p, x)
        if best is None:
            decided |= {n.id for n in ready}
            continue
        credit, p, x = best
        pairs[p.id] = (x.id, credit)
        decided.add(p.id)
        free.remove(x)
    return pairs


def _dependency_score(
    policy: Sequence[_Node], expert: Sequence[_Node], pairs: Mapping[str, tuple[str, float]]
) -> float:
    """needed dependencies present / (needed + unneeded): an expert dependency between two paired
    nodes is needed (present when the policy's pair runs after it, directly or not); a policy
    dependency no ``#E`` reference uses and the expert does not have (transitively) is unneeded:
    it serialises work that could run in parallel."""
    x_anc, p_anc = _ancestors(expert), _ancestors(policy)
    back = {x: p for p, (x, _) in pairs.items()}
    needed = [(back[a], back[x.id]) for x in expert for a in x.after if a in back and x.id in back]
    present = sum(1 for pa, p in needed if pa in p_anc[p])
    unneeded = 0
    for p in policy:
        parents = p.after | set(p.internal)
        for a in p.after - set(p.internal):
            if any(a in p_anc[q] for q in parents - {a}):
                continue  # implied by another parent: it delays nothing
            pa, px = pairs.get(a), pairs.get(p.id)
            unneeded += not (pa and px and pa[0] in x_anc[px[0]])
    total = len(needed) + unneeded
    return 1.0 if total == 0 else present / total


def resolve_answer(answer: str, state: OrchestraState) -> str:
    """``answer`` with its ``#E``/``#M`` references replaced by their values in ``state``;
    :class:`~orchestra.agent.refs.ReferenceError_` for one that names no value."""
    return substitute(answer, _values(state))


def _duplicates(nodes: Sequence[_Node]) -> int:
    """How many nodes repeat an earlier one (same tools, inputs and goal, references followed)."""
    by_id = {n.id: n for n in nodes}
    memo: dict[str, tuple[Any, ...]] = {}

    def sig(i: str, seen: frozenset[str]) -> tuple[Any, ...]:
        if i not in by_id or i in seen:
            return ("?", i)
        if i not in memo:
            n, inner = by_id[i], seen | {i}
            goal = REF_PATTERN.sub(lambda m: repr(sig(m.group(1) + m.group(2), inner)), n.goal)
            memo[i] = (tuple(sorted(n.tools)), tuple(sorted(n.modal)), goal.casefold())
        return memo[i]

    sigs = [sig(n.id, frozenset()) for n in nodes]
    return len(sigs) - len(set(sigs))


def _tools_by_modality(nodes: Sequence[_Node]) -> dict[str, set[str]]:
    return {m: {t for n in nodes if m in n.modal for t in n.tools} for n0 in nodes for m in n0.modal}


def tool_reward(action: Action, state: OrchestraState, expert: Action) -> float:
    """Tool reasonableness in [0, 1]: ``cover * (1 - unneeded) * (1 - duplicated)``.

    ``cover`` is the recall of the expert's tool multiset (each tool as often as its nodes list
    it), averaged, when the expert reads modal inputs, with the mean per-modal-input recall of the
    tools applied to that input. ``unneeded`` is the share of the policy's listed tools that no
    expert node lists; ``duplicated`` the share of its nodes that repeat another. Finish against
    finish is 1.0; finish against delegate (either way) is 0.0.
    """
    x_action, p_action = _expert(expert, state), _as_delegate(action, state)
    if isinstance(x_action, Finish) or isinstance(p_action, Finish):
        return 1.0 if isinstance(x_action, Finish) and isinstance(p_action, Finish) else 0.0
    values = _values(state)
    xs, ps = _nodes(x_action, values), _nodes(p_action, values)
    cx, cp = Counter(t for n in xs for t in n.tools), Counter(t for n in ps for t in n.tools)
    cover = 1.0 if not cx else sum((cx & cp).values()) / sum(cx.values())
    x_mod, p_mod = _tools_by_modality(xs), _tools_by_modality(ps)
    per_modal = [len(p_mod.get(m, set()) & ts) / len(ts) for m, ts in x_mod.items() if ts]
    if per_modal:
        cover = (cover + sum(per_modal) / len(per_modal)) / 2
    unneeded = 0.0 if not cp else sum(c for t, c in cp.items() if t not in cx) / sum(cp.values())
    return cover * (1 - unneeded) * (1 - _duplicates(ps) / len(ps))


def decision_reward(action: Action, state: OrchestraState, expert: Action) -> float:
    """Decision quality in [0, 1] against the expert's decision for ``state``.

    Finish against finish: 1.0 if the two answers, resolved through the state's evidence values,
    are equal (:func:`orchestra.answers.answers_equal`), else 0.0 (also for an answer naming no value).
    Finish against delegate (either way): 0.0. Delegate against delegate: the harmonic mean of precision (pair
    credit per policy node) and recall (per expert node), scaled by ``1 - DEPENDENCY_SHARE *
    (1 - dependency score)``. A subset of the expert's batch (the same work over two turns) keeps
    precision and loses recall; an extra harmless node costs some precision; chaining independent
    nodes costs dependency score.
    """
    x_action, p_action = _expert(expert, state), _as_delegate(action, state)
    if isinstance(x_action, Finish) and isinstance(p_action, Finish):
        try:
            want = resolve_answer(x_action.answer, state)
        except ReferenceError_ as e:
            raise RewardError(f"the expert answer {x_action.answer!r} does not resolve: {e}") from e
        try:
            got = resolve_answer(p_action.answer, state)
        except ReferenceError_:
            return 0.0
        return 1.0 if answers_equal(got, want) else 0.0
    if isinstance(x_action, Finish) or isinstance(p_action, Finish):
        return 0.0
    values = _values(state)
    xs, ps = _nodes(x_action, values), _nodes(p_action, values)
    pairs = _pair(ps, xs, {b.name: b for b in state.backends})
    credit = sum(c for _, c in pairs.values())
    precision, recall = credit / len(ps), credit / len(xs)
    nodes = 0.0 if credit == 0 else 2 * precision * recall / (precision + recall)
    return nodes * (1 - DEPENDENCY_SHARE * (1 - _dependency_score(ps, xs, pairs)))
