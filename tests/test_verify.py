"""Verification: each of the five checks fails on its bad case and passes on the good one; the GE suite."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from rapidfuzz import fuzz

from orchestra.config import ProviderSpec, VerifyParams, load_params
from orchestra.data.expectations import CHECK_COLUMNS, checks_frame, validate_checks
from orchestra.data.verify import CHECKS, VerifyReport, rederive_many, verify_report
from orchestra.data.verify_bypass import PageReader, solve_text_only
from orchestra.data.verify_judge import LLMJudge, ProgrammaticJudge, make_judge
from orchestra.errors import ConfigError, RecordError, StageError
from orchestra.schemas import (
    AnchorFact,
    ComputeStep,
    RewriteCandidate,
    Task,
)
from orchestra.text import format_value
from orchestra.tools.base import ToolRegistry
from orchestra.tools.sandbox import CodeExecutor

ROOT = Path(__file__).resolve().parents[1]
PARAPHRASE = (
    "Using only the attached media files together with the world.local wiki, work out the requested "
    "quantity step by step and give the final result."
)
LOOKUP = ["search", "browse"]
PARAPHRASE_2 = (
    "Read every attached recording or picture carefully, consult the encyclopedia if needed; reply."
)


# --- fixtures: seeds, hand-made anchors, hand-made candidates -------------------------------------------


def anchors_for(seed: Task) -> list[AnchorFact]:
    """One anchor per step of the seed's program (what the anchor stage extracts, written by hand)."""
    kinds = {"perceive": "perception", "search": "kb", "browse": "kb", "compute": "compute"}
    media = {m.id: m.type for m in seed.omni_modal_input}
    out = []
    for s in seed.solution_program or []:
        kind = kinds[s.op]
        modality = media.get(getattr(s, "input_id", ""), "web" if kind == "kb" else "compute")
        out.append(
            AnchorFact(
                task_id=str(seed.id),
                fact_id=f"{seed.id}:{s.out}",
                kind=kind,  # type: ignore[arg-type]
                modality=modality,  # type: ignore[arg-type]
                step=s.out,
                text=f"{s.out} = {format_value(s.value)}",
                value=s.value,
            )
        )
    return out


def candidate(cid: str, seed: Task, question: str | None = None, **task: Any) -> RewriteCandidate:
    """A rewrite of ``seed``: its task with a new id and question and the given fields replaced."""
    t = seed.model_copy(deep=True, update={"id": cid, "question": question or PARAPHRASE, **task})
    return RewriteCandidate(
        candidate_id=cid,
        seed_id=str(seed.id),
        strategy="entity_obfuscation",
        level="Medium",
        task=t,
        anchor_ids=[a.fact_id for a in anchors_for(seed)],
    )


def ops(seed: Task) -> list[str]:
    return [s.op for s in seed.solution_program or []]


def pick(seeds: list[Task], test: Callable[[Task], bool], what: str) -> Task:
    found = [s for s in seeds if test(s)]
    assert found, f"the small world has no seed with {what}"
    return found[0]


@pytest.fixture(scope="module")
def anchors(seeds: list[Task]) -> list[AnchorFact]:
    return [a for s in seeds for a in anchors_for(s)]


@pytest.fixture(scope="module")
def picked(seeds: list[Task]) -> dict[str, Task]:
    """Seeds by shape: a lookup then a calculation, a numeric lookup, a name lookup, two perceptions."""
    return {
        "lookup_compute": pick(seeds, lambda s: ops(s)[1:3] == LOOKUP and ops(s)[-1] == "compute", "l+c"),
        "lookup_number": pick(
            seeds, lambda s: ops(s)[1:] == LOOKUP and s.answer.isdigit(), "a number lookup"
        ),
        "lookup_name": pick(
            seeds, lambda s: ops(s)[1:] == LOOKUP and not s.answer.isdigit(), "a name lookup"
        ),
        "two_perceptions": pick(
            seeds, lambda s: ops(s) == ["perceive", "perceive", "compute"], "2 perceptions"
        ),
    }


def _bump(steps: list[Any], out: str, delta: int) -> list[Any]:
    return [s.model_copy(update={"value": s.value + delta}) if s.out == out else s for s in steps]


@pytest.fixture(scope="module")
def cases(picked: dict[str, Task]) -> dict[str, RewriteCandidate]:
    """The hand-made candidate set: two good ones and one bad case per check (ids sort in this order)."""
    lc, ln, nm, pp = (
        picked[k] for k in ("lookup_compute", "lookup_number", "lookup_name", "two_perceptions")
    )
    p1, p2, p3 = pp.solution_program  # perceive, perceive, compute
    c: dict[str, RewriteCandidate] = {}
    c["c01_good"] = candidate("c01_good", lc)
    c["c02_good_name"] = candidate("c02_good_name", nm)
    c["c03_copy"] = candidate("c03_copy", pp, question=pp.question)
    # drops the first perception: the compute now reads only v2
    c["c04_missing_anchor"] = candidate(
        "c04_missing_anchor",
        pp,
        solution_program=[p2, ComputeStep(out="v3", value=p2.value, expression="v2")],
        answer=format_value(p2.value),
    )
    seed_name = ln.solution_program[0].value
    c["c05_names_entity"] = candidate(
        "c05_names_entity", ln, question=f"{PARAPHRASE} (The sign in the image reads '{seed_name}'.)"
    )
    c["c06_states_numbers"] = candidate(
        "c06_states_numbers",
        pp,
        question=f"Take the readings {format_value(p1.value)} and {format_value(p2.value)}; combine them.",
    )
    wrong = p3.value + 1
    c["c07_wrong_compute"] = candidate(
        "c07_wrong_compute",
        pp,
        question=PARAPHRASE_2,
        solution_program=[p1, p2, p3.model_copy(update={"value": wrong})],
        answer=format_value(wrong),
    )
    c["c08_duplicate"] = candidate("c08_duplicate", lc, question=PARAPHRASE_2)
    browse = ln.solution_program[2]
    c["c09_kb_disagrees"] = candidate(
        "c09_kb_disagrees",
        ln,
        question=PARAPHRASE_2,
        solution_program=_bump(ln.solution_program, browse.out, 1),
        answer=format_value(browse.value + 1),
    )
    return c


@pytest.fixture(scope="module")
def report(
    seeds: list[Task],
    anchors: list[AnchorFact],
    cases: dict[str, RewriteCandidate],
    small_world: Path,
    tools: ToolRegistry,
) -> VerifyReport:
    shuffled = list(reversed(cases.values()))  # results come back in candidate_id order regardless
    return verify_report(seeds, anchors, shuffled, small_world, VerifyParams(), tools)


def outcome(report: VerifyReport, cid: str, check: str) -> Any:
    return next(r for r in report.results if r.candidate_id == cid).checks[check]


def lexical(report: VerifyReport) -> dict[str, Any]:
    return {r.candidate_id: r.checks["lexical_similarity"] for r in report.results}


# --- the checks -----------------------------------------------------------------------------------------


def test_good_candidates_pass_every_check(report: VerifyReport) -> None:
    for cid in ("c01_good", "c02_good_name"):
        result = next(r for r in report.results if r.candidate_id == cid)
        assert set(result.checks) == set(CHECKS)
        assert result.passed, {k: c.detail for k, c in result.checks.items() if not c.passed}
    assert [r.candidate_id for r in report.results] == sorted(r.candidate_id for r in report.results)


def test_anchor_coverage_fails_when_a_step_is_missing(report: VerifyReport) -> None:
    good = outcome(report, "c01_good", "anchor_coverage")
    bad = outcome(report, "c04_missing_anchor", "anchor_coverage")
    assert good.passed and good.score == 1.0
    assert not bad.passed and bad.score == pytest.approx(1 / 3, abs=1e-3)
    assert ":v1 (v1 perceive" in bad.detail and ":v3 (v3 compute" in bad.detail


def test_lexical_similarity_fails_on_the_seed_question(report: VerifyReport) -> None:
    good = outcome(report, "c01_good", "lexical_similarity")
    bad = outcome(report, "c03_copy", "lexical_similarity")
    assert good.passed and good.score < 0.85
    assert not bad.passed and bad.score == 1.0 and "token_sort_ratio" in bad.detail and "seed" in bad.detail


def test_lexical_similarity_compares_siblings_and_follows_the_metric(
    seeds: list[Task],
    anchors: list[AnchorFact],
    picked: dict[str, Task],
    small_world: Path,
    tools: ToolRegistry,
) -> None:
    seed = picked["two_perceptions"]
    a = candidate("s1", seed, question=PARAPHRASE)
    b = candidate("s2", seed, question=PARAPHRASE + " Be careful.")
    loose = VerifyParams(similarity_metric="token_set_ratio", modality_bypass=False)
    got = lexical(verify_report(seeds, anchors, [a, b], small_world, loose, tools))
    assert not got["s1"].passed and "closest: s2" in got["s1"].detail and got["s1"].score == 1.0
    strict = VerifyParams(modality_bypass=False)  # token_sort_ratio: the extra words count
    got = lexical(verify_report(seeds, anchors, [a, b], small_world, strict, tools))
    assert 0.85 < got["s1"].score < 1.0


def test_modality_bypass_finds_a_named_entity_and_stated_numbers(report: VerifyReport) -> None:
    good = outcome(report, "c01_good", "modality_bypass")
    assert good.passed and good.score == 0.0
    named = outcome(report, "c05_names_entity", "modality_bypass")
    assert not named.passed and "is a page fact" in named.detail
    stated = outcome(report, "c06_states_numbers", "modality_bypass")
    assert not stated.passed and "from numbers of the question" in stated.detail
    assert outcome(report, "c03_copy", "modality_bypass").passed  # the seed's own question needs the media


def test_no_seed_question_is_bypassed(seeds: list[Task], tools: ToolRegistry) -> None:
    reader = PageReader(tools.get("web_search"), tools.get("page_browser"))
    bypassed = [(s.id, r.how) for s in seeds if (r := solve_text_only(s.question, s.answer, reader)).reached]
    assert bypassed == []


def test_modality_bypass_can_be_switched_off(
    seeds: list[Task],
    anchors: list[AnchorFact],
    cases: dict[str, RewriteCandidate],
    small_world: Path,
    tools: ToolRegistry,
) -> None:
    off = VerifyParams(modality_bypass=False)
    [result] = verify_report(seeds, anchors, [cases["c05_names_entity"]], small_world, off, tools).results
    assert result.checks["modality_bypass"].passed and result.checks["modality_bypass"].score is None


def test_numeric_rederivation_fails_on_a_wrong_compute_value(report: VerifyReport) -> None:
    good = outcome(report, "c01_good", "numeric_rederivation")
    assert good.passed and good.score == 1.0 and "sandbox" in good.detail
    bad = outcome(report, "c07_wrong_compute", "numeric_rederivation")
    assert not bad.passed and "re-derived" in bad.detail and "v3 recorded" in bad.detail
    assert outcome(report, "c07_wrong_compute", "judge").passed  # its record is self-consistent otherwise
    name = outcome(report, "c02_good_name", "numeric_rederivation")
    assert name.passed and name.score is None and name.detail == "not numeric"


def test_rederive_many_batches_and_isolates_a_runaway_program(picked: dict[str, Task]) -> None:
    pp = picked["two_perceptions"]
    p1, p2, p3 = pp.solution_program
    good = [candidate(f"b{i}", pp) for i in range(5)]
    runaway = candidate(
        "b9",
        pp,
        solution_program=[p1, p2, p3.model_copy(update={"expression": "9 ** 9 ** 9"})],
    )
    broken = candidate("b8", pp, solution_program=[p1, p2, p3.model_copy(update={"expression": "v1 +"})])
    ex = CodeExecutor(cpu_s=1, wall_s=3, pool_size=1)
    try:
        got = rederive_many([*good, broken, runaway], ex, batch=4)
    finally:
        ex.close()
    assert all(got[c.candidate_id].passed for c in good)
    assert not got["b8"].passed and "SyntaxError" in got["b8"].detail
    assert not got["b9"].passed and got["b9"].detail.startswith("re-derivation failed: sandbox")


def test_judge_catches_kb_disagreement_and_duplicates(report: VerifyReport) -> None:
    good = outcome(report, "c01_good", "judge")
    assert good.passed and good.score == 1.0
    kb = outcome(report, "c09_kb_disagrees", "judge")
    assert not kb.passed and "browse records" in kb.detail and "says" in kb.detail
    assert outcome(report, "c09_kb_disagrees", "numeric_rederivation").passed  # the sandbox cannot see the KB
    dup = outcome(report, "c08_duplicate", "judge")
    assert not dup.passed and "near-duplicate of c01_good (same answer and program)" in dup.detail


def test_judge_flags_a_wrong_search_hit_and_near_duplicate_questions(
    picked: dict[str, Task], seeds: list[Task], tools: ToolRegistry
) -> None:
    reader = PageReader(tools.get("web_search"), tools.get("page_browser"))
    judge = make_judge("builtin", None, reader, fuzz.token_sort_ratio)
    assert isinstance(judge, ProgrammaticJudge)
    lc, ln = picked["lookup_compute"], picked["lookup_number"]
    other_url = ln.solution_program[1].value
    steps = [
        s.model_copy(update={"value": other_url}) if s.op == "search" else s for s in lc.solution_program
    ]
    wrong = candidate("j1", lc, solution_program=steps)
    pp = picked["two_perceptions"]
    p1, p2, p3 = pp.solution_program
    a = candidate("j2", pp, question="What do you get from the two attached readings?")
    b = candidate(
        "j3",
        pp,
        question="What do you get from the two attached readings ?!",
        solution_program=[p1, p2, p3.model_copy(update={"expression": f"({p3.expression})"})],
    )
    broken = candidate(
        "j4",
        pp,
        solution_program=[
            p1.model_copy(update={"input_id": "image_nowhere"}),
            p2,
            p3.model_copy(update={"expression": "v9 + 1"}),
        ],
    )
    got = judge.judge([wrong, a, b, broken])
    assert not got["j4"].passed and got["j4"].score == pytest.approx(2 / 4)
    assert "perceives image_nowhere, not a modal input" in got["j4"].detail and "uses v9" in got["j4"].detail
    assert (
        not got["j1"].passed and "titled" in got["j1"].detail and "the page titled so is" in got["j1"].detail
    )
    assert got["j2"].passed
    assert (
        not got["j3"].passed and "near-duplicate of j2 (same answer, question similarity" in got["j3"].detail
    )


def test_judge_provider_seam(tools: ToolRegistry) -> None:
    reader = PageReader(tools.get("web_search"), tools.get("page_browser"))
    openai = ProviderSpec(kind="openai", base_url="http://127.0.0.1:9/v1", model="m")
    local = ProviderSpec(kind="transformers", model="/models/judge")
    llm = {"builtin": ProviderSpec(), "llm": openai, "local": local}
    assert isinstance(make_judge("llm", llm, reader, fuzz.ratio), LLMJudge)  # tests/test_openai_providers.py
    with pytest.raises(ConfigError, match="kind 'transformers'.*'builtin'.*'openai'"):
        make_judge("local", llm, reader, fuzz.ratio)
    with pytest.raises(ConfigError, match="not a key of providers"):
        make_judge("nope", llm, reader, fuzz.ratio)
    assert isinstance(make_judge("builtin", llm, reader, fuzz.ratio), ProgrammaticJudge)


def test_bad_inputs_are_refused(
    seeds: list[Task],
    anchors: list[AnchorFact],
    cases: dict[str, RewriteCandidate],
    small_world: Path,
    tools: ToolRegistry,
) -> None:
    c = cases["c01_good"]
    with pytest.raises(RecordError, match="duplicate candidate ids"):
        verify_report(seeds, anchors, [c, c], small_world, VerifyParams(), tools)
    with pytest.raises(RecordError, match="not in the seed list"):
        verify_report([], anchors, [c], small_world, VerifyParams(), tools)


def test_params_name_the_metric() -> None:
    assert load_params(ROOT / "params.yaml").verify.similarity_metric == "token_sort_ratio"
    with pytest.raises(ValidationError):
        VerifyParams(similarity_metric="jaro")  # type: ignore[arg-type]


def test_report_times_every_check_and_builds_its_own_tools(
    seeds: list[Task],
    anchors: list[AnchorFact],
    cases: dict[str, RewriteCandidate],
    small_world: Path,
    report: VerifyReport,
) -> None:
    assert set(report.timings_s) == set(CHECKS) and all(v >= 0 for v in report.timings_s.values())
    assert report.tool_calls["page_browser"] >= 2 and 0 < report.pass_rates()["all"] < 1
    # without a registry it builds web_search / page_browser / code_executor over the world, then closes them
    again = verify_report(seeds, anchors, list(cases.values()), small_world, VerifyParams())
    assert [r.model_dump() for r in again.results] == [r.model_dump() for r in report.results]
    json.dumps([r.model_dump() for r in again.results])  # plain JSON records


# --- the Great Expectations suite -----------------------------------------------------------------------

_GE_SCRIPT = """
import dataclasses, json, sys
from pathlib import Path
from orchestra.config import VerifyParams
from orchestra.data.expectations import validate_checks
from orchestra.schemas import VerificationResult
results = [VerificationResult.model_validate(r) for r in json.loads(Path(sys.argv[1]).read_text())]
got = validate_checks(results, VerifyParams(), Path(sys.argv[2]))
print(json.dumps(dataclasses.asdict(got), default=str))
"""


def test_ge_suite_rejects_failing_rows_with_reasons(report: VerifyReport, tmp_path: Path) -> None:
    """In a fresh process (as the stage runs it): rejects name checks and reasons, artefacts are saved."""
    results = tmp_path / "results.json"
    results.write_text(json.dumps([r.model_dump() for r in report.results]))
    out = tmp_path / "verified" / "ge"
    run = subprocess.run(
        [sys.executable, "-c", _GE_SCRIPT, str(results), str(out)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert "Calculating Metrics" not in run.stderr  # progress bars are off
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["success"] is False
    assert got["passed_ids"] == ["c01_good", "c02_good_name"]
    assert got["passed_ids"] == [r.candidate_id for r in report.results if r.passed]
    rejects = {r["candidate_id"]: r for r in got["rejects"]}
    assert set(rejects) == {r.candidate_id for r in report.results if not r.passed}
    assert rejects["c03_copy"]["failed_checks"] == ["lexical_similarity"]
    assert "lexical_similarity: token_sort_ratio 1.00 > 0.85" in rejects["c03_copy"]["reasons"]
    assert rejects["c08_duplicate"]["failed_checks"] == ["judge"]
    assert "near-duplicate of c01_good" in rejects["c08_duplicate"]["reasons"]
    assert rejects["c05_names_entity"]["failed_checks"] == ["modality_bypass"]
    assert set(rejects["c07_wrong_compute"]["failed_checks"]) == {"anchor_coverage", "numeric_rederivation"}
    saved = json.loads(Path(got["validation_json"]).read_text())
    assert Path(got["validation_json"]).is_relative_to(out)
    by_check = {r["expectation_config"]["meta"]["check"]: r for r in saved["results"]}
    assert set(by_check) == set(CHECKS)
    dup_rows = by_check["judge"]["result"]["unexpected_index_list"]
    assert {"candidate_id": "c08_duplicate", "judge_ok": False} in dup_rows
    index = Path(got["data_docs_index"])
    assert index.is_file() and index.is_relative_to(out) and "<html" in index.read_text().lower()
    assert (out / "gx" / "great_expectations.yml").read_text().count("analytics_enabled: false") == 1


def test_ge_refuses_a_folder_in_use(report: VerifyReport, tmp_path: Path) -> None:
    (tmp_path / "ge").mkdir()
    (tmp_path / "ge" / "old.json").write_text("{}")
    with pytest.raises(StageError, match="not empty"):
        validate_checks(report.results, VerifyParams(), tmp_path / "ge")


def test_checks_frame_has_one_column_per_check(report: VerifyReport) -> None:
    frame = checks_frame(report.results)
    assert list(frame.columns) == ["candidate_id", *CHECK_COLUMNS.values()]
    row = frame.set_index("candidate_id").loc["c02_good_name"]
    assert row["numeric_rederived"] is None and row["judge_ok"] and not row["modality_bypass_reached"]


def test_text_only_arithmetic_follows_the_question_wording(tools: ToolRegistry) -> None:
    reader = PageReader(tools.get("web_search"), tools.get("page_browser"))
    assert solve_text_only("What is the difference between 93 and 86764?", "86671", reader).reached
    assert solve_text_only("What do 10 and 2 give together here?", "5", reader).reached  # no cue: all ops
    gap = solve_text_only("What is the gap between 10 and 2?", "5", reader)
    assert not gap.reached  # a gap is no division
    assert (
        solve_text_only("What is 10 divided by 2?", "5", reader).how
        == "the answer '5' = round(10 / 2) from numbers of the question and pages"
    )
