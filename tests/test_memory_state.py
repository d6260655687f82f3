"""Evidence memory, compression, sufficiency, accounting and the deterministic state rendering."""

import pytest

from orchestra.agent.accounting import Ledger
from orchestra.agent.decision import ErrorKind, ParseError, parse_decision
from orchestra.agent.memory import (
    Evidence,
    EvidenceError,
    EvidenceStore,
    compress,
    content_words,
    relevance,
    render_evidence,
    sufficiency,
)
from orchestra.agent.state import (
    ContextBudgetError,
    HistoryItem,
    OrchestraState,
    ToolCard,
    history_from_evidence,
    render_state,
    validation_context,
)
from orchestra.backends.base import BackendCard, ToolCall
from orchestra.config import PriceSpec
from orchestra.schemas import Delegate, ModalInput
from orchestra.text import count_tokens

Q = "What is the population of the city whose name is written on the sign in the image?"


def ev(id: str, goal: str, value: object = None, status: str = "ok", **kw: object) -> Evidence:
    return Evidence(id=id, goal=goal, value=value, status=status, **kw)  # type: ignore[arg-type]


EVIDENCE = [
    ev("E1", "read the sign in #M1", "Lindenfeld", claim="The sign reads Lindenfeld", turn=0),
    ev("E2", "count the beeps in #M2", 7, turn=0),
    ev("E3", "look up the weather", status="failed", error="no page", turn=1),
    ev(
        "E4", "find the population of Lindenfeld", 48213, claim="Population of Lindenfeld city: 48213", turn=1
    ),
]


def test_token_counter_and_words() -> None:
    assert count_tokens("Hello, world! 3.5 #E1") == 9
    assert count_tokens("") == 0
    assert content_words("What is the Population of the city?") == {"population", "city"}


def test_store_order_lookup_and_duplicates() -> None:
    store = EvidenceStore(EVIDENCE)
    assert store.ids() == ["E1", "E2", "E3", "E4"] and store.ok_ids() == ["E1", "E2", "E4"]
    assert store.values() == {"E1": "Lindenfeld", "E2": 7, "E4": 48213}
    assert store.get("E2").value == 7 and "E3" in store and store.next_id() == "E5"
    with pytest.raises(EvidenceError, match="already"):
        store.add(EVIDENCE[0])
    with pytest.raises(EvidenceError, match="known: E1, E2, E3, E4"):
        store.get("E9")


def test_render_evidence_lines() -> None:
    assert render_evidence(EVIDENCE[1]) == "#E2 [ok] count the beeps in #M2 -> value: 7"
    assert render_evidence(EVIDENCE[2]) == "#E3 [failed] look up the weather -> error: no page"
    assert "(value: Lindenfeld)" not in render_evidence(EVIDENCE[0])  # the claim already says it


def test_relevance_formula() -> None:
    # question words {population, city, name, written, sign, image}; E4 covers population and city
    wq = content_words(Q)
    we = content_words(render_evidence(EVIDENCE[3]))
    assert wq & we == {"population", "city"}
    expected = 0.6 * (2 / 6) ** 0.5 + 0.25 * 2 / 2 + 0.15 * 1
    assert relevance(Q, EVIDENCE[3], 1, needed={"E4"}) == pytest.approx(expected)
    assert relevance(Q, EVIDENCE[2], 1) == pytest.approx((0.6 * 0 + 0.25 * 2 / 2) / 2)
    assert relevance(Q, EVIDENCE[1], 3) == pytest.approx(0.25 * 1 / 4)


def test_compress_keeps_the_most_relevant_within_budget() -> None:
    costs = {e.id: count_tokens(render_evidence(e)) for e in EVIDENCE}
    assert compress(Q, EVIDENCE, 10_000) == EVIDENCE
    budget = costs["E4"] + costs["E1"]
    kept = compress(Q, EVIDENCE, budget)
    assert [e.id for e in kept] == ["E1", "E4"]  # original order, the beeps and the failure dropped
    assert sum(costs[e.id] for e in kept) <= budget
    assert compress(Q, EVIDENCE, budget) == kept  # deterministic
    assert [e.id for e in compress(Q, EVIDENCE, costs["E2"], needed={"E2"})] == ["E2"]
    assert compress(Q, EVIDENCE, 0) == []


def test_sufficiency_formula() -> None:
    assert sufficiency(Q, []) == 0.0
    assert sufficiency(Q, [EVIDENCE[2]]) == 0.0
    full = ev("E1", "the city name written on the sign in the image; population", 5)
    assert sufficiency(Q, [full]) == pytest.approx(1.0)
    assert sufficiency(Q, [full], pending=1) == pytest.approx(0.5)
    wq = content_words(Q)
    covered = set().union(*(content_words(render_evidence(e)) for e in EVIDENCE if e.ok))
    expected = 0.5 * len(wq & covered) / len(wq) + 0.5 * 3 / 4
    assert sufficiency(Q, EVIDENCE, pending={"E5"}) == pytest.approx(expected * 4 / 5)


BACKENDS = [
    BackendCard(
        name="vision_expert", kind="builtin", skills={"ocr": 0.9}, price_per_call=0.002, latency_s=0.5
    ),
    BackendCard(
        name="web_expert", kind="builtin", skills={"search": 0.9}, price_per_call=0.001, latency_s=0.3
    ),
]
TOOLS = [
    ToolCard(name="image_ocr", description="read text in an image", skills={"ocr": 1.0}),
    ToolCard(name="kb_search", description="search the knowledge base", skills={"search": 1.0}),
]


def state(**kw: object) -> OrchestraState:
    base = dict(
        question=Q,
        modal_inputs=[
            ModalInput(type="image", id="img_1", path="a.png"),
            ModalInput(type="audio", id="a", path="b.wav"),
        ],
        context=EVIDENCE,
        history=history_from_evidence(EVIDENCE)
        + [HistoryItem(turn=2, status="invalid", note="unknown_tool: telepathy")],
        backends=BACKENDS,
        tools=TOOLS,
        turn=3,
        max_turns=8,
    )
    return OrchestraState(**{**base, **kw})  # type: ignore[arg-type]


def test_render_state_is_deterministic_and_complete() -> None:
    msgs = render_state(state(), 2048)
    assert msgs == render_state(state(), 2048)
    assert [m["role"] for m in msgs] == ["system", "user"]
    system, user = msgs[0]["content"], msgs[1]["content"]
    for name in ("vision_expert", "web_expert", "image_ocr", "kb_search", '"kind": "delegate"', "#E3"):
        assert name in system
    assert "#M1 image (img_1)" in user and "#M2 audio (a)" in user and Q in user
    assert "#E4 [ok] find the population of Lindenfeld" in user
    assert "turn 2: invalid decision (unknown_tool: telepathy)" in user and "Turn 4 of 8" in user
    maestro = render_state(state(), 2048, fmt="maestro")[0]["content"]
    assert "<search> Model@@Skill: Query </search>" in maestro and "image_ocr" not in maestro


FIXED = 466  # tokens of the rendered state below without evidence or history (checked in the test)


@pytest.mark.parametrize("extra", [0, 15, 40, 100, 400, 1600])
def test_render_state_fits_the_budget(extra: int) -> None:
    big = EVIDENCE + [ev(f"E{i}", f"irrelevant chatter number {i} " * 5, i, turn=2) for i in range(5, 40)]
    st = state(context=big, history=history_from_evidence(big))
    assert (
        sum(count_tokens(m["content"]) for m in render_state(state(context=[], history=[]), 10_000)) == FIXED
    )
    msgs = render_state(st, FIXED + extra)
    assert sum(count_tokens(m["content"]) for m in msgs) <= FIXED + extra
    if extra >= 40:
        assert "Lindenfeld" in msgs[1]["content"]  # the relevant evidence survives compression
    if extra >= 400:
        assert "turn 2: E39 [ok]" in msgs[1]["content"]  # so does the most recent history


def test_render_state_with_another_tokenizer_and_too_small_budget() -> None:
    def chars(text: str) -> int:
        return (len(text) + 3) // 4

    msgs = render_state(state(), 700, counter=chars)
    assert sum(chars(m["content"]) for m in msgs) <= 700
    with pytest.raises(ContextBudgetError, match="budget is 50"):
        render_state(state(), 50)


def test_validation_context_from_state() -> None:
    ctx = validation_context(state())
    assert ctx.n_modal == 2 and set(ctx.tools) == {"image_ocr", "kb_search"}
    text = '{"kind": "delegate", "subtasks": [{"id": "E5", "goal": "use #E3", "depends_on": ["E4"]}]}'
    out = parse_decision(text, context=ctx)
    assert isinstance(out, ParseError) and out.kind == ErrorKind.UNKNOWN_REFERENCE
    ok = parse_decision(text.replace("#E3", "#E4"), context=ctx)
    assert isinstance(ok, Delegate)


def test_ledger_per_policy_backend_and_tool() -> None:
    calls = [ToolCall(tool="image_ocr", cost=0.5, latency_s=0.1), ToolCall(tool="python", ok=False, cost=0.2)]
    e1 = dict(backend="vision_expert", input_tokens=100, output_tokens=20, cost=0.01, start_s=0.0, end_s=0.4)
    e3 = dict(backend="vision_expert", cost=0.02, start_s=0.1, end_s=0.2, attempts=2)
    evidence = [
        ev("E1", "g", 1, attempts=1, tool_calls=calls, **e1),
        ev("E2", "g", status="skipped"),
        ev("E3", "g", status="failed", **e3),
    ]
    ledger = Ledger(
        tool_prices={"image_ocr": PriceSpec(per_call=0.05)}, policy_price=PriceSpec(per_1k_input_tokens=1.0)
    )
    ledger.record_evidence(evidence)
    ledger.record_policy("tiny", input_tokens=500, output_tokens=30, latency_s=0.02)
    backend = ledger.by("backend")["vision_expert"]
    assert backend.calls == 2 and backend.failures == 1 and backend.cost == pytest.approx(0.03)
    assert backend.latency_s == pytest.approx(0.5) and backend.tokens == 120
    tools = ledger.by("tool")
    assert tools["image_ocr"].cost == pytest.approx(0.05) and tools["python"].failures == 1
    assert ledger.by("policy")["tiny"].cost == pytest.approx(0.5)
    total = ledger.total()
    assert total.calls == 5 and total.cost == pytest.approx(0.03 + 0.05 + 0.2 + 0.5)
    assert ledger.summary()["tool"]["python"]["cost"] == pytest.approx(0.2)
