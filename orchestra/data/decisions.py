"""Expert trajectories and decision-level samples: the expert runs verified samples, each decision
it made becomes a (state, decision) sample, and train states off its path are added.

Off-path states (train split only) are built from a recorded state by what the runtime itself can
produce, then labelled by the stateless expert (``expert_decision``), which reads only the state:
- ``branch_failed`` / ``branch_timed_out``: one perception's evidence failed (or timed out) and its
  dependants were skipped;
- ``useless_subtask``: an extra, unneeded computation was done first (every id after it shifts);
- ``renumbered``: the same evidence under ids shifted by an offset;
- ``partial_batch``: only part of a batch finished (the last evidence items are missing).
Alternative renderings (``evidence_order``, ``backend_order``) permute the evidence or the backend
pool of a state; the label is recomputed, not copied.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from orchestra.agent.decision import Action, render_decision
from orchestra.agent.expert import ExpertError, expert_decision
from orchestra.agent.memory import Evidence
from orchestra.agent.refs import find_refs, rename_refs
from orchestra.agent.state import OrchestraState, history_from_evidence
from orchestra.config import AgentParams
from orchestra.schemas import DecisionSample, Delegate, SolutionStep, Trajectory, VerifiedSample

__all__ = [
    "OFF_PATH",
    "RENDERINGS",
    "cut_trajectory",
    "is_parallel_batch",
    "off_path_states",
    "relabel_trajectory",
    "seed_splits",
]


def seed_splits(seed_ids: Sequence[str], fractions: Mapping[str, float], seed: int) -> dict[str, str]:
    """seed id -> train/val/test: the sorted seeds shuffled by ``seed`` and cut by ``fractions``
    (normalised), so no seed's samples cross splits. Every split with a positive fraction gets at
    least one seed when there are enough seeds."""
    ids = sorted(set(seed_ids))
    order = [ids[i] for i in np.random.default_rng(seed).permutation(len(ids)).tolist()]
    names = [k for k in ("train", "val", "test") if fractions.get(k, 0) > 0]
    total = sum(fractions[k] for k in names)
    counts = [int(round(len(order) * fractions[k] / total)) for k in names]
    for i in range(len(names)):  # at least one each (taken from the largest) when possible
        if counts[i] == 0 and len(order) >= len(names):
            counts[i] = 1
            counts[counts.index(max(counts))] -= 1
    counts[0] += len(order) - sum(counts)
    out: dict[str, str] = {}
    start = 0
    for name, n in zip(names, counts, strict=True):
        out.update({sid: name for sid in order[start : start + n]})
        start += n
    return out


def _sample(
    sample: VerifiedSample, state: OrchestraState, action: Action, kind: str, index: int
) -> DecisionSample:
    return DecisionSample(
        sample_id=f"{sample.candidate_id}:{kind}:{index}",
        task_id=sample.candidate_id,
        seed_id=sample.seed_id,
        split=sample.split or "train",
        step_index=index,
        kind=kind,
        state=_stable(state),
        decision=action,
        completion=render_decision(action, "json"),
    )


def _stable(state: OrchestraState) -> dict[str, Any]:
    """The state without what was measured rather than decided (evidence and tool-call times), so
    the same data gives the same bytes; no rendering shows them."""
    data = state.model_dump(mode="json")
    for e in data["context"]:
        e["start_s"] = e["end_s"] = None
        for call in e["tool_calls"]:
            call["latency_s"] = 0.0
    return data


def cut_trajectory(sample: VerifiedSample, traj: Trajectory) -> list[DecisionSample]:
    """One sample per decision of a successful expert trajectory: the state just before it."""
    out = []
    for step in traj.steps:
        if step.decision is None or step.state is None:
            continue
        state = OrchestraState.model_validate(step.state)
        out.append(_sample(sample, state, step.decision, "expert", step.index))
    return out


def relabel_trajectory(
    sample: VerifiedSample, traj: Trajectory, agent: AgentParams, kind: str = "policy"
) -> tuple[list[DecisionSample], Counter[str]]:
    """One sample per state another policy reached in ``traj`` (the state before each of its
    decisions), labelled with the expert's decision there (DAgger); and why states were left out (the
    expert has no decision there, or its decision is not valid in that state)."""
    from orchestra.agent.decision import validate_decision
    from orchestra.agent.state import validation_context

    out: list[DecisionSample] = []
    skipped: Counter[str] = Counter()
    for step in traj.steps:
        if step.state is None:
            continue
        state = OrchestraState.model_validate(step.state)
        try:
            action = expert_decision(state, sample.task.solution_program or [], agent=agent)
        except ExpertError as e:
            skipped[f"no expert decision: {str(e)[:80]}"] += 1
            continue
        if validate_decision(action, validation_context(state)) is not None:
            skipped["the expert decision is not valid there"] += 1
            continue
        out.append(_sample(sample, state, action, kind, step.index))
    return out, skipped


def _rng(*parts: object) -> np.random.Generator:
    digest = hashlib.sha256("\0".join(str(p) for p in parts).encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


def _with(state: OrchestraState, evidence: list[Evidence]) -> OrchestraState:
    return state.model_copy(update={"context": evidence, "history": history_from_evidence(evidence)})


def _dependants(evidence: list[Evidence], eid: str) -> set[str]:
    out, grew = {eid}, True
    while grew:
        grew = False
        for e in evidence:
            if e.id not in out and out & set(e.depends_on):
                out.add(e.id)
                grew = True
    return out - {eid}


def _fail(state: OrchestraState, rng: np.random.Generator, status: str) -> OrchestraState | None:
    ev = list(state.context)
    goals = Counter(e.goal for e in ev if e.ok)
    readings = [  # a perception whose value no other evidence holds (not one of an escalated pair)
        e
        for e in ev
        if e.ok and goals[e.goal] == 1 and e.tools and e.tools[0].startswith(("image_", "audio_", "video_"))
    ]
    if not readings:
        return None
    bad = readings[int(rng.integers(len(readings)))]
    down = _dependants(ev, bad.id)
    why = "timed out" if status == "timeout" else f"{bad.tools[0]} failed: the tool could not read the file"
    new = []
    for e in ev:
        if e.id == bad.id:
            e = e.model_copy(
                update={"status": status, "value": None, "claim": "", "error": why, "confidence": None}
            )
        elif e.id in down:
            e = e.model_copy(
                update={"status": "skipped", "value": None, "claim": "", "error": f"{bad.id} did not finish"}
            )
        new.append(e)
    return _with(state, new)


def _shift(e: Evidence, offset: int) -> Evidence:
    def n(i: str) -> str:
        return f"E{int(i[1:]) + offset}"

    planned = e.planned_goal
    if planned is not None:
        planned = rename_refs(planned, {r.key: n(r.key) for r in find_refs(planned) if r.kind == "E"})
    return e.model_copy(
        update={"id": n(e.id), "depends_on": [n(d) for d in e.depends_on], "planned_goal": planned}
    )


def _renumbered(state: OrchestraState, rng: np.random.Generator) -> OrchestraState | None:
    if not state.context:
        return None
    offset = int(rng.integers(3, 20))
    return _with(state, [_shift(e, offset) for e in state.context])


def _useless(state: OrchestraState, rng: np.random.Generator) -> OrchestraState | None:
    a, b = (int(x) for x in rng.integers(2, 50, size=2))
    extra = Evidence(
        id="E1",
        goal=f"compute {a} * {b}",
        status="ok",
        value=a * b,
        claim=f"compute {a} * {b}: {a * b}",
        backend="code_expert",
        tools=["code_executor"],
        turn=0,
    )
    shifted = [_shift(e, 1).model_copy(update={"turn": e.turn + 1}) for e in state.context]
    return _with(state, [extra, *shifted]).model_copy(update={"turn": state.turn + 1})


def _partial(state: OrchestraState, rng: np.random.Generator) -> OrchestraState | None:
    if len(state.context) < 2:
        return None
    keep = int(rng.integers(1, len(state.context)))
    return _with(state, list(state.context[:keep]))


def _evidence_order(state: OrchestraState, rng: np.random.Generator) -> OrchestraState | None:
    if len(state.context) < 2:
        return None
    ev = [state.context[i] for i in rng.permutation(len(state.context)).tolist()]
    return _with(state, ev)


def _backend_order(state: OrchestraState, rng: np.random.Generator) -> OrchestraState | None:
    cards = [state.backends[i] for i in rng.permutation(len(state.backends)).tolist()]
    return state.model_copy(update={"backends": cards})


Perturb = Callable[[OrchestraState, np.random.Generator], OrchestraState | None]
OFF_PATH: dict[str, Perturb] = {
    "branch_failed": lambda s, r: _fail(s, r, "failed"),
    "branch_timed_out": lambda s, r: _fail(s, r, "timeout"),
    "useless_subtask": _useless,
    "renumbered": _renumbered,
    "partial_batch": _partial,
}
RENDERINGS: dict[str, Perturb] = {"evidence_order": _evidence_order, "backend_order": _backend_order}


def off_path_states(
    sample: VerifiedSample,
    traj: Trajectory,
    program: Sequence[SolutionStep],
    counts: Mapping[str, int],
    agent: AgentParams,
    seed: int,
) -> list[DecisionSample]:
    """Up to ``counts[kind]`` perturbed states per kind (from the trajectory's states after its
    first decision), each labelled by the stateless expert; kinds that do not apply are skipped."""
    states = [OrchestraState.model_validate(s.state) for s in traj.steps if s.state is not None]
    later = [s for s in states if s.context] or states
    out: list[DecisionSample] = []
    for kind, n in counts.items():
        perturb = {**OFF_PATH, **RENDERINGS}[kind]
        for k in range(n):
            rng = _rng(seed, sample.candidate_id, kind, k)
            pool = states if kind == "backend_order" else later
            base = pool[int(rng.integers(len(pool)))]
            state = perturb(base, rng)
            if state is None:
                continue
            try:
                action = expert_decision(state, program, agent=agent)
            except ExpertError:
                continue
            out.append(_sample(sample, state, action, kind, k))
    return out


def is_parallel_batch(action: Any) -> bool:
    """A delegate whose batch has two sub-tasks with no dependency between them."""
    if not isinstance(action, Delegate):
        return False
    roots = [s for s in action.subtasks if not (set(s.depends_on) & {t.id for t in action.subtasks})]
    return len(roots) >= 2
