"""A user's own seeds: an OmniGAIA-format file with questions, answers and media only (no program, no
truth, no knowledge base) goes through the lineage, an expert policy behind `orchestra serve` over real
loopback HTTP solving its seeds into reference solutions."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from orchestra.agent.decision import render_decision
from orchestra.agent.expert import expert_decision
from orchestra.agent.serve import ScriptedResponder, start_server
from orchestra.agent.state import OrchestraState
from orchestra.backends.pool import builtin_backends
from orchestra.config import AgentParams, Params
from orchestra.data.trajectories import check_decision_samples
from orchestra.data.verified import check_kept_with_suite, check_verified
from orchestra.errors import StageError
from orchestra.io import read_jsonl
from orchestra.pipeline.run import run_stage
from orchestra.schemas import (
    AnchorFact,
    DecisionSample,
    Delegate,
    PerceiveStep,
    ReferenceSolution,
    RewriteCandidate,
    Task,
    read_tasks_json,
    write_tasks_json,
)

#: the small world's seeds the builtin tools answer from their media alone (no wiki lookup)
OWN = ("w7-0001", "w7-0003", "w7-0004", "w7-0010", "w7-0013", "w7-0016", "w7-0018", "w7-0022")
#: the seed the scripted expert answers wrongly (set aside), and the one whose extractor reply is garbage
WRONG, GARBLED = "w7-0010", "w7-0018"


def own_file(world: Path, out: Path, ids: tuple[str, ...] = OWN) -> tuple[Path, dict[str, Task]]:
    """``ids`` of ``world`` as a user's file: id, question, answer and media, nothing else; returns the
    file and the world's tasks (with their programs: the test's knowledge, never the pipeline's)."""
    world_tasks = {str(t.id): t for t in read_tasks_json(world / "tasks.json") if str(t.id) in ids}
    bare = [
        Task(id=t.id, question=t.question, answer=t.answer, omni_modal_input=t.omni_modal_input)
        for t in world_tasks.values()
    ]
    out.mkdir(parents=True, exist_ok=True)
    for t in bare:
        for m in t.omni_modal_input:
            (out / "media" / m.path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(world / "media" / m.path, out / "media" / m.path)
    write_tasks_json(out / "tasks.json", bare)
    return out / "tasks.json", world_tasks


def expert_lines(task: Task, agent: AgentParams, answer: str | None = None) -> list[dict[str, Any]]:
    """What a good orchestrator says on ``task`` in the verbose state: the whole plan at turn 1 (the
    strongest expert per step), the finish at turn 2 (``answer``: a wrong literal instead)."""
    state = OrchestraState(
        question=task.question, modal_inputs=task.omni_modal_input, backends=builtin_backends(agent).cards()
    )
    plan = expert_decision(state, task.solution_program or [], agent=agent, routing="strongest")
    assert isinstance(plan, Delegate)
    finish = answer or f"#{plan.subtasks[-1].id}"
    asked = rf"(?s)You are the orchestrator\..*Question: {re.escape(task.question)}\n.*Turn "
    return [
        {"match": asked + "1 of", "content": render_decision(plan, "json")},
        {"match": asked + "2 of", "content": json.dumps({"kind": "finish", "answer": finish})},
    ]


def own_params(file: Path, url: str, **sections: Any) -> dict[str, Any]:
    llm = {"kind": "openai", "base_url": url, "model": "scripted", "max_retries": 0, "timeout_s": 20}
    data: dict[str, Any] = {
        "seed": {"source": "omnigaia_file", "path": str(file), "incoming": None},
        "providers": {"builtin": {"kind": "builtin"}, "llm": llm},
        "anchors": {"expert": "llm", "attempts": 1},
        "decisions": {"seed": 3},
    }
    for key, value in sections.items():
        data[key] = {**data.get(key, {}), **value}
    return data


@pytest.fixture(scope="module")
def own(small_world: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Task]]:
    return own_file(small_world, tmp_path_factory.mktemp("own") / "user")


def _write(root: Path, data: dict[str, Any]) -> Params:
    (root / "params.yaml").write_text(json.dumps(data))
    return Params.model_validate(data)


def test_no_expert_configured_fails_at_anchor_facts_naming_the_setting(
    own: tuple[Path, dict[str, Task]], tmp_path: Path
) -> None:
    file, _ = own
    data = own_params(file, "http://127.0.0.1:9/v1")
    data["anchors"] = {}
    params = _write(tmp_path, data)
    root = tmp_path / "data"
    run_stage("seed_tasks", params, root)
    assert all(not t.solution_program for t in read_tasks_json(root / "seed_tasks" / "tasks.json"))
    with pytest.raises(StageError, match=rf"anchor_facts produced no .*{len(OWN)} x .*set anchors\.expert|"
                       rf"{len(OWN)} x no solution program and anchors\.expert is not set"):  # fmt: skip
        run_stage("anchor_facts", params, root)


def test_an_expert_solves_program_less_seeds_into_reference_solutions(
    own: tuple[Path, dict[str, Task]], tmp_path: Path
) -> None:
    file, world = own
    agent = AgentParams()
    script: list[dict[str, Any]] = []
    for tid, task in world.items():
        script += expert_lines(task, agent, answer="7" if tid == WRONG else None)
    responder = ScriptedResponder(script)
    root = tmp_path / "data"
    with start_server(responder) as srv:
        params = _write(tmp_path, own_params(file, srv.url))
        for stage in ("seed_tasks", "anchor_facts", "rewrite_candidates", "verified_samples"):
            run_stage(stage, params, root)
        for stage in ("expert_trajectories", "decision_samples"):
            run_stage(stage, params, root)
    summary = json.loads((root / "anchor_facts" / "summary.json").read_text())
    assert summary["expert"]["solved"] == len(OWN) - 1 and summary["expert"]["set_aside"] == 1
    rejected = {
        r["task_id"]: r["reason"] for r in map(json.loads, (root / "anchor_facts" / "rejected.jsonl").open())
    }
    assert rejected[WRONG].startswith("expert did not solve it in 1 runs: run 1 answered '7'")
    solutions = {
        s.task_id: s for s in read_jsonl(root / "anchor_facts" / "solutions.jsonl", ReferenceSolution)
    }
    assert set(solutions) == set(OWN) - {WRONG}
    for tid, sol in solutions.items():  # the expert's trajectory is the world's program, value for value
        want = world[tid].solution_program or []
        assert [s.model_dump(exclude={"out"}) for s in sol.program] == [
            s.model_dump(exclude={"out"}) for s in want
        ], tid
    anchors = read_jsonl(root / "anchor_facts" / "anchors.jsonl", AnchorFact)
    assert {a.task_id for a in anchors} == set(solutions)
    assert all(a.checked_by for a in anchors)
    samples = read_jsonl(root / "decision_samples" / "samples.jsonl", DecisionSample)
    assert samples and {d.seed_id for d in samples} <= set(solutions)
    assert any(isinstance(s, PerceiveStep) for sol in solutions.values() for s in sol.program)


def _truth(world: Path) -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in map(json.loads, (world / "truth" / "media.jsonl").open())}


def extractor_lines(task: Task, truth: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The extractor's reply for ``task``: a statement per program step, and two media facts where the
    image shows other colours (one true, one miscounted); garbage for the GARBLED seed."""
    asked = rf"(?s)You extract the atomic facts.*{re.escape(json.dumps(task.question)[1:-1])}"
    if str(task.id) == GARBLED:
        return [{"match": asked, "content": "Sure! The facts are: the image is colourful."}]
    facts = [{"step": s.out, "statement": f"{s.out} is {s.value}."} for s in task.solution_program or []]
    media: list[dict[str, Any]] = []
    for k, m in enumerate(task.omni_modal_input, 1):
        rec = truth[m.id]["facts"]
        if m.type == "image" and rec.get("kind") == "shapes":
            for colour, shapes in sorted(rec["counts"].items())[:1]:
                n = sum(shapes.values())
                goal = f"count the shapes of colour {colour} and type any in #M{k}"
                media += [
                    {"goal": goal, "value": n, "statement": f"The image shows {n} {colour} shapes."},
                    {"goal": goal, "value": n + 5, "statement": f"The image shows {n + 5} {colour} shapes."},
                ]
    return [{"match": asked, "content": json.dumps({"facts": facts, "media_facts": media})}]


WRITTEN = {  # the openai rewriter's own candidates for the strategies that need pages
    "multi_hop_chaining": {
        "question": "What is twice the value the seed question asks for, read off the media?",
        "steps": [{"id": "n1", "op": "compute", "arg": "v3 * 2", "field": ""}],
    },
    "entity_obfuscation": {
        "question": "Which page names the place the media show?",
        "steps": [{"id": "n1", "op": "search", "arg": "Banimin", "field": ""}],
    },
}


@pytest.mark.slow
def test_a_program_less_file_goes_through_every_stage_with_scripted_models(
    own: tuple[Path, dict[str, Task]], small_world: Path, tmp_path: Path, tiny_train: dict[str, Any]
) -> None:
    """The acceptance path: expert, extractor, rewriter and judge are one scripted endpoint over real
    HTTP; the seeds reach decision_samples, a tiny SFT policy and benchmark_scores."""
    from conftest import TINY_EVAL

    file, world = own
    agent, truth = AgentParams(), _truth(small_world)
    verdict = {"consistent": True, "score": 0.9, "reason": "the program computes it"}
    base: list[dict[str, Any]] = [
        {"match": "You judge generated question-answering", "times": 0, "content": json.dumps(verdict)}
    ]
    for s, w in WRITTEN.items():
        base.append(
            {
                "match": rf'(?s)You write harder questions.*"strategy": "{s}"',
                "times": 0,
                "content": json.dumps(w),
            }
        )
    for tid, task in world.items():
        base += expert_lines(task, agent, answer="7" if tid == WRONG else None)
        base += extractor_lines(task, truth)
    root = tmp_path / "data"
    llm = {"inputs": ["image", "audio", "video"], "video_frames": 2}
    stages = {
        "rewrite": {"provider": "llm"},
        "verify": {"judge_provider": "llm"},
        "anchors": {"provider": "llm"},
    }
    data = own_params(file, "URL", **stages)
    data["train"] = tiny_train
    data["eval"] = {**TINY_EVAL, "rows": ["orchestra_oracle", "orchestra_sft"], "shards": 1}
    # the builtin grammar's drafts first (deterministic), so the rewriter's rephrasings can be scripted
    drafts = tmp_path / "drafts"
    with start_server(ScriptedResponder(list(base))) as srv:
        first = json.loads(json.dumps(data).replace('"URL"', json.dumps(srv.url)))
        first["providers"]["llm"].update(llm)
        first["rewrite"] = {}
        params = _write(tmp_path, first)
        for stage in ("seed_tasks", "anchor_facts", "rewrite_candidates"):
            run_stage(stage, params, drafts)
    rephrased = [
        {"match": rf"(?s)You rephrase questions.*{re.escape(json.dumps(c.task.question)[1:-1])}",
         "content": json.dumps({"question": f"{c.task.question} Give only the number."})}
        for c in read_jsonl(drafts / "rewrite_candidates" / "candidates.jsonl", RewriteCandidate)
    ]  # fmt: skip
    responder = ScriptedResponder(base + rephrased)
    with start_server(responder) as srv:
        data = json.loads(json.dumps(data).replace('"URL"', json.dumps(srv.url)))
        data["providers"]["llm"].update(llm)
        params = _write(tmp_path, data)
        for stage in ("seed_tasks", "anchor_facts", "rewrite_candidates", "verified_samples"):
            run_stage(stage, params, root)
        for stage in ("expert_trajectories", "decision_samples", "policy_sft", "benchmark_scores"):
            run_stage(stage, params, root)
    anchors = json.loads((root / "anchor_facts" / "summary.json").read_text())
    assert anchors["expert"]["solved"] == len(OWN) - 1  # the summary says how many the expert solved
    rejected = {
        r["task_id"]: r["reason"] for r in map(json.loads, (root / "anchor_facts" / "rejected.jsonl").open())
    }
    assert rejected[WRONG].startswith("expert did not solve it")  # ... and why the rest were set aside
    assert rejected[GARBLED].startswith("extractor reply rejected: the reply is not JSON")
    material = read_jsonl(root / "anchor_facts" / "material.jsonl", AnchorFact)
    assert material and all(m.stated_by == "llm" and m.checked_by for m in material)
    unrecovered = [json.loads(x) for x in (root / "anchor_facts" / "media_facts_set_aside.jsonl").open()]
    assert len(unrecovered) == len(material) and all("not recovered" in r["reason"] for r in unrecovered)
    extractor = [
        r for r in responder.requests if "You extract the atomic facts" in r["messages"][0]["content"]
    ]
    assert extractor and all(isinstance(r["messages"][1]["content"], list) for r in extractor)  # media sent
    cands = json.loads((root / "rewrite_candidates" / "summary.json").read_text())
    reasons = [json.loads(x)["reason"] for x in (root / "rewrite_candidates" / "rejected.jsonl").open()]
    assert cands["cells"].get("multi_hop_chaining/Medium", 0) > 0  # written by the model, run by the stage
    assert reasons and all(r.startswith("rewriter candidate rejected: search 'Banimin'") for r in reasons)
    verified = json.loads((root / "verified_samples" / "summary.json").read_text())
    assert verified["rows"] > 0 and verified["by_split"].get("test", 0) > 0
    samples = read_jsonl(root / "decision_samples" / "samples.jsonl", DecisionSample)
    assert {d.split for d in samples} >= {"train"}
    for check in (check_verified(root), check_kept_with_suite(root, params), check_decision_samples(root)):
        assert check[0], check[1]  # the blocking asset checks hold on a user's data too
    assert (root / "policy_sft" / "model" / "model.safetensors").is_file()
    scores = json.loads((root / "benchmark_scores" / "scores.json").read_text())
    assert scores["orchestra_oracle"]["accuracy"]["em"]["mean"] == 1.0 and "orchestra_sft" in scores


def test_pages_beside_a_file_are_copied_and_read_as_the_worlds_entities(
    own: tuple[Path, dict[str, Task]], small_world: Path, tmp_path: Path
) -> None:
    """kb/pages.jsonl beside a user's file comes along, and the builtin rewriter reads the entities
    the pages describe: the world's own knowledge base, rebuilt from the pages alone."""
    from orchestra.data.candidates import knowledge_base
    from orchestra.world.replay import load_truth

    file, _ = own
    user = tmp_path / "user"
    shutil.copytree(file.parent, user)
    shutil.copytree(small_world / "kb", user / "kb")
    params = _write(tmp_path, own_params(user / "tasks.json", "http://127.0.0.1:9/v1"))
    run_stage("seed_tasks", params, tmp_path / "data")
    seeds = tmp_path / "data" / "seed_tasks"
    assert (seeds / "kb" / "pages.jsonl").read_bytes() == (small_world / "kb" / "pages.jsonl").read_bytes()
    assert not (seeds / "truth").exists()
    rebuilt, truth = knowledge_base(seeds), load_truth(small_world).kb
    assert rebuilt is not None and len(rebuilt.entities) == len(truth.entities)

    def view(kb: Any, e: Any) -> tuple[Any, ...]:
        return e.name, e.type, e.category, e.attributes, {k: kb.by_id[v].name for k, v in e.relations.items()}

    assert sorted(view(rebuilt, e) for e in rebuilt.entities) == sorted(
        view(truth, e) for e in truth.entities
    )
