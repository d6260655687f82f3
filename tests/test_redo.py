"""Redo lines: a re-plan that reruns a result and re-issues what depends on it, written in one line."""

from orchestra.agent.decision import ErrorKind, ParseError, parse_decision, render_decision
from orchestra.agent.memory import Evidence
from orchestra.agent.state import OrchestraState, ToolCard, validation_context
from orchestra.backends.base import BackendCard
from orchestra.config import Params
from orchestra.schemas import Delegate, SubTask
from orchestra.training.examples import PolicyView, canonical, redo_refs


def _state() -> OrchestraState:
    """abs((a + b) - c) planned in tree ids and run; b (E112) came back unsure from vision_fast."""

    def ev(
        sid: str, goal: str, value: int, planned: str | None = None, deps: tuple[str, ...] = (), **kw: object
    ) -> Evidence:
        tool = "code_executor" if goal.startswith("compute") else "image_count_objects"
        mods = [] if goal.startswith("compute") else ["M1"]
        return Evidence(id=sid, goal=goal, planned_goal=planned, status="ok", value=value, tools=[tool],
                        modalities=mods, depends_on=list(deps), **kw)  # type: ignore[arg-type]  # fmt: skip

    count = "count the shapes of colour {} and type any in #M1"
    context = [
        ev("E111", count.format("red"), 4, backend="vision_fast", confidence=1.0),
        ev("E112", count.format("blue"), 1, backend="vision_fast", confidence=0.3),
        ev("E11", "compute 4 + 1", 5, "compute #E111 + #E112", ("E111", "E112"), backend="code_expert"),
        ev("E12", count.format("green"), 2, backend="vision_fast", confidence=0.9),
        ev("E1", "compute abs(5 - 2)", 3, "compute abs(#E11 - #E12)", ("E11", "E12"), backend="code_expert"),
    ]
    card = BackendCard(name="x", kind="builtin", skills={"vision": 1.0}, price_per_call=0.0, latency_s=0.1)
    return OrchestraState(
        question="What is the gap between (the red shapes plus the blue ones) and the green ones?",
        modal_inputs=[{"id": "i", "path": "i.png", "type": "image"}],
        context=context,
        tools=[ToolCard(name="code_executor"), ToolCard(name="image_count_objects")],
        backends=[card.model_copy(update={"name": n}) for n in ("vision_fast", "vision_expert")]
        + [card.model_copy(update={"name": "code_expert", "skills": {"code": 1.0}})],
        unsure_below=0.6,
    )  # fmt: skip


def _sub(sid: str, goal: str, backend: str, deps: tuple[str, ...] = ()) -> SubTask:
    perceive = not goal.startswith("compute")
    return SubTask(
        id=sid, goal=goal, backend=backend, depends_on=list(deps),
        tools=["image_count_objects" if perceive else "code_executor"], modalities=["M1"] if perceive else [],
    )  # fmt: skip


EXPERT = Delegate(
    subtasks=[
        _sub("E2", "compute abs(#E21 - #E12)", "code_expert", ("E21", "E12")),
        _sub("E21", "compute #E111 + #E212", "code_expert", ("E111", "E212")),
        _sub("E212", "count the shapes of colour blue and type any in #M1", "vision_expert"),
    ]
)


def test_a_redo_line_reruns_the_result_and_reissues_the_path_above_it() -> None:
    state = _state()
    ctx = validation_context(state)
    got = parse_decision("redo E112 vision_expert", fmt="lines", context=ctx)
    assert got == EXPERT  # tree ids: the next root, then the path; the sibling E111 and E12 are kept
    # without the state it is a placeholder that parses (format) but is no decision yet
    bare = parse_decision("redo E112 vision_expert", fmt="lines")
    assert isinstance(bare, Delegate) and render_decision(bare, "lines") == "redo E112 vision_expert"
    # a redo of a leaf nothing depends on reruns it alone; '-' keeps its backend
    alone = parse_decision("redo E1 -", fmt="lines", context=ctx)
    assert isinstance(alone, Delegate) and [(s.id, s.goal, s.backend) for s in alone.subtasks] == [
        ("E2", "compute abs(#E11 - #E12)", "code_expert")
    ]
    # the unsure E112 is the state's first (only) mark: '?1' names it
    assert parse_decision("redo ?1 vision_expert", fmt="lines", context=ctx) == EXPERT
    for text, kind in [
        ("redo E9 vision_expert", ErrorKind.UNKNOWN_REFERENCE),  # no such result in the state
        ("redo ?2 vision_expert", ErrorKind.UNKNOWN_REFERENCE),  # no second mark
        ("redo E112", ErrorKind.BAD_FORMAT),
        ("redo E112 nobody", ErrorKind.UNKNOWN_BACKEND),  # the expanded delegate is validated
        ("redo E112 code_expert", ErrorKind.UNKNOWN_SKILL),  # no skill of vision_fast's: it would be refused
    ]:
        out = parse_decision(text, fmt="lines", context=ctx)
        assert isinstance(out, ParseError) and out.kind == kind, (text, out)


def test_the_policy_writes_a_path_rebuild_as_a_redo_line_and_anything_else_in_full() -> None:
    state = _state()
    view = PolicyView()
    assert view.target(EXPERT, state) == "redo ?1 vision_expert"
    assert redo_refs(EXPERT, state) == Delegate(
        subtasks=[SubTask(id="?1", goal="redo", backend="vision_expert")]
    )
    assert "E112 ok vision_fast: count the shapes of colour blue and type any in #M1 = 1 c0.30 ?1" in (
        view.messages(state, Params().agent)[1]["content"].splitlines()
    )
    # a result the marks do not name (E12 is sure) is named by its id
    green = "count the shapes of colour green and type any in #M1"
    e12 = Delegate(
        subtasks=[
            _sub("E2", "compute abs(#E11 - #E22)", "code_expert", ("E11", "E22")),
            _sub("E22", green, "vision_expert"),
        ]
    )
    assert view.target(e12, state) == "redo E12 vision_expert"
    # a failed result that can run on a stronger backend is marked too, after the unsure one
    failed = state.context[3].model_copy(update={"status": "failed", "value": None, "error": "no reading"})
    both = state.model_copy(update={"context": [*state.context[:3], failed, state.context[4]]})
    assert list(validation_context(both).marks.items()) == [("?1", "E112"), ("?2", "E12")]
    assert view.messages(both, Params().agent)[1]["content"].splitlines()[5].endswith("! no reading ?2")
    # a re-plan that is not exactly the rerun (another operator above it) stays in full
    times = _sub("E21", "compute #E111 * #E212", "code_expert", ("E111", "E212"))
    other = Delegate(subtasks=[EXPERT.subtasks[0], times, EXPERT.subtasks[2]])
    assert redo_refs(other, state) is other and view.target(other, state).startswith("E2 code_expert")
    # the target parses back to the expert's decision
    back = parse_decision(view.target(EXPERT, state), fmt="lines", context=validation_context(state))
    assert isinstance(back, Delegate) and canonical(back) == canonical(EXPERT)
