"""Rendering for the reader: the goal grammar in the verbose prompt, the compact style, one token budget."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_memory_state import state  # the shared example state

from orchestra.agent.policies import ScriptedPolicy
from orchestra.agent.runtime import Environment
from orchestra.agent.state import ContextBudgetError, render_state, system_prompt
from orchestra.agent.systems import evidence_of, run_task_sync
from orchestra.backends.base import BackendCard
from orchestra.backends.goals import GoalError, goal_phrases, parse_goal
from orchestra.config import AgentParams, ConfigError, ProviderSpec, parse_params
from orchestra.lm.clients import client_for
from orchestra.schemas import Delegate, SubTask, Task, read_tasks_json
from orchestra.text import count_tokens

FILL = {
    "<color>": "red",
    "<shape>": "circle",
    "<label>": "Fiba",
    "<object>": "ball",
    "<title>": "Varenholm",
    "<url>": "https://world.local/wiki/varenholm",
    "<field>": "opened",
    "<python expression>": "3 + 4",
    "#M<n>": "#M1",
}


def _filled(phrase: str) -> str:
    for k, v in FILL.items():
        phrase = phrase.replace(k, v)
    assert "<" not in phrase, phrase
    return phrase


def test_every_phrase_the_prompt_shows_is_one_the_experts_parse() -> None:
    phrases = goal_phrases()
    assert {"ocr", "counting", "chart", "audio_signal", "video_temporal", "search", "browse", "code"} <= set(
        phrases
    )
    for skill, ps in phrases.items():
        for p in ps:
            assert parse_goal(_filled(p)).skill == skill, p


def test_verbose_prompt_carries_the_grammar_of_the_pools_builtin_experts() -> None:
    cards = [
        BackendCard(
            name="vision_expert", kind="builtin", skills={"ocr": 0.9}, price_per_call=0.002, latency_s=0.5
        ),
        BackendCard(
            name="web_expert", kind="builtin", skills={"search": 0.9}, price_per_call=0.001, latency_s=0.3
        ),
    ]
    text = system_prompt(cards, [])
    for p in goal_phrases()["ocr"] + goal_phrases()["search"]:
        assert p in text
    assert "count the shapes" not in text  # no backend in this pool counts
    llm = [c.model_copy(update={"kind": "openai"}) for c in cards]
    assert "read the text in the image" not in system_prompt(llm, [])  # an LM backend takes any goal


def test_a_goal_outside_the_grammar_fails_naming_the_nearest_phrase(
    small_world: Path, world_env: Environment
) -> None:
    nearest = "nearest accepted phrase: 'read the chart value for the label <label> in #M<n>'"
    with pytest.raises(GoalError, match=nearest):
        parse_goal("read the chart for Fiba in #M1")
    task: Task = next(t for t in read_tasks_json(small_world / "tasks.json") if t.omni_modal_input)
    bad = Delegate(
        subtasks=[SubTask(id="E1", goal="please tell me what the audio says in #M1", modalities=["M1"])]
    )
    traj = run_task_sync(
        task, "orchestra", ScriptedPolicy([bad, '{"kind": "finish", "answer": "x"}']), world_env
    )
    (e1,) = evidence_of(traj)
    assert e1.status == "failed" and "nearest accepted phrase: '" in (e1.error or "")


def test_compact_style_is_short_complete_and_fits() -> None:
    verbose = render_state(state(), 4096)
    compact = render_state(state(), 4096, style="compact")
    assert compact == render_state(state(), 4096, style="compact")  # deterministic
    v = sum(count_tokens(m["content"]) for m in verbose)
    c = sum(count_tokens(m["content"]) for m in compact)
    assert c * 3 < v, (c, v)
    system, user = compact[0]["content"], compact[1]["content"]
    assert "vision_expert: ocr 0.9 $0.002 0.5s" in system and "tools: image_ocr kb_search" in system
    assert "orchestrator" not in system and "Reply" not in system  # no prose
    assert user.splitlines()[:2] == [f"Q {state().question}", "M1 image | M2 audio"]
    assert "E4 ok -: find the population of Lindenfeld = 48213" in user
    assert "E3 failed -: look up the weather ! no page" in user
    assert "x unknown_tool: telepathy" in user and user.endswith("T4/8")
    fixed = sum(
        count_tokens(m["content"]) for m in render_state(state(context=[], history=[]), 4096, style="compact")
    )
    small = render_state(state(), fixed + 40, style="compact")
    assert sum(count_tokens(m["content"]) for m in small) <= fixed + 40
    assert "Lindenfeld" in small[1]["content"]  # the most relevant evidence survives
    with pytest.raises(ContextBudgetError):
        render_state(state(), fixed - 1, style="compact")


class _Quarter(ScriptedPolicy):
    """A reader whose tokens are four characters and whose context is 900 tokens."""

    context_tokens = 900

    def count_tokens(self, text: str) -> int:
        return (len(text) + 3) // 4


def test_one_budget_counted_by_the_readers_tokenizer() -> None:
    agent = AgentParams(state_tokens=3072, decision_tokens=256, evidence_tokens=16)
    reader = _Quarter([])
    assert reader.state_budget(agent) == 900 - 256
    msgs = reader.render(state(), agent)
    assert sum(reader.count_tokens(m["content"]) for m in msgs) <= 644
    assert ScriptedPolicy([]).state_budget(agent) == 3072  # no known context: the knob alone
    evidence = [line for line in msgs[1]["content"].splitlines() if re.match(r"#E\d", line)]
    assert sum(reader.count_tokens(line) for line in evidence) <= 16  # the evidence share caps c_t


def test_decision_budget_reaches_the_clients_and_is_checked() -> None:
    spec = ProviderSpec(kind="openai", base_url="http://127.0.0.1:9/v1", model="m")
    assert client_for(spec, 256).max_tokens == 256  # type: ignore[attr-defined]
    assert client_for(spec).max_tokens == 512  # type: ignore[attr-defined]  # a sub-agent's turn
    own = spec.model_copy(update={"max_new_tokens": 96})
    assert client_for(own, 256).max_tokens == 96  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match="decision_tokens"):
        parse_params({"agent": {"decision_tokens": 1024}, "train": {"policy": {"max_length": 1024}}})
    with pytest.raises(ConfigError, match="max_context_tokens: unknown key"):
        parse_params({"decisions": {"max_context_tokens": 2048}})
