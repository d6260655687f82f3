"""The DA-GRPO rubric reward on hand-made decisions (both formats) in states like the expert's, and its
openai reward model against `orchestra serve --script`."""

from __future__ import annotations

import json
import socket
from itertools import islice
from pathlib import Path
from typing import Any

import pytest
from pydantic import TypeAdapter
from rapidfuzz import fuzz

from orchestra.agent.decision import Action, ParseError, parse_decision, render_decision
from orchestra.agent.memory import Evidence
from orchestra.agent.refs import REF_PATTERN
from orchestra.agent.serve import ScriptedResponder, start_server
from orchestra.agent.state import OrchestraState, ToolCard
from orchestra.answers import answers_equal
from orchestra.backends.base import BackendCard
from orchestra.config import Params, ProviderSpec, RubricWeights
from orchestra.data.llm import JsonProvider
from orchestra.errors import ConfigError, StageError
from orchestra.schemas import Delegate, Finish, MaestroSearch, ModalInput, SubTask
from orchestra.training.reward_model import LLMRubric, RubricReply, make_rubric, sees_answer
from orchestra.training.rewards import (
    RewardError,
    RubricScores,
    decision_reward,
    format_reward,
    rubric,
    tool_reward,
    validity_reward,
)

SAMPLES = Path(__file__).resolve().parents[1] / "data" / "decision_samples" / "samples.jsonl"
QUESTION = (
    "Calculate the absolute difference between (the absolute difference between the number in the "
    "video's caption and the number keyed in as DTMF tones in the audio) and the number of objects "
    "that appear after the video starts."
)
SKILLS = {
    "audio_expert": {"audio_signal": 1.0},
    "audio_fast": {"audio_signal": 0.755},
    "code_expert": {"code": 1.0},
    "video_expert": {"video_temporal": 1.0},
    "video_fast": {"video_temporal": 0.929},
    "web_expert": {"browse": 1.0, "search": 1.0},
}
TOOLS = (
    "audio_dtmf audio_morse code_executor image_ocr page_browser video_events video_sample_frames "
    "video_text web_search"
).split()


def fresh_state(context: list[Evidence] | None = None) -> OrchestraState:
    """The first state of the first decision sample: a video (M1) and an audio (M2), the builtin pool."""
    return OrchestraState(
        question=QUESTION,
        modal_inputs=[
            ModalInput(type="video", id="video_gdsbkcvdzxmg", path="videos/gdsbkcvdzxmg.mp4"),
            ModalInput(type="audio", id="audio_gjwvrhwhbjnf", path="audios/gjwvrhwhbjnf.wav"),
        ],
        context=context or [],
        backends=[
            BackendCard(name=n, kind="builtin", skills=s, price_per_call=0.001, latency_s=0.1)
            for n, s in SKILLS.items()
        ],
        tools=[ToolCard(name=t) for t in TOOLS],
        max_turns=8,
        threshold=0.8,
    )


def node(sid: str, backend: str, tools: str, mods: str, deps: str, goal: str) -> SubTask:
    def values(s: str) -> list[str]:
        return [] if s == "-" else s.split(",")

    return SubTask(
        id=sid,
        goal=goal,
        backend=backend,
        tools=values(tools),
        modalities=values(mods),
        depends_on=values(deps),
    )


# The expert's decision in the fresh state: two perception branches, two computations.
EXPERT = Delegate(
    subtasks=[
        node("E1", "video_fast", "video_text", "M1", "-", "read the caption number in #M1"),
        node("E2", "audio_expert", "audio_dtmf", "M2", "-", "decode the dtmf digits in #M2"),
        node("E3", "code_expert", "code_executor", "-", "E1,E2", "compute abs(#E1 - #E2)"),
        node("E4", "video_fast", "video_events", "M1", "-", "count the objects that appear in #M1"),
        node("E5", "code_expert", "code_executor", "-", "E3,E4", "compute abs(#E3 - #E4)"),
    ]
)
LINES = render_decision(EXPERT, "lines")
FIRST_WAVE = "\n".join(line for line in LINES.splitlines() if line.split()[0] in ("E1", "E2", "E4"))


def lines_without(*ids: str) -> str:
    return "\n".join(line for line in LINES.splitlines() if line.split()[0] not in ids)


def done(sid: str, value: Any, goal: str = "", status: str = "ok") -> Evidence:
    return Evidence(id=sid, goal=goal or f"goal of {sid}", status=status, value=value)  # type: ignore[arg-type]


# Every branch has run: the expert finishes with #E5.
FINISHED = fresh_state(
    [done("E1", 3477), done("E2", 70521), done("E3", 67044), done("E4", 1), done("E5", 67043)]
)


def scores(s: RubricScores) -> tuple[float, float, float, float]:
    return (s.format, s.validity, s.tools, s.decision)


# --- format and validity --------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["lines", "json"])
def test_the_expert_copied_scores_one_throughout(fmt: str) -> None:
    text = render_decision(EXPERT, fmt)  # type: ignore[arg-type]
    s = rubric(text, fresh_state(), EXPERT, fmt)  # type: ignore[arg-type]
    assert scores(s) == (1.0, 1.0, 1.0, 1.0) and s.reason == ""
    assert s.total(RubricWeights()) == 1.0


@pytest.mark.parametrize(
    ("text", "fmt"),
    [
        ('{"kind": "delegate", "subtasks": [{"id": "E1", "goal": "read #M1"}', "json"),  # unclosed
        ("I would first read the caption.", "json"),
        ("E1 video_fast video_text read the caption", "lines"),  # too few fields
        ("=   ", "lines"),
        (LINES, "json"),  # the right decision in the wrong format
    ],
)
def test_text_that_does_not_parse_scores_zero_throughout(text: str, fmt: str) -> None:
    assert format_reward(text, fmt) == 0.0  # type: ignore[arg-type]
    assert validity_reward(text, fresh_state(), fmt) == 0.0  # type: ignore[arg-type]
    s = rubric(text, fresh_state(), EXPERT, fmt)  # type: ignore[arg-type]
    assert scores(s) == (0.0, 0.0, 0.0, 0.0) and s.reason


CYCLE = LINES.replace("E1 video_fast video_text M1 -", "E1 video_fast video_text M1 E3")
INVALID = {
    "cycle": CYCLE,
    "unknown tool": LINES.replace("audio_dtmf", "audio_telepathy"),
    "unknown backend": LINES.replace("audio_expert", "audio_wizard"),
    "unknown skill": LINES.replace("E2 audio_expert", "E2 audio_expert@ocr"),
    "unknown modality": LINES.replace("M2 - decode", "M3 - decode"),
    "unknown reference": LINES.replace("abs(#E3 - #E4)", "abs(#E3 - #E9)"),
    "undeclared dependency": LINES.replace("code_executor - E3,E4", "code_executor - E3"),
    "reused id": LINES.replace("E1", "E9"),  # E9 already names evidence in the state below
}


@pytest.mark.parametrize("fmt", ["lines", "json"])
@pytest.mark.parametrize("case", sorted(INVALID))
def test_invalid_decisions_parse_but_score_validity_zero(case: str, fmt: str) -> None:
    state = fresh_state([done("E9", 5)]) if case == "reused id" else fresh_state()
    text = INVALID[case] if fmt == "lines" else render_decision(_parse(INVALID[case]), "json")
    assert format_reward(text, fmt) == 1.0  # type: ignore[arg-type]
    assert validity_reward(text, state, fmt) == 0.0  # type: ignore[arg-type]
    s = rubric(text, state, EXPERT, fmt)  # type: ignore[arg-type]
    assert scores(s) == (1.0, 0.0, 0.0, 0.0)
    assert s.reason.split(":")[0] == case.replace(" ", "_").replace("reused_id", "duplicate_id")


def test_invalid_actions_are_still_graded_by_the_reward_functions_themselves() -> None:
    """rubric gates tools and decision on validity; the functions grade what was parsed."""
    cyclic = EXPERT.model_copy(deep=True)
    cyclic.subtasks[0].depends_on.append("E3")
    assert tool_reward(cyclic, fresh_state(), EXPERT) == 1.0
    assert 0.9 < decision_reward(cyclic, fresh_state(), EXPERT) < 1.0  # E1 after E3: unneeded


@pytest.mark.parametrize("fmt", ["lines", "json"])
def test_valid_decisions_in_both_formats(fmt: str) -> None:
    first = Delegate(subtasks=[st for st in EXPERT.subtasks if st.id in ("E1", "E2", "E4")])
    for action in (first, EXPERT, Finish(answer="#E5")):
        state = FINISHED if isinstance(action, Finish) else fresh_state()
        text = render_decision(action, fmt)  # type: ignore[arg-type]
        assert format_reward(text, fmt) == validity_reward(text, state, fmt) == 1.0  # type: ignore[arg-type]


def test_a_finish_must_name_values_that_exist() -> None:
    failed = fresh_state([done("E1", 3477), done("E2", None, status="failed")])
    assert validity_reward("= #E1", failed, "lines") == 1.0
    assert validity_reward("= #E2", failed, "lines") == 0.0  # failed: no value
    assert validity_reward("= #E7", failed, "lines") == 0.0


# --- decision and tools ---------------------------------------------------------------------------


def renumber(text: str, offset: int) -> str:
    def shift(token: str, mark: str = "") -> str:
        return ",".join(f"{mark}E{int(t[1:]) + offset}" if t.startswith("E") else t for t in token.split(","))

    out = []
    for line in text.splitlines():
        sid, backend, tools, mods, deps, goal = line.split(None, 5)
        goal = REF_PATTERN.sub(
            lambda m: m.group(0) if m.group(1) == "M" else shift(m.group(0)[1:], "#"), goal
        )
        out.append(" ".join([shift(sid), backend, tools, mods, shift(deps), goal]))
    return "\n".join(out)


def test_a_renumbered_or_reordered_copy_is_the_same_decision() -> None:
    state = fresh_state()
    shifted = renumber(LINES, 10)
    assert shifted.splitlines()[4] == "E15 code_expert code_executor - E13,E14 compute abs(#E13 - #E14)"
    assert scores(rubric(shifted, state, EXPERT)) == (1.0, 1.0, 1.0, 1.0)
    reordered = "\n".join(reversed(LINES.splitlines()))
    assert scores(rubric(reordered, state, EXPERT)) == (1.0, 1.0, 1.0, 1.0)


def test_evidence_is_matched_by_value_not_by_id() -> None:
    """After retries three readings exist; the expert uses E6. A policy that builds on E4 (another
    value) loses credit; one that builds on E8, which read the same value as E6, does not."""
    state = fresh_state([done("E3", 67044), done("E4", 1), done("E6", 3), done("E8", 3)])
    goal = "compute abs(#E3 - #E6)"
    expert = Delegate(subtasks=[node("E9", "code_expert", "code_executor", "-", "E3,E6", goal)])
    stale = _parse("E9 code_expert code_executor - E3,E4 compute abs(#E3 - #E4)")
    same = _parse("E9 code_expert code_executor - E3,E8 compute abs(#E3 - #E8)")
    assert decision_reward(same, state, expert) == 1.0
    # tools 1, inputs 1/3 ({67044, 1} vs {67044, 3}), goal 0.6 * ratio, backend 1
    goal_part = 0.6 * fuzz.ratio("compute abs(67044 - 1)", "compute abs(67044 - 3)") / 100
    assert decision_reward(stale, state, expert) == pytest.approx((3 + 3 / 3 + 3 * goal_part + 1) / 10)


def _parse(text: str, fmt: str = "lines") -> Action:
    action = parse_decision(text, fmt=fmt)  # type: ignore[arg-type]
    assert not isinstance(action, ParseError), action
    return action


def test_a_sound_different_split_is_credited_but_less_than_the_expert() -> None:
    state = fresh_state()
    # The same work over two turns: the perception wave now, the computations next turn.
    s = rubric(FIRST_WAVE, state, EXPERT)
    assert scores(s) == (1.0, 1.0, pytest.approx(0.8), pytest.approx(0.75))  # recall 3/5, precision 1
    # One computation instead of two: a different, sound decomposition.
    merged = FIRST_WAVE + "\nE3 code_expert code_executor - E1,E2,E4 compute abs(abs(#E1 - #E2) - #E4)"
    m = rubric(merged, state, EXPERT)
    assert m.validity == 1.0 and 0.75 < m.decision < 0.9 and m.tools == pytest.approx(0.9)
    # An extra harmless node (a search nobody needs): precision 5/6.
    extra = LINES + '\nE6 web_expert web_search - - search the wiki for the page titled "caption"'
    e = rubric(extra, state, EXPERT)
    assert e.decision == pytest.approx(2 * (5 / 6) / (1 + 5 / 6))
    assert e.tools == pytest.approx(5 / 6)  # one of six listed tools is one no expert node lists
    # A later turn: the first wave ran; doing two of the three remaining nodes is still credited.
    partial = fresh_state([done("E1", 3477), done("E2", 70521)])
    rest = Delegate(subtasks=EXPERT.subtasks[2:])
    two = lines_without("E1", "E2", "E5")
    assert decision_reward(_parse(two), partial, rest) == pytest.approx(0.8)
    assert 0 < decision_reward(_parse(two), partial, rest) < decision_reward(rest, partial, rest) == 1.0


def test_serialising_independent_nodes_is_penalised() -> None:
    state = fresh_state()
    chained = LINES.replace("E4 video_fast video_events M1 -", "E4 video_fast video_events M1 E1")
    s = rubric(chained, state, EXPERT)
    # 4 needed dependencies present, 1 unneeded: dependency score 4/5, the decision 1 - 0.4 * 1/5
    assert s.validity == 1.0 and s.tools == 1.0 and s.decision == pytest.approx(0.92)
    # two independent readings, one made to wait for the other: dependency score 0
    two = Delegate(subtasks=[EXPERT.subtasks[0], EXPERT.subtasks[1]])
    waiting = lines_without("E3", "E4", "E5").replace(
        "E2 audio_expert audio_dtmf M2 -", "E2 audio_expert audio_dtmf M2 E1"
    )
    assert decision_reward(_parse(waiting), state, two) == pytest.approx(0.6)
    # a dependency that a reference needs, or that another parent already implies, costs nothing
    implied = LINES.replace("code_executor - E3,E4", "code_executor - E1,E3,E4")
    assert decision_reward(_parse(implied), state, EXPERT) == 1.0


def test_nodes_with_the_same_tools_and_inputs_are_told_apart_by_their_goals() -> None:
    expert = Delegate(
        subtasks=[
            node("E1", "video_fast", "video_events", "M1", "-", "count the objects that appear in #M1"),
            node("E2", "video_fast", "video_events", "M1", "-", "count the objects that leave #M1"),
            node("E3", "code_expert", "code_executor", "-", "E1,E2", "compute #E1 - #E2"),
        ]
    )
    state = fresh_state()
    swapped = "\n".join(
        [
            "E1 video_fast video_events M1 - count the objects that leave #M1",
            "E2 video_fast video_events M1 - count the objects that appear in #M1",
            "E3 code_expert code_executor - E1,E2 compute #E2 - #E1",
        ]
    )
    assert decision_reward(_parse(swapped), state, expert) == 1.0  # E1<->E2 paired by goal, E3 followed
    wrong = swapped.replace("compute #E2 - #E1", "compute #E1 - #E2")  # now the wrong subtraction
    assert 0.9 < decision_reward(_parse(wrong), state, expert) < 1.0


def test_backend_and_goal_wording_give_partial_credit() -> None:
    state = fresh_state()
    careful = LINES.replace("E1 video_fast", "E1 video_expert")  # same skill, another backend
    auto = LINES.replace("E1 video_fast", "E1 -")  # the runtime's choice
    wrong = LINES.replace("E1 video_fast", "E1 web_expert")  # no shared skill
    assert decision_reward(_parse(careful), state, EXPERT) == pytest.approx(1 - 0.05 / 5)
    assert decision_reward(_parse(auto), state, EXPERT) == pytest.approx(1 - 0.05 / 5)
    assert decision_reward(_parse(wrong), state, EXPERT) == pytest.approx(1 - 0.1 / 5)
    reworded = LINES.replace("read the caption number in #M1", "what number is in the caption of #M1")
    assert 0.9 < decision_reward(_parse(reworded), state, EXPERT) < 1.0


def test_tool_reward_covers_modalities_and_penalises_redundancy() -> None:
    state = fresh_state()
    wrong_tool = LINES.replace("video_fast video_text", "video_fast video_sample_frames")
    # multiset recall 4/5, per-modal-input recall (M1: 1/2, M2: 1) 3/4; one of five tools unneeded
    assert tool_reward(_parse(wrong_tool), state, EXPERT) == pytest.approx((0.8 + 0.75) / 2 * 0.8)
    duplicate = LINES + "\nE6 video_fast video_text M1 - read the caption number in #M1"
    assert tool_reward(_parse(duplicate), state, EXPERT) == pytest.approx(5 / 6)
    sprayed = LINES.replace(" video_text ", " video_text,video_sample_frames,image_ocr ")
    assert tool_reward(_parse(sprayed), state, EXPERT) == pytest.approx(1 - 2 / 7)
    assert tool_reward(_parse("= 7"), FINISHED, Finish(answer="#E5")) == 1.0
    assert (
        tool_reward(_parse("= 7"), state, EXPERT)
        == tool_reward(EXPERT, FINISHED, Finish(answer="#E5"))
        == 0.0
    )


# --- answers --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("= #E5", 1.0),
        ("= 67043", 1.0),  # the literal value #E5 resolves to
        ("=  67043.0 ", 1.0),
        ("= 67,043", 1.0),
        ("= abs(#E3 - #E4)", 0.0),  # not resolved to a number: not the answer
        ("= #E3", 0.0),
        ("= 67044", 0.0),
        ("= #E9", 0.0),  # names no value: invalid, and not the answer either
    ],
)
def test_finish_answers_are_compared_through_the_evidence(text: str, want: float) -> None:
    assert decision_reward(_parse(text), FINISHED, Finish(answer="#E5")) == want
    assert decision_reward(_parse(text), FINISHED, Finish(answer="67043")) == want


def test_text_answers_ignore_case_and_spacing() -> None:
    state = fresh_state([done("E1", "Mount  Erebus"), done("E2", [1, 2])])
    assert answers_equal(" mount erebus ", "Mount Erebus") and not answers_equal("Erebus", "Mount Erebus")
    assert decision_reward(Finish(answer="MOUNT EREBUS"), state, Finish(answer="#E1")) == 1.0
    assert decision_reward(Finish(answer="1, 2"), state, Finish(answer="#E2")) == 1.0
    assert decision_reward(Finish(answer="#E1"), state, Finish(answer="Mount Erebus")) == 1.0


def test_finishing_early_or_delegating_after_the_answer_scores_zero() -> None:
    assert scores(rubric("= 67043", fresh_state(), EXPERT)) == (1.0, 1.0, 0.0, 0.0)
    redo = renumber(FIRST_WAVE, 5)
    assert scores(rubric(redo, FINISHED, Finish(answer="#E5"))) == (1.0, 1.0, 0.0, 0.0)


def test_a_maestro_search_is_compared_as_a_one_node_delegate() -> None:
    state = fresh_state()
    expert = Delegate(subtasks=[node("E1", "audio_expert", "-", "-", "-", "decode the dtmf digits in #M2")])
    exact = "<search> audio_expert@@audio_signal: decode the dtmf digits in #M2 </search>"
    s = rubric(exact, state, expert, "maestro")
    assert scores(s) == (1.0, 1.0, 1.0, 1.0)
    assert rubric("<search> vision@@ocr: read #M1 </search>", state, expert, "maestro").reason.startswith(
        "unknown_backend"
    )
    assert isinstance(_parse(exact, "maestro"), MaestroSearch)


# --- errors ---------------------------------------------------------------------------------------


def test_an_invalid_expert_decision_raises() -> None:
    bad = Delegate(subtasks=[node("E1", "audio_wizard", "audio_dtmf", "M2", "-", "decode #M2")])
    for fn in (tool_reward, decision_reward):
        with pytest.raises(RewardError, match="unknown_backend"):
            fn(EXPERT, fresh_state(), bad)
    with pytest.raises(RewardError, match="unknown_reference"):
        rubric("= 1", FINISHED, Finish(answer="#E8"))


def test_rubric_scores_total_and_range() -> None:
    s = RubricScores(format=1.0, validity=1.0, tools=0.5, decision=0.25)
    assert s.total(RubricWeights()) == pytest.approx((1 + 1 + 0.5 + 2 * 0.25) / 5)
    assert s.total(RubricWeights(format=0, validity=0, tools=1, decision=0)) == 0.5
    with pytest.raises(ConfigError, match="sum to 0"):
        s.total(RubricWeights(format=0, validity=0, tools=0, decision=0))
    with pytest.raises(ValueError, match="decision = 1.5"):
        RubricScores(1.0, 1.0, 1.0, 1.5)
    with pytest.raises(ValueError, match="outside"):
        RubricScores(1.0, float("nan"), 1.0, 1.0)


# --- real decision samples ------------------------------------------------------------------------


@pytest.mark.skipif(not SAMPLES.exists(), reason="no data/decision_samples/samples.jsonl (run `dvc repro`)")
def test_real_samples_expert_copies_score_one_and_first_waves_less() -> None:
    adapter: TypeAdapter[Delegate | Finish] = TypeAdapter(Delegate | Finish)
    kinds: set[str] = set()
    with SAMPLES.open(encoding="utf-8") as f:
        for line in islice(f, 0, 400, 5):
            row = json.loads(line)
            state = OrchestraState.model_validate(row["state"])
            expert = adapter.validate_python(row["decision"])
            kinds.add(row["kind"])
            assert scores(rubric(row["completion"], state, expert, "json")) == (1.0, 1.0, 1.0, 1.0)
            lines = render_decision(expert, "lines")
            assert scores(rubric(lines, state, expert, "lines")) == (1.0, 1.0, 1.0, 1.0)
            if isinstance(expert, Delegate) and len(expert.subtasks) > 1:
                first = [
                    st for st in expert.subtasks if not set(st.depends_on) & {s.id for s in expert.subtasks}
                ]
                part = render_decision(Delegate(subtasks=first), "lines")
                if len(first) < len(expert.subtasks):
                    assert 0.0 < rubric(part, state, expert).decision < 1.0
    assert {"expert", "renumbered"} <= kinds


# --- the openai reward model ----------------------------------------------------------------------


def rubric_provider(url: str) -> JsonProvider:
    spec = ProviderSpec(kind="openai", base_url=url, model="scripted", max_retries=0, timeout_s=10)
    return JsonProvider(spec, "judge", "train.dagrpo.reward_provider")


def reply(**scores: float) -> dict[str, str]:
    return {"content": json.dumps(scores)}


def test_llm_rubric_on_orchestra_serve_reads_whole_levels_and_records_bad_replies(
    tmp_path: Path, serve_process: Any
) -> None:
    script = [
        reply(format=1, validity=1, tools=2, decision=3),
        {"content": "The decision looks fine to me."},
        reply(format=1, validity=1, tools=2, decision=4),  # out of range
        reply(format=1, validity=1, tools=2, decision=0.5),  # not a whole level
        {"content": '```json\n{"format": 1, "validity": 0, "tools": 0, "decision": 0}\n```'},
        reply(format=1, validity=1, tools=2, decision=3),  # the same decision: the same score
    ]
    path = tmp_path / "script.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in script))
    with serve_process(path, name="rubric") as (_, url):
        judge = LLMRubric(rubric_provider(url))
        got = [judge(FIRST_WAVE, fresh_state(), EXPERT, "lines") for _ in script]
    assert scores(got[0]) == (1.0, 1.0, 2 / 3, 1.0) and got[0].reason == ""
    assert scores(got[1]) == (0.0, 0.0, 0.0, 0.0)
    assert got[1].reason.startswith("reward model reply rejected: the reply is not JSON")
    assert "'The decision looks fine to me.'" in got[1].reason
    assert scores(got[2]) == (0.0, 0.0, 0.0, 0.0)
    assert (
        "does not match the RubricReply schema (decision: Input should be less than or equal to 3"
        in got[2].reason
    )
    assert scores(got[3]) == (0.0, 0.0, 0.0, 0.0) and "decision" in got[3].reason
    assert scores(got[4]) == (1.0, 0.0, 0.0, 0.0)
    assert got[5] == got[0]


def test_llm_rubric_sends_question_state_reference_answer_and_decision_in_one_call() -> None:
    responder = ScriptedResponder([reply(format=1, validity=1, tools=3, decision=3)] * 2)
    with start_server(responder) as srv:
        judge = LLMRubric(rubric_provider(srv.url))
        s = judge("= 67043", FINISHED, Finish(answer="#E5"), "lines")
        judge("= 67043", FINISHED, Finish(answer="#E5"), "lines", answer="67043")
    assert scores(s) == (1.0, 1.0, 1.0, 1.0)
    bare, told = responder.requests
    sent = json.loads(bare["messages"][-1]["content"])
    assert set(sent) == {"question", "state", "format", "format_rules", "reference", "decision"}
    assert sent["decision"] == "= 67043" and sent["format"] == "lines" and sent["question"] == QUESTION
    assert json.loads(sent["reference"]) == {"kind": "finish", "answer": "#E5"}
    assert QUESTION in sent["state"] and "#E5 [ok]" in sent["state"] and "video_fast" in sent["state"]
    assert json.loads(told["messages"][-1]["content"])["answer"] == "67043"
    task = bare["messages"][0]["content"]
    assert "whole levels" in task and "unlikely to lead to the correct answer" in task
    assert bare["response_format"]["json_schema"]["schema"] == RubricReply.model_json_schema()
    assert bare["temperature"] == 0


def test_llm_rubric_call_failures_stop_with_the_provider_named() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        gone = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    with pytest.raises(
        StageError, match=r"train.dagrpo.reward_provider 'judge' \(http://127.0.0.1:\d+/v1\) failed"
    ):
        LLMRubric(rubric_provider(gone))(LINES, fresh_state(), EXPERT)


def test_make_rubric_follows_the_reward_provider() -> None:
    assert make_rubric(Params()) is rubric
    llm = {"kind": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "m"}
    params = Params.model_validate(
        {
            "providers": {"builtin": {"kind": "builtin"}, "llm": llm},
            "train": {"dagrpo": {"reward_provider": "llm"}},
        }
    )
    judge = make_rubric(params)
    assert isinstance(judge, LLMRubric) and judge.provider.name == "llm"
    assert sees_answer(params) and not sees_answer(Params())  # the judge always sees the gold answer
    local = {"kind": "transformers", "model": "/models/x"}
    params = Params.model_validate(
        {
            "providers": {"builtin": {"kind": "builtin"}, "x": local},
            "train": {"dagrpo": {"reward_provider": "x"}},
        }
    )
    with pytest.raises(StageError, match="'x' is a 'transformers' provider"):
        make_rubric(params)


def test_question_references_are_resolved_before_the_rubric_compares() -> None:
    state = fresh_state().model_copy(update={"question": QUESTION + " Ask Fagosti."})  # one name: #N1
    ok = rubric(LINES.replace("count the objects", "count the #N1 objects"), state, EXPERT)
    assert (ok.format, ok.validity) == (1.0, 1.0) and 0 < ok.decision < 1
    beyond = rubric(LINES.replace("count the objects", "count the #N2 objects"), state, EXPERT)
    assert scores(beyond) == (1.0, 0.0, 0.0, 0.0) and "#N2" in beyond.reason
