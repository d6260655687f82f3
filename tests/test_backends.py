"""Backends: cost/latency models, the registry, params, cost-aware selection, the tool cover, the seam."""

import asyncio
from collections.abc import Sequence
from typing import Any, ClassVar

import pytest

from orchestra.agent.scheduler import Limits, NodeInputs, run_graph
from orchestra.backends.base import (
    Backend,
    BackendError,
    CostModel,
    LatencyProfile,
    SubResult,
    SubTaskInput,
    ToolCall,
    registry_from_params,
)
from orchestra.backends.builtin import BuiltinExpert
from orchestra.backends.goals import GoalError, browse_goal, match_field
from orchestra.backends.registry import expert_specs
from orchestra.backends.selection import (
    infer_demand,
    match_score,
    rank_backends,
    select_backend,
    select_tools,
    tool_profiles,
)
from orchestra.config import SKILLS, AgentParams, BackendSpec, LatencySpec, PriceSpec, parse_params
from orchestra.errors import ConfigError, ToolError
from orchestra.schemas import SubTask
from orchestra.tools.base import Observation, Tool
from orchestra.tools.browse import PageBrowser
from orchestra.tools.pages import Page, PageStore


class Adder(Tool):
    """A real (tiny) tool: adds two numbers."""

    name: ClassVar[str] = "adder"
    description: ClassVar[str] = "add a and b"
    input_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
        "required": ["a", "b"],
    }
    skills: ClassVar[dict[str, float]] = {"code": 1.0}
    cost_per_call: ClassVar[float] = 0.001

    def run(self, **kwargs: Any) -> Observation:
        total = float(kwargs["a"]) + float(kwargs["b"])
        return Observation(tool=self.name, text=f"{total:g}", data={"value": total})


class Blank(Adder):
    name: ClassVar[str] = "blank"
    skills: ClassVar[dict[str, float]] = {}


class ToolBackend(Backend):
    """A backend whose sub-agent calls the first tool with numbers found in its dependencies."""

    async def run(self, task: SubTaskInput, tools: Sequence[Tool]) -> SubResult:
        args = {"a": sum(r.value for r in task.dependencies.values()), "b": len(task.subtask.goal)}
        obs = await asyncio.to_thread(tools[0], **args)
        return SubResult(
            ok=obs.ok,
            value=obs.data.get("value"),
            claim=obs.text,
            tool_calls=[ToolCall.from_observation(args, obs)],
            backend=self.name,
            input_tokens=40,
            output_tokens=8,
            cost=self.cost.price(40, 8),
            error=obs.error,
        )


def build(name: str, spec: BackendSpec) -> Backend:
    return ToolBackend(name, spec.skills, spec.price, spec.latency, spec.description)


def _spec(price: float, base_s: float, skills: dict[str, float]) -> BackendSpec:
    return BackendSpec(
        skills=skills,
        price=PriceSpec(per_call=price),
        latency=LatencySpec(base_s=base_s, per_1k_tokens_s=0.05),
    )


#: a fixed pool with different skill profiles (the shipped registry's numbers move with calibration)
SPECS = {
    "vision_expert": _spec(0.002, 0.5, {"ocr": 0.9, "counting": 0.85, "chart": 0.8, "reasoning": 0.3}),
    "audio_expert": _spec(0.002, 0.5, {"audio_signal": 0.9, "speech": 0.8, "reasoning": 0.2}),
    "video_expert": _spec(
        0.004, 1.0, {"video_temporal": 0.9, "counting": 0.6, "audio_signal": 0.6, "ocr": 0.4}
    ),
    "web_expert": _spec(0.001, 0.3, {"search": 0.9, "browse": 0.9, "reasoning": 0.4}),
    "code_expert": _spec(0.001, 0.2, {"code": 0.95, "reasoning": 0.7, "chart": 0.2}),
    "generalist": _spec(
        0.01, 2.0, {s: 0.5 for s in SKILLS} | {"search": 0.6, "browse": 0.6, "code": 0.6, "reasoning": 0.8}
    ),
}
POOL = registry_from_params(SPECS, {"builtin": build})


def test_cost_and_latency_models() -> None:
    cost = CostModel(per_call=0.01, per_1k_input_tokens=0.5, per_1k_output_tokens=2.0)
    assert cost.price(1000, 500) == pytest.approx(0.01 + 0.5 + 1.0)
    assert cost.estimate(1000) == pytest.approx(cost.price(750, 250))
    assert LatencyProfile(base_s=0.2, per_1k_tokens_s=0.1).estimate(2000) == pytest.approx(0.4)


def test_backend_base_checks_and_card() -> None:
    with pytest.raises(TypeError):
        Backend("x", {})  # type: ignore[abstract]
    with pytest.raises(BackendError, match=r"\[0, 1\]"):
        ToolBackend("x", {"ocr": 1.5})
    b = ToolBackend("v", {"ocr": 0.9, "chart": 0.0}, PriceSpec(per_call=0.5), LatencySpec(base_s=1.0))
    assert b.skill_names() == ["ocr"]
    card = b.card()
    assert card.skills == {"ocr": 0.9} and card.price_per_call == 0.5 and card.latency_s == 1.0


def test_registry() -> None:
    assert POOL.names() == sorted(SPECS) and len(POOL) == 6
    with pytest.raises(BackendError, match="already registered"):
        POOL.register(ToolBackend("vision_expert", {"ocr": 1.0}))
    with pytest.raises(BackendError, match="valid backends: audio_expert, code_expert"):
        POOL.get("ocr_god")
    assert "speech" in POOL.skills_by_backend()["audio_expert"]
    with pytest.raises(BackendError, match="no factory for kind 'builtin'; available: openai"):
        registry_from_params(SPECS, {"openai": build})


def test_agent_params() -> None:
    p = parse_params({"agent": {"max_parallel": 2, "backends": {"x": {"skills": {"ocr": 1.0}}}}})
    assert p.agent.max_parallel == 2 and list(p.agent.backends) == ["x"]
    with pytest.raises(BackendError, match="unknown skills"):  # checked against the registry's skills
        expert_specs(parse_params({"agent": {"backends": {"x": {"skills": {"telepathy": 1.0}}}}}).agent)
    with pytest.raises(ConfigError, match="agent.backends.x.provider"):
        parse_params(
            {"agent": {"backends": {"x": {"kind": "openai", "provider": "vllm", "skills": {"ocr": 1}}}}}
        )
    with pytest.raises(ConfigError, match="needs provider"):
        parse_params({"agent": {"backends": {"x": {"kind": "openai", "skills": {"ocr": 1}}}}})
    with pytest.raises(ConfigError, match="agent.max_parallel"):
        parse_params({"agent": {"max_parallel": 0}})
    limits = Limits.from_params(AgentParams(cost_budget=1.0, max_retries=3))
    assert limits.cost_budget == 1.0 and limits.max_retries == 3 and limits.max_parallel == 4


def test_match_score() -> None:
    assert match_score({"ocr": 1.0}, {"ocr": 1.0}) == pytest.approx(1.0)
    assert match_score({"ocr": 0.5}, {"ocr": 1.0}) == pytest.approx(0.5)
    assert match_score({"ocr": 1.0}, {"speech": 1.0}) == 0.0
    assert match_score({}, {"ocr": 1.0}) == 0.0 and match_score({"ocr": 1.0}, {}) == 0.0
    # a specialist beats a generalist with the same level on the demanded skill
    assert match_score({"ocr": 0.8}, {"ocr": 1}) > match_score({"ocr": 0.8, "speech": 0.8}, {"ocr": 1})


@pytest.mark.parametrize(
    ("demand", "expected"),
    [
        ({"ocr": 1.0}, "vision_expert"),
        ({"speech": 1.0, "audio_signal": 0.5}, "audio_expert"),
        ({"video_temporal": 1.0}, "video_expert"),
        ({"search": 1.0, "browse": 1.0}, "web_expert"),
        ({"code": 1.0}, "code_expert"),
        ({"ocr": 1.0, "speech": 1.0, "search": 1.0, "code": 1.0, "reasoning": 1.0}, "generalist"),
        ({}, "code_expert"),  # no demand: the cheapest (code/web tie on price; the name decides)
    ],
)
def test_select_backend_matches_demand(demand: dict[str, float], expected: str) -> None:
    assert select_backend(demand, list(POOL), cost_weight=0.1).name == expected


def test_cost_weight_trades_skill_for_price() -> None:
    backends = [
        ToolBackend("cheap", {"ocr": 0.6}, PriceSpec(per_call=0.001)),
        ToolBackend("dear", {"ocr": 1.0}, PriceSpec(per_call=0.1)),
    ]
    assert select_backend({"ocr": 1.0}, backends, cost_weight=0.0).name == "dear"
    assert select_backend({"ocr": 1.0}, backends, cost_weight=1.0).name == "cheap"
    ranked = rank_backends({"ocr": 1.0}, backends, cost_weight=0.5)
    assert ranked[0][1] == pytest.approx(0.6 - 0.5 * 0.001 / 0.1) and ranked[1][1] == pytest.approx(0.5)
    twins = [ToolBackend("b", {"ocr": 1.0}), ToolBackend("a", {"ocr": 1.0})]
    assert select_backend({"ocr": 1.0}, twins).name == "a"
    with pytest.raises(BackendError):
        select_backend({"ocr": 1.0}, [])
    with pytest.raises(BackendError, match=">= 0"):
        select_backend({"ocr": -1.0}, twins)


TOOLS = {
    "ocr": {"ocr": 1.0},
    "ocr_plus": {"ocr": 0.9, "chart": 0.3},
    "chart": {"chart": 1.0},
    "counter": {"counting": 0.8, "ocr": 0.2},
    "search": {"search": 1.0},
}


def test_select_tools_sparse_cover() -> None:
    assert select_tools({"ocr": 1.0}, TOOLS) == ["ocr"]
    # greedy: the broadest tool first (gain 1.2), then chart for the rest (0.7 - 0.5 * 0.3)
    assert select_tools({"ocr": 1.0, "chart": 1.0}, TOOLS) == ["ocr_plus", "chart"]
    # the redundancy penalty keeps a tool out that would re-cover OCR for 0.1 of new coverage
    assert select_tools({"ocr": 1.0, "chart": 0.3}, TOOLS, redundancy_penalty=0.5) == ["ocr_plus"]
    assert select_tools({"ocr": 1.0, "chart": 0.3}, TOOLS, redundancy_penalty=0.0) == ["ocr_plus", "counter"]
    # ties (gain 1.0 for counter, ocr, search) go to the name; max_tools caps the subset
    assert select_tools({"ocr": 1.0, "counting": 1.0, "search": 1.0}, TOOLS, max_tools=2) == [
        "counter",
        "search",
    ]
    assert select_tools({}, TOOLS) == [] and select_tools({"speech": 1.0}, TOOLS) == []
    assert select_tools({"ocr": 1.0}, {"b": {"ocr": 1.0}, "a": {"ocr": 1.0}}) == ["a"]


def test_tool_profiles_and_demand() -> None:
    tools = [Adder(), Blank()]
    assert tool_profiles(tools) == {"adder": {"code": 1.0}, "blank": {}}
    assert tool_profiles(tools, {"blank": {"reasoning": 0.5}})["blank"] == {"reasoning": 0.5}
    assert infer_demand("anything", ["image"], skill="chart") == {"chart": 1.0}
    with pytest.raises(BackendError, match="unknown skill"):
        infer_demand("x", skill="telepathy")
    d = infer_demand("How many beeps are there? Count the tones.", ["audio"])
    assert max(d, key=d.__getitem__) == "audio_signal" and d["counting"] > 0
    assert (
        select_backend(infer_demand("read the text on the sign", ["image"]), list(POOL)).name
        == "vision_expert"
    )
    assert infer_demand("", []) == {"reasoning": 1.0}


def test_backend_seam_runs_under_the_scheduler() -> None:
    """A Backend driven by run_graph through a runner adapter, with a real tool and dependencies."""
    backend = POOL.get("code_expert")

    async def runner(task: SubTask, inputs: NodeInputs) -> SubResult:
        sub = SubTaskInput(
            question="q",
            subtask=task,
            dependencies=inputs.dependencies,
        )
        return await backend.run(sub, [Adder()])

    nodes = [
        SubTask(id="E1", goal="abc"),
        SubTask(id="E2", goal="de"),
        SubTask(id="E3", goal="f", depends_on=["E1", "E2"]),
    ]
    ev = asyncio.run(run_graph(nodes, runner, Limits(max_parallel=2)))
    assert [e.value for e in ev] == [3.0, 2.0, 6.0]
    assert ev[2].tool_calls[0].args == {"a": 5.0, "b": 1} and ev[2].backend == "code_expert"
    assert ev[0].cost == pytest.approx(backend.cost.price(40, 8)) and ev[0].tool_cost == pytest.approx(0.001)


class Broken(Adder):
    """A tool that fails (ToolError) on a long goal and has a bug (a KeyError) on a one-letter goal."""

    name: ClassVar[str] = "broken"

    def run(self, **kwargs: Any) -> Observation:
        if kwargs["b"] > 1:
            raise ToolError("the service refused")
        data: dict[str, Any] = {}
        return Observation(tool=self.name, text=str(data["value"]))


def test_a_tool_bug_propagates_out_of_the_scheduler_but_a_tool_failure_is_evidence() -> None:
    backend = POOL.get("code_expert")

    async def runner(task: SubTask, inputs: NodeInputs) -> SubResult:
        sub = SubTaskInput(question="q", subtask=task, dependencies=inputs.dependencies)
        return await backend.run(sub, [Broken()])

    failed = asyncio.run(run_graph([SubTask(id="E1", goal="abc")], runner, Limits(max_retries=0)))
    assert failed[0].status == "failed" and "ToolError: the service refused" in (failed[0].error or "")
    with pytest.raises(KeyError, match="value"):  # the bug reaches the test, not a 'tool miss'
        asyncio.run(run_graph([SubTask(id="E1", goal="x")], runner, Limits(max_retries=0)))


def test_builtin_browse_reads_the_structured_facts() -> None:
    facts = "\n".join(f"Filler {i}: {i}" for i in range(40))
    pages = [
        Page(
            url="https://world.local/wiki/quillon",
            title="Quillon",
            text="Quillon\nprose",
            html="<table><tr><th>Population</th><td>12400</td></tr>"
            "<tr><th>Mayor</th><td>Ada Vorn</td></tr></table>",
        ),
        Page(url="https://world.local/wiki/oda", title="Oda", text=f"Oda\n\nFacts\n{facts}\nLength (km): 88"),
    ]
    browser = PageBrowser(PageStore(pages, "test"), max_chars=200)
    expert = BuiltinExpert("reader", {"browse": 1.0})

    def ask(url: str, key: str) -> SubResult:
        task = SubTaskInput(question="q", subtask=SubTask(id="E1", goal=browse_goal(url, key)), max_steps=2)
        return asyncio.run(expert.run(task, [browser]))

    pop = ask(pages[0].url, "population")
    assert pop.ok and pop.value == 12400 and pop.claim.endswith("lists Population: 12400")
    assert ask(pages[0].url, "mayor").value == "Ada Vorn"
    length = ask(pages[1].url, "length_km")  # past the first window: the facts are the whole page's
    assert length.ok and length.value == 88 and len(length.tool_calls) == 1
    miss = ask(pages[0].url, "altitude")
    assert not miss.ok and "no fact on the page clearly matches field 'altitude'" in (miss.error or "")
    assert "labels: Population, Mayor" in (miss.error or "")
    gone = ask("https://world.local/wiki/nowhere", "x")
    assert not gone.ok and "page_browser failed" in (gone.error or "")


def test_match_field_on_facts_and_on_text() -> None:
    facts = [{"label": "Preparation time (min)", "value": "35"}, {"label": "Origin", "value": "Vuga"}]
    assert match_field(facts, "prep_minutes") == ("Preparation time (min)", "35")
    assert match_field("X\n\nFacts\nOrigin: Vuga\nType: dish", "origin") == ("Origin", "Vuga")
    with pytest.raises(GoalError, match="has no 'Label: value' facts"):
        match_field([], "origin")
    with pytest.raises(GoalError, match="clearly matches"):
        match_field(facts + [{"label": "Origin town", "value": "Brenn"}], "place")


def test_a_video_value_is_as_sure_as_the_one_text_it_comes_from() -> None:
    """A final score read from a sure last scoreboard is sure though an earlier board was not; a
    text region left unread halves it (it might be the text asked for)."""
    from orchestra.backends.perceptions import PERCEPTIONS

    timeline = [
        {"t_start": 0.0, "t_end": 1.0, "text": "o-1", "confidence": 0.0},
        {"t_start": 1.0, "t_end": 2.5, "text": "0-2", "confidence": 0.2},
        {"t_start": 2.5, "t_end": 4.0, "text": "1-2", "confidence": 0.9},
        {"t_start": 1.0, "t_end": 3.0, "text": "VARENHOLM", "confidence": 0.7},
    ]
    data: dict[str, Any] = {"timeline": timeline, "confidence": 0.0, "confidence_why": {"unread_regions": 0}}
    score, caption = PERCEPTIONS["final_score_total"], PERCEPTIONS["caption_text"]
    assert score.extract(data, {}) == 3 and score.confidence(data, {}) == pytest.approx(0.9)
    assert caption.extract(data, {}) == "VARENHOLM" and caption.confidence(data, {}) == pytest.approx(0.7)
    unread = {**data, "confidence_why": {"unread_regions": 1}}
    assert score.confidence(unread, {}) == pytest.approx(0.45)
    bare = {
        "timeline": [{k: v for k, v in t.items() if k != "confidence"} for t in timeline],
        "confidence": 0.3,
    }
    assert score.confidence(bare, {}) == pytest.approx(0.3)  # items without their own: the tool's
