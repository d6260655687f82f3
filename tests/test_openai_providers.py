"""The openai extractor, rewriter and judge against `orchestra serve --script` over real loopback HTTP:
good replies used, malformed ones set aside with their reason, failed calls stopping the stage."""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path
from typing import Any

import pytest
from rapidfuzz import fuzz

from orchestra.agent.serve import ScriptedResponder, start_server
from orchestra.config import Params, ProviderSpec
from orchestra.data.anchors import build_anchor_facts
from orchestra.data.candidates import build_rewrite_candidates
from orchestra.data.llm import ExtractorReply, JsonProvider, rephrase_candidates, state_facts
from orchestra.data.verify import verify_report
from orchestra.data.verify_bypass import PageReader
from orchestra.data.verify_judge import LLMJudge, field_fact, make_judge
from orchestra.errors import StageError
from orchestra.io import read_jsonl
from orchestra.lm.chat import LMError
from orchestra.schemas import (
    AnchorFact,
    BrowseStep,
    RewriteCandidate,
    SearchStep,
    Task,
    read_tasks_json,
    write_tasks_json,
)
from orchestra.text import format_value
from orchestra.tools.base import ToolRegistry

SEEDS = 4  # the trimmed world the stage tests run on


def llm_params(url: str, retries: int = 0, **stages: Any) -> Params:
    """Params whose provider ``llm`` is the endpoint at ``url``; ``stages`` name it (or not)."""
    llm = {"kind": "openai", "base_url": url, "model": "scripted", "max_retries": retries, "timeout_s": 10}
    return Params.model_validate({"providers": {"builtin": {"kind": "builtin"}, "llm": llm}, **stages})


def provider(url: str, what: str = "verify.judge_provider", retries: int = 0) -> JsonProvider:
    spec = ProviderSpec(kind="openai", base_url=url, model="scripted", max_retries=retries, timeout_s=10)
    return JsonProvider(spec, "llm", what)


def content(obj: Any) -> dict[str, str]:
    return {"content": json.dumps(obj)}


def item(request: dict[str, Any]) -> dict[str, Any]:
    """The JSON item a request's user message carries."""
    return json.loads(request["messages"][-1]["content"])


def keys(obj: Any) -> set[str]:
    """Every key of every object in a JSON value."""
    if isinstance(obj, dict):
        return set(obj) | {k for v in obj.values() for k in keys(v)}
    if isinstance(obj, list):
        return {k for v in obj for k in keys(v)}
    return set()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def few(small_world: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the small world's seed_tasks with only its first SEEDS tasks (fast stages)."""
    out = tmp_path_factory.mktemp("few") / "seed_tasks"
    shutil.copytree(small_world, out)
    tasks = read_tasks_json(out / "tasks.json")[:SEEDS]
    assert all(1 <= len(t.solution_program or []) <= 8 for t in tasks)
    write_tasks_json(out / "tasks.json", tasks)
    return out


def data_root(few: Path, tmp: Path) -> Path:
    (tmp / "seed_tasks").symlink_to(few)
    return tmp


# --- the extractor -------------------------------------------------------------------------------------


def _facts(task: Task, extra: list[dict[str, str]] | None = None) -> dict[str, Any]:
    steps = task.solution_program or []
    return {
        "facts": [{"step": s.out, "statement": f"LLM: {s.out} is {s.value}."} for s in steps] + (extra or []),
        "media_facts": [],
    }


def test_extractor_states_facts_the_tools_still_check(few: Path, tmp_path: Path) -> None:
    tasks = read_tasks_json(few / "tasks.json")
    fenced = "```json\n" + json.dumps(_facts(tasks[3])) + "\n```"
    script = [
        content(_facts(tasks[0])),
        {"content": "sure! here you go"},
        content(_facts(tasks[2], [{"step": "v9", "statement": "an invented step"}])),
        {"content": fenced},
    ]
    responder = ScriptedResponder(script)
    with start_server(responder) as srv:
        summary = build_anchor_facts(
            llm_params(srv.url, anchors={"provider": "llm"}), data_root(few, tmp_path)
        )
    out = tmp_path / "anchor_facts"
    anchors = read_jsonl(out / "anchors.jsonl", AnchorFact)
    assert {a.task_id for a in anchors} == {str(tasks[0].id), str(tasks[3].id)}
    for a in anchors:  # the model's statement, recorded as the provider's; the tools still recovered it
        task = next(t for t in tasks if str(t.id) == a.task_id)
        step = next(s for s in task.solution_program or [] if s.out == a.step)
        assert a.text == f"LLM: {a.step} is {step.value}." and a.stated_by == "llm"
        assert a.checked_by and a.value == step.value
    assert "stated_by" not in (out / "material.jsonl").read_text()  # material keeps the builtin text
    rejected = {
        r["task_id"]: r["reason"] for r in map(json.loads, (out / "rejected.jsonl").read_text().splitlines())
    }
    bad_json, bad_step = rejected[str(tasks[1].id)], rejected[str(tasks[2].id)]
    assert (
        bad_json.startswith("extractor reply rejected: the reply is not JSON")
        and "'sure! here you go'" in bad_json
    )
    assert (
        bad_step.startswith("extractor reply rejected:")
        and "'v9', which is not a step of the program" in bad_step
    )
    assert summary["rejected_reasons"] == {"extractor reply rejected": 2}
    # one request per seed, in task order, each asking for the schema in both the prompt and response_format
    assert [item(r)["question"] for r in responder.requests] == [t.question for t in tasks]
    first = responder.requests[0]
    schema = ExtractorReply.model_json_schema()
    assert first["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "ExtractorReply", "schema": schema, "strict": True},
    }
    assert json.dumps(schema, sort_keys=True) in first["messages"][0]["content"] and first["temperature"] == 0
    sent = item(first)
    assert sent["answer"] == tasks[0].answer
    assert sent["modal_inputs"] == [
        {"ref": f"#M{k}", "id": m.id, "type": m.type} for k, m in enumerate(tasks[0].omni_modal_input, 1)
    ]
    program = tasks[0].solution_program or []
    assert [(s["out"], s["op"], s["value"]) for s in sent["steps"]] == [
        (s.out, s.op, s.value) for s in program
    ]
    assert all(s["arguments"] and "out" not in s["arguments"] for s in sent["steps"])


def test_extractor_replies_missing_twice_or_off_schema_are_rejected(few: Path) -> None:
    tasks = read_tasks_json(few / "tasks.json")[:3]
    f0, f1 = _facts(tasks[0]), _facts(tasks[1])
    script = [
        {"content": json.dumps({"facts": f0["facts"][1:], "media_facts": []})},  # the first step left out
        {"content": json.dumps({"facts": [*f1["facts"], f1["facts"][0]], "media_facts": []})},  # a step twice
        {"content": json.dumps({"facts": [{"step": "v1"}], "media_facts": []})},  # no statement
    ]
    with start_server(ScriptedResponder(script)) as srv:
        got = state_facts(tasks, provider(srv.url, "anchors.provider"), max_facts=8)
    assert got.facts == {}
    reasons = [got.rejected[str(t.id)] for t in tasks]
    assert (
        reasons[0] == f"extractor reply rejected: no fact for step {(tasks[0].solution_program or [])[0].out}"
    )
    assert reasons[1].endswith(f"two facts name step {(tasks[1].solution_program or [])[0].out}")
    assert "does not match the ExtractorReply schema (facts.0.statement: Field required)" in reasons[2]


def test_a_garbage_http_body_stops_the_stage_naming_the_provider(few: Path, tmp_path: Path) -> None:
    """A body that is no completion at all is a broken endpoint, not one bad item: the stage fails."""
    with start_server(ScriptedResponder([{"raw": "not json"}])) as srv:
        with pytest.raises(
            StageError, match=r"anchors.provider 'llm' \(http://127.*the answer is not JSON"
        ) as e:
            build_anchor_facts(llm_params(srv.url, anchors={"provider": "llm"}), data_root(few, tmp_path))
    assert isinstance(e.value.__cause__, LMError)
    assert not (tmp_path / "anchor_facts").exists()


def test_other_provider_kinds_are_refused_by_the_stages(few: Path, tmp_path: Path) -> None:
    local = {"kind": "transformers", "model": "/models/x"}
    params = Params.model_validate(
        {"providers": {"builtin": {"kind": "builtin"}, "local": local}, "rewrite": {"provider": "local"}}
    )
    with pytest.raises(StageError, match="rewrite.provider 'local' is a 'transformers' provider"):
        build_rewrite_candidates(params, data_root(few, tmp_path))


# --- the rewriter --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def drafted(few: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data root with builtin anchor_facts and builtin rewrite_candidates (the drafts), 2 per seed."""
    root = data_root(few, tmp_path_factory.mktemp("drafted"))
    params = Params.model_validate({"rewrite": {"per_seed": 2}})
    build_anchor_facts(params, root)
    build_rewrite_candidates(params, root)
    return root


def test_rewriter_rephrases_drafts_and_sets_bad_replies_aside(drafted: Path, tmp_path: Path) -> None:
    drafts = read_jsonl(drafted / "rewrite_candidates" / "candidates.jsonl", RewriteCandidate)
    assert len(drafts) >= 4
    assert (drafted / "rewrite_candidates" / "rejected.jsonl").read_text() == ""  # builtin: always written
    assert json.loads((drafted / "rewrite_candidates" / "summary.json").read_text())["rejected"] == 0

    def good(c: RewriteCandidate) -> dict[str, str]:
        return content({"question": f"Put differently: {c.task.question}"})

    script = [good(c) for c in drafts]
    script[1] = {"content": '{"question": "What is the unfinished'}  # malformed JSON
    script[2] = content({"question": drafts[2].task.question})  # the draft unchanged
    root = data_root(drafted / "seed_tasks", tmp_path)
    shutil.copytree(drafted / "anchor_facts", root / "anchor_facts")
    responder = ScriptedResponder(script)
    with start_server(responder) as srv:
        params = llm_params(srv.url, rewrite={"provider": "llm", "per_seed": 2})
        summary = build_rewrite_candidates(params, root)
    out = root / "rewrite_candidates"
    kept = read_jsonl(out / "candidates.jsonl", RewriteCandidate)
    rejected = [json.loads(x) for x in (out / "rejected.jsonl").read_text().splitlines()]
    assert [r["candidate_id"] for r in rejected] == [drafts[1].candidate_id, drafts[2].candidate_id]
    assert rejected[0]["seed_id"] == drafts[1].seed_id and set(rejected[0]) == {
        "candidate_id",
        "seed_id",
        "reason",
    }
    assert rejected[0]["reason"].startswith(
        "rewriter reply rejected: the reply is not JSON (Unterminated string"
    )
    assert rejected[1]["reason"] == "rewriter reply rejected: the rephrased question is the draft unchanged"
    assert summary["rejected"] == 2 and summary["rejected_reasons"] == {"rewriter reply rejected": 2}
    by_id = {c.candidate_id: c for c in drafts}
    assert [c.candidate_id for c in kept] == [drafts[0].candidate_id] + [c.candidate_id for c in drafts[3:]]
    for c in kept:  # only the question and the template change: the program and answer are the grammar's
        d = by_id[c.candidate_id]
        assert (
            c.task.question == f"Put differently: {d.task.question}" and c.template == f"openai:{d.template}"
        )
        assert c.task.solution_program == d.task.solution_program and c.task.answer == d.task.answer
    # one request per draft, in order; the rewriter is never told the answer
    assert [item(r)["question"] for r in responder.requests] == [c.task.question for c in drafts]
    assert all(set(item(r)) == {"question", "strategy", "level"} for r in responder.requests)
    assert all("answer" not in keys(r) for r in responder.requests)
    assert responder.requests[0]["response_format"]["json_schema"]["name"] == "Rephrase"


def test_rephrasings_must_keep_quoted_names_and_numbers(drafted: Path) -> None:
    [draft] = read_jsonl(drafted / "rewrite_candidates" / "candidates.jsonl", RewriteCandidate)[:1]
    quoted = 'On the wiki page of "Port Anselm", what is the year 1907 plus the number in the image?'
    task = draft.task.model_copy(update={"question": quoted, "answer": "Lake Vire"})
    c = draft.model_copy(update={"task": task})
    cands = [c.model_copy(update={"candidate_id": f"q{i}"}) for i in range(5)]
    script = [
        content({"question": "From the wiki page of Anselm, what is 1907 plus the image's number?"}),
        content({"question": 'From the page of "Port Anselm", what is 1970 plus the image\'s number?'}),
        content({"question": 'Is it Lake Vire? The "Port Anselm" page, 1907 and the image tell.'}),
        content({"question": "   "}),
        content(
            {"question": 'What is 1907 plus the number in the image, per the wiki page of "Port Anselm"?'}
        ),
    ]
    with start_server(ScriptedResponder(script)) as srv:
        kept, rejected = rephrase_candidates(cands, provider(srv.url, "rewrite.provider"))
    reasons = [r["reason"].removeprefix("rewriter reply rejected: ") for r in rejected]
    assert reasons[0].startswith("the rephrased question drops the quoted 'Port Anselm'")
    assert reasons[1].startswith("the rephrased question drops the number 1907")
    assert reasons[2] == "the rephrased question writes the answer"
    assert reasons[3] == "the rephrased question is empty"
    assert [k.candidate_id for k in kept] == ["q4"] and kept[0].template == f"openai:{draft.template}"


# --- the judge -----------------------------------------------------------------------------------------


def rewrite_of(cid: str, seed: Task, question: str) -> RewriteCandidate:
    task = seed.model_copy(deep=True, update={"id": cid, "question": question})
    return RewriteCandidate(
        candidate_id=cid, seed_id=str(seed.id), strategy="multi_hop_chaining", level="Medium", task=task
    )


def verdict(consistent: bool, score: float, reason: str) -> dict[str, str]:
    return content({"consistent": consistent, "score": score, "reason": reason})


def test_llm_judge_verdicts_rejections_and_duplicates(seeds: list[Task], tools: ToolRegistry) -> None:
    lookup = next(t for t in seeds if [s.op for s in t.solution_program or []][1:3] == ["search", "browse"])
    a, b, c = [t for t in seeds if t is not lookup][:3]
    cands = [
        rewrite_of("j1", lookup, "Which value does the attached input lead to on the wiki?"),
        rewrite_of("j2", a, "What do the attached files give?"),
        rewrite_of("j3", b, "Tell me what the attachments add up to."),
        rewrite_of("j4", lookup, "Reading the attachment, which wiki value results?"),  # j1's program
        rewrite_of("j5", c, "Work out what the attached media yield."),
    ]
    script = [
        verdict(True, 0.9, "the program answers the question"),
        verdict(False, 0.2, "the question asks for a year but the program computes a count"),
        {"content": "The task looks fine to me."},
        verdict(True, 0.8, "fine"),
        verdict(True, 1.5, "very sure"),
    ]
    responder = ScriptedResponder(script)
    reader = PageReader(tools.get("web_search"), tools.get("page_browser"))
    with start_server(responder) as srv:
        providers = {
            "builtin": ProviderSpec(),
            "llm": ProviderSpec(kind="openai", base_url=srv.url, model="m"),
        }
        judge = make_judge("llm", providers, reader, fuzz.token_sort_ratio)
        assert isinstance(judge, LLMJudge)
        got = judge.judge(cands)
    assert got["j1"].passed and got["j1"].score == 0.9
    assert got["j1"].detail == "consistent (llm): the program answers the question"
    assert not got["j2"].passed and got["j2"].score == 0.2
    assert (
        got["j2"].detail
        == "inconsistent (llm): the question asks for a year but the program computes a count"
    )
    assert not got["j3"].passed and got["j3"].score == 0.0
    assert got["j3"].detail.startswith("judge reply rejected: the reply is not JSON")
    assert "'The task looks fine to me.'" in got["j3"].detail
    assert (
        not got["j4"].passed
        and got["j4"].detail == "consistent (llm): fine; near-duplicate of j1 (same answer and program)"
    )
    assert not got["j5"].passed and "does not match the Verdict schema (score:" in got["j5"].detail
    # what the judge was sent: candidate_id order, the answer, the program and the KB facts it reads
    sent = [item(r) for r in responder.requests]
    assert [s["question"] for s in sent] == [c.task.question for c in cands]
    assert sent[0]["answer"] == lookup.answer and len(sent[0]["steps"]) == len(lookup.solution_program or [])
    search, browse = (lookup.solution_program or [])[1:3]
    assert (
        isinstance(search, SearchStep) and isinstance(browse, BrowseStep) and browse.url == f"${search.out}"
    )
    page = reader.page(str(search.value))
    fact = field_fact(page.facts, browse.field)
    assert fact is not None and fact[1] == format_value(browse.value)
    assert sent[0]["kb_facts"][:2] == [
        {"step": search.out, "page": search.value, "title": page.title},
        {
            "step": browse.out,
            "page": search.value,
            "title": page.title,
            "field": browse.field,
            "fact": f"{fact[0]}: {fact[1]}",
        },
    ]
    assert responder.requests[0]["response_format"]["json_schema"]["strict"] is True


def test_llm_judge_failed_calls_stop_verification(seeds: list[Task], tools: ToolRegistry) -> None:
    reader = PageReader(tools.get("web_search"), tools.get("page_browser"))
    cands = [rewrite_of("k1", seeds[0], "What do the attached files give?")]
    responder = ScriptedResponder([{"status": 500, "content": "boom"}, {"status": 500, "content": "boom"}])
    with start_server(responder) as srv:
        judge = LLMJudge(reader, fuzz.ratio, provider(srv.url, retries=1))
        with pytest.raises(StageError, match=r"verify.judge_provider 'llm' .*HTTP 500.*boom") as e:
            judge.judge(cands)
    assert isinstance(e.value.__cause__, LMError) and len(responder.requests) == 2  # retried, then failed
    gone = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(StageError, match=r"verify.judge_provider 'llm' \(http://127.0.0.1:\d+/v1\) failed"):
        LLMJudge(reader, fuzz.ratio, provider(gone)).judge(cands)


def test_verify_report_runs_the_llm_judge_on_orchestra_serve(
    seeds: list[Task], small_world: Path, tools: ToolRegistry, tmp_path: Path, serve_process: Any
) -> None:
    """verify_report with judge_provider = an openai provider served by a real `orchestra serve` process."""
    cands = [
        rewrite_of("v1", seeds[0], "Using every attached input, what is the result?"),
        rewrite_of("v2", seeds[1], "Combine what the attached inputs show: what comes out?"),
    ]
    script = [verdict(True, 0.95, "consistent throughout"), {"content": '{"consistent": "maybe"'}]
    path = tmp_path / "script.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in script))
    with serve_process(path, name="judge") as (_, url):
        params = llm_params(url, verify={"judge_provider": "llm"})
        report = verify_report(
            seeds, [], cands, small_world, params.verify, tools, providers=params.providers
        )
    judged = {r.candidate_id: r.checks["judge"] for r in report.results}
    assert judged["v1"].passed and judged["v1"].detail == "consistent (llm): consistent throughout"
    assert not judged["v2"].passed and judged["v2"].detail.startswith(
        "judge reply rejected: the reply is not JSON"
    )


def test_extractor_and_rewriter_stages_on_orchestra_serve(
    few: Path, tmp_path: Path, serve_process: Any
) -> None:
    """Both stages with their provider served by a real `orchestra serve --script` process: one malformed
    reply each is set aside with its reason, the others are kept."""
    tasks = read_tasks_json(few / "tasks.json")
    (tmp_path / "root").mkdir()
    root = data_root(few, tmp_path / "root")

    def script(name: str, replies: list[dict[str, Any]]) -> Path:
        path = tmp_path / f"{name}.jsonl"
        path.write_text("".join(json.dumps(x) + "\n" for x in replies))
        return path

    facts = [{"content": "no facts today"}, *(content(_facts(t)) for t in tasks[1:])]
    with serve_process(script("extractor", facts), name="extractor") as (_, url):
        build_anchor_facts(llm_params(url, anchors={"provider": "llm"}), root)
    rejected = [json.loads(x) for x in (root / "anchor_facts" / "rejected.jsonl").read_text().splitlines()]
    assert [r["task_id"] for r in rejected] == [str(tasks[0].id)]
    assert rejected[0]["reason"].startswith("extractor reply rejected: the reply is not JSON")
    stated = read_jsonl(root / "anchor_facts" / "anchors.jsonl", AnchorFact)
    assert stated and all(a.stated_by == "llm" and a.text.startswith("LLM: ") for a in stated)

    build_rewrite_candidates(Params(), root)  # the builtin drafts the openai rewriter will be sent
    drafts = read_jsonl(root / "rewrite_candidates" / "candidates.jsonl", RewriteCandidate)
    assert len(drafts) >= 2
    replies = [content({"question": 3})]
    replies += [content({"question": f"In other words: {d.task.question}"}) for d in drafts[1:]]
    with serve_process(script("rewriter", replies), name="rewriter") as (_, url):
        summary = build_rewrite_candidates(llm_params(url, rewrite={"provider": "llm"}), root)
    kept = read_jsonl(root / "rewrite_candidates" / "candidates.jsonl", RewriteCandidate)
    assert [c.candidate_id for c in kept] == [d.candidate_id for d in drafts[1:]]
    assert all(
        c.task.question.startswith("In other words: ") and c.template.startswith("openai:") for c in kept
    )
    (bad,) = [
        json.loads(x) for x in (root / "rewrite_candidates" / "rejected.jsonl").read_text().splitlines()
    ]
    assert bad["candidate_id"] == drafts[0].candidate_id
    assert bad["reason"].startswith("rewriter reply rejected: the reply does not match the Rephrase schema")
    assert summary["rejected"] == 1
