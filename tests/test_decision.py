"""Decision formats: parsing with LM noise, every invalid-action class, validity checks, refs, rendering."""

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from orchestra.agent.decision import (
    DecisionError,
    ErrorKind,
    MaestroSearch,
    ParseError,
    ValidationContext,
    parse_decision,
    render_decision,
    search_to_delegate,
    validate_decision,
)
from orchestra.agent.refs import (
    Ref,
    ReferenceError_,
    find_refs,
    mark_question,
    missing_refs,
    question_spans,
    substitute,
    substitute_spans,
    vocabulary_kinds,
)
from orchestra.schemas import Delegate, Finish, SubTask
from orchestra.text import format_value

ROOT = Path(__file__).resolve().parents[1]

CTX = ValidationContext(
    backends={"vision_expert": {"ocr", "counting"}, "web_expert": {"search", "browse"}},
    tools={"image_ocr", "kb_search", "python"},
    n_modal=2,
    evidence_ids={"E1", "E2"},
    ok_ids={"E1"},  # E2 failed earlier
)


def st(id: str, goal: str = "do it", **kw: object) -> dict:
    return {"id": id, "goal": goal, **kw}


def delegate(*subtasks: dict) -> str:
    return json.dumps({"kind": "delegate", "subtasks": list(subtasks)})


# One policy output per error class; the table must cover every ErrorKind.
INVALID: dict[ErrorKind, tuple[str, str]] = {
    ErrorKind.BAD_JSON: ('{"kind": "finish", "answer": "4"', "json"),
    ErrorKind.BAD_FORMAT: ("I think the answer is 4.", "maestro"),
    ErrorKind.SCHEMA: ('{"kind": "delegate", "subtasks": [{"goal": "x"}]}', "json"),
    ErrorKind.EMPTY_BATCH: ('{"kind": "delegate", "subtasks": []}', "json"),
    ErrorKind.NO_ANSWER: ('{"kind": "finish", "answer": "  "}', "json"),
    ErrorKind.BAD_ID: (delegate(st("step1")), "json"),
    ErrorKind.DUPLICATE_ID: (delegate(st("E3"), st("E3")), "json"),
    ErrorKind.UNKNOWN_DEPENDENCY: (delegate(st("E3", depends_on=["E9"])), "json"),
    ErrorKind.CYCLE: (delegate(st("E3", depends_on=["E4"]), st("E4", depends_on=["E3"])), "json"),
    ErrorKind.UNKNOWN_BACKEND: (delegate(st("E3", backend="audio_wizard")), "json"),
    ErrorKind.UNKNOWN_TOOL: (delegate(st("E3", tools=["image_ocr", "telepathy"])), "json"),
    ErrorKind.UNKNOWN_SKILL: ("<search> vision_expert@@speech: what is said in #M1 </search>", "maestro"),
    ErrorKind.UNKNOWN_MODALITY: (delegate(st("E3", modalities=["M3"])), "json"),
    ErrorKind.UNKNOWN_REFERENCE: (delegate(st("E3", "look up #E7")), "json"),
    ErrorKind.UNDECLARED_DEPENDENCY: (delegate(st("E3", "read #M1"), st("E4", "look up #E3")), "json"),
}


def test_the_invalid_table_covers_every_error_kind() -> None:
    assert set(INVALID) == set(ErrorKind)


@pytest.mark.parametrize("kind", list(ErrorKind), ids=lambda k: k.value)
def test_each_invalid_action_class_is_classified(kind: ErrorKind) -> None:
    text, fmt = INVALID[kind]
    out = parse_decision(text, fmt=fmt, context=CTX)  # type: ignore[arg-type]
    assert isinstance(out, ParseError), out
    assert out.kind == kind, out
    assert out.reason and str(out).startswith(kind.value)
    # format errors are found without any state; validity errors need the state
    bare = parse_decision(text, fmt=fmt)  # type: ignore[arg-type]
    if kind.stage == "format":
        assert isinstance(bare, ParseError) and bare.kind == kind
    else:
        assert not isinstance(bare, ParseError)
        assert validate_decision(bare, CTX) == out


def test_error_reasons_name_the_culprit_and_valid_choices() -> None:
    out = parse_decision(INVALID[ErrorKind.UNKNOWN_BACKEND][0], context=CTX)
    assert "audio_wizard" in str(out) and "vision_expert" in str(out)
    out = parse_decision(INVALID[ErrorKind.CYCLE][0], context=CTX)
    assert "E3 -> E4 -> E3" in str(out)
    out = parse_decision(delegate(st("E3", "use #E2")), context=CTX)
    assert isinstance(out, ParseError) and out.kind == ErrorKind.UNKNOWN_REFERENCE and "failed" in out.reason
    out = parse_decision(delegate(st("E1")), context=CTX)
    assert isinstance(out, ParseError) and out.kind == ErrorKind.DUPLICATE_ID and "earlier" in out.reason


@pytest.mark.parametrize(
    "text",
    [
        '{"kind": "finish"}',
        '{"kind": "finish", "answer": null}',
        '{"kind": "finish", "answer": ""}',
    ],
)
def test_finish_without_answer(text: str) -> None:
    out = parse_decision(text)
    assert isinstance(out, ParseError) and out.kind == ErrorKind.NO_ANSWER
    assert parse_decision("<answer> </answer>", fmt="maestro").kind == ErrorKind.NO_ANSWER  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "text",
    ['{"subtasks": []}', '{"kind": "think"}', '{"kind": "finish", "answer": "4", "why": "x"}', "[1, 2]"],
)
def test_schema_and_json_errors(text: str) -> None:
    out = parse_decision(text)
    assert isinstance(out, ParseError) and out.kind in (ErrorKind.SCHEMA, ErrorKind.BAD_JSON)
    assert out.stage == "format"


def test_decisions_built_in_code_are_checked_too() -> None:
    bad_id = Delegate(subtasks=[SubTask(id="read", goal="g")])
    assert validate_decision(bad_id, CTX).kind == ErrorKind.BAD_ID  # type: ignore[union-attr]
    bad_mask = Delegate(subtasks=[SubTask(id="E3", goal="g", modalities=["image_1"])])
    assert validate_decision(bad_mask, CTX).kind == ErrorKind.SCHEMA  # type: ignore[union-attr]
    skill = Delegate(subtasks=[SubTask(id="E3", goal="g", skill="speech")])
    assert validate_decision(skill, CTX).kind == ErrorKind.UNKNOWN_SKILL  # type: ignore[union-attr]
    assert validate_decision(Delegate(subtasks=[SubTask(id="E3", goal="g", skill="browse")]), CTX) is None


def test_lm_noise_is_tolerated() -> None:
    body = delegate(st("E3", "read the sign in #M1", modalities=["#M1"], tools=["image_ocr"]))
    for text in (
        f"Let me think.\n```json\n{body}\n```\nDone.",
        f"```\n{body}\n```",
        f"Decision: {body} (end)",
        f"  {body}\n\n",
    ):
        out = parse_decision(text, context=CTX)
        assert isinstance(out, Delegate), out
        assert out.subtasks[0].modalities == ["M1"]
    assert parse_decision('{"kind": "finish", "answer": 42}') == Finish(answer="42")
    assert parse_decision('{"kind": "finish", "answer": 2.50}') == Finish(answer="2.5")
    # a bad brace before the real object is skipped
    assert parse_decision('set {x} then {"kind": "finish", "answer": "ok"}') == Finish(answer="ok")


def test_fuzzed_text_never_raises() -> None:
    rng = random.Random(0)
    alphabet = list('{}[]":,#EM123 abcdkindfinishdelegate<>/searchanswer@@\n`')
    for _ in range(500):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 60)))
        for fmt in ("json", "maestro"):
            out = parse_decision(text, fmt=fmt, context=CTX)  # type: ignore[arg-type]
            assert isinstance(out, ParseError | Delegate | Finish | MaestroSearch)


def test_valid_decisions_pass_and_same_batch_ancestors_may_be_referenced() -> None:
    text = delegate(
        st(
            "E3", "read the city name in #M1", modalities=["M1"], backend="vision_expert", tools=["image_ocr"]
        ),
        st("E4", "find the population of #E3", backend="web_expert", depends_on=["E3"]),
        st("E5", "multiply #E4 by #E1", tools=["python"], depends_on=["E4", "E1"]),
    )
    out = parse_decision(text, context=CTX)
    assert isinstance(out, Delegate) and [s.id for s in out.subtasks] == ["E3", "E4", "E5"]
    assert parse_decision('{"kind": "finish", "answer": "#E1"}', context=CTX) == Finish(answer="#E1")
    assert isinstance(parse_decision('{"kind": "finish", "answer": "#E4"}', context=CTX), ParseError)


def test_maestro_format() -> None:
    out = parse_decision("<think>hmm</think>\n<search> vision_expert@@ocr: read #M1 </search>", fmt="maestro")
    assert out == MaestroSearch(model="vision_expert", skill="ocr", query="read #M1")
    # a stop sequence can cut the closing tag
    assert parse_decision("<search>web_expert@@search: Paris", fmt="maestro", context=CTX) == MaestroSearch(
        model="web_expert", skill="search", query="Paris"
    )
    assert parse_decision("<answer>1,234</answer>", fmt="maestro") == Finish(answer="1,234")
    bad = parse_decision("<search> vision_expert ocr read </search>", fmt="maestro")
    assert isinstance(bad, ParseError) and bad.kind == ErrorKind.BAD_FORMAT
    unknown = parse_decision("<search> nobody@@ocr: x </search>", fmt="maestro", context=CTX)
    assert isinstance(unknown, ParseError) and unknown.kind == ErrorKind.UNKNOWN_BACKEND
    d = search_to_delegate(out, "E3", ["M1"])  # type: ignore[arg-type]
    assert d.subtasks[0].backend == "vision_expert" and d.subtasks[0].skill == "ocr"
    assert render_decision(d, "maestro") == "<search> vision_expert@@ocr: read #M1 </search>"


ROUND_TRIP = [
    Finish(answer="#E4"),
    Finish(answer="Ünïcode “quotes” 3.5"),
    Delegate(
        subtasks=[
            SubTask(id="E1", goal="count the red shapes in #M1", modalities=["M1"], tools=["image_count"]),
            SubTask(id="E2", goal="decode the tones in #M2", modalities=["M2"], backend="audio_expert"),
            SubTask(id="E10", goal="#E1 * #E2", tools=["python"], skill="code", depends_on=["E1", "E2"]),
        ]
    ),
]


@pytest.mark.parametrize("action", ROUND_TRIP, ids=lambda a: a.kind)
def test_render_is_canonical_and_round_trips(action: Delegate | Finish) -> None:
    text = render_decision(action)
    assert text == render_decision(parse_decision(text))  # type: ignore[arg-type]
    assert parse_decision(text) == action
    assert "\n" not in text and json.loads(text)["kind"] == action.kind


def test_render_key_order_and_omitted_fields() -> None:
    text = render_decision(Delegate(subtasks=[SubTask(id="E1", goal="g", depends_on=[])]))
    expected = (
        '{"kind": "delegate", "subtasks": [{"id": "E1", "goal": "g", "modalities": [], "tools": [], '
        '"depends_on": []}]}'
    )
    assert text == expected
    assert render_decision(Finish(answer="x"), "maestro") == "<answer>x</answer>"
    with pytest.raises(DecisionError):
        render_decision(ROUND_TRIP[2], "maestro")
    with pytest.raises(DecisionError):
        render_decision(MaestroSearch(model="m", skill="ocr", query="q"), "json")


def test_refs_find_check_substitute() -> None:
    text = "compare #E1 with #E10 and #E1 in #M2; not #E0, #Ex or #E1a"
    assert find_refs(text) == [Ref("E", 1), Ref("E", 10), Ref("M", 2)]
    assert missing_refs(text, n_modal=1, evidence_ids={"E1"}, later_ids={"E10"}) == [Ref("M", 2)]
    assert substitute("#E1 + #E10 in #M2", {"E1": 3, "E10": 2.50, "M2": "img_2"}) == "3 + 2.5 in img_2"
    assert substitute("len(#E1) + #E2", {"E1": "Paris", "E2": 4.0}, code=True) == "len('Paris') + 4"
    assert substitute("#E1", {"E1": [1, 2.0, "a"]}) == "1, 2, a"
    assert substitute("#E1", {"E1": [1, "a"]}, code=True) == "[1, 'a']"
    with pytest.raises(ReferenceError_, match="#E2 does not exist"):
        substitute("#E2", {"E1": 1})
    with pytest.raises(ReferenceError_, match="no value"):
        substitute("#E1", {"E1": None})
    assert format_value(True) == "true" and format_value(1e20) == "1e+20" and format_value(0.1 + 0.2) == "0.3"


def test_decision_module_imports_on_its_own() -> None:
    code = (
        "import sys, orchestra.agent.decision as d\n"
        "heavy = [m for m in ('torch', 'transformers', 'orchestra.backends.base', 'orchestra.tools.base') "
        "if m in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == ""


def test_question_spans_are_keyed_by_kind_in_order() -> None:
    q = 'Count the yellow squares, then "The Red Fox" and Setesas Vol in the chart for 2015; Morse too.'
    vocab = vocabulary_kinds({"colour": ["red", "yellow"], "color": ["red", "yellow"], "shape": ["square"]})
    assert vocab == {"red": "C", "yellow": "C", "square": "S"}
    assert question_spans(q, vocab) == {
        "C1": "yellow", "S1": "square", "N1": "The Red Fox", "N2": "Setesas Vol", "D1": "2015", "N3": "Morse"
    }  # fmt: skip
    marked = mark_question(q, vocab)
    assert marked.startswith('Count the yellow #C1 squares #S1, then "The Red Fox" #N1 and Setesas Vol #N2')
    assert "2015 #D1; Morse #N3 too." in marked  # a capital after ';' opens no sentence
    assert "N3" not in question_spans(q, vocab, plain={"morse"})  # a word of the goal grammar is no name
    # each kind counts on its own, every occurrence: a name or a number before the second colour does
    # not shift its key, and a colour named again gets its own
    assert question_spans("Red squares, US 100 yellow ones. Red again", vocab) == {
        "C1": "red", "S1": "square", "N1": "US", "D1": "100", "C2": "yellow", "C3": "red"
    }  # fmt: skip
    assert question_spans("Compute it. Then Zegas", vocab) == {"N1": "Zegas"}  # sentence openers: no names
    assert vocabulary_kinds({"direction": ["up"], "mode": ["fast"]}) == {"up": "V", "fast": "V"}  # D, M taken
    assert substitute_spans("colour #C1 and type #S1 in #M1 of #E2", {"C1": "yellow", "S1": "square"}) == (
        "colour yellow and type square in #M1 of #E2"
    )
    with pytest.raises(ReferenceError_, match="#C3 names no span of the question"):
        substitute_spans("#C3", {"C1": "a", "C2": "b"})


def test_field_phrases_are_spans_where_the_question_names_a_field() -> None:
    phrases = {"birth year": "born", "population": "population", "home city": "home_city", "team": "team"}
    q = (
        "The gap between the birth year the wiki gives for the athlete's team and the population of the "
        "home city of the sports team whose name is in Morse, in US dollars, or the birth year of the team "
        "whose name is shown"
    )
    # after 'the' or a possessive, one span however many words; not in an entity's description ('the
    # sports team', 'the team whose name'); each occurrence its own key, the value the field's key
    assert question_spans(q, {}, (), phrases) == {
        "F1": "born", "F2": "team", "F3": "population", "F4": "home_city", "N1": "Morse", "N2": "US",
        "F5": "born",
    }  # fmt: skip
    marked = mark_question(q, {}, (), phrases)
    assert "the birth year #F1 the wiki gives for the athlete's team #F2 and the population #F3 of" in marked
    assert "the home city #F4 of the sports team whose" in marked and "of the team whose" in marked
    assert question_spans(q, {}, ()) == {"N1": "Morse", "N2": "US"}  # no field phrases: no field spans


def test_question_references_resolve_when_checked_in_a_state() -> None:
    ctx = ValidationContext(
        backends={"vision_expert": {"counting"}},
        tools={"image_count_objects"},
        n_modal=1,
        spans={"C1": "red"},
    )
    text = "E1 vision_expert image_count_objects M1 - count the shapes of colour #C1 and type any in #M1"
    out = parse_decision(text, fmt="lines", context=ctx)
    assert isinstance(out, Delegate) and out.subtasks[0].goal.startswith("count the shapes of colour red and")
    unresolved = parse_decision(text, fmt="lines")  # without a state the reference stays
    assert isinstance(unresolved, Delegate) and "#C1" in unresolved.subtasks[0].goal
    bad = parse_decision(text.replace("#C1", "#C2"), fmt="lines", context=ctx)
    assert isinstance(bad, ParseError) and bad.kind == ErrorKind.UNKNOWN_REFERENCE and "#C2" in bad.reason
    assert parse_decision("= #C1", fmt="lines", context=ctx) == Finish(answer="red")
