"""The OmniGAIA scorer: answer extraction, exact and numeric match, the LLM judge against
`orchestra serve --script` over real loopback HTTP, bootstrap intervals and the evaluation summary."""

from __future__ import annotations

import json
import socket
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from orchestra.agent.serve import ScriptedResponder, start_server
from orchestra.answers import exact_match, normalize, numeric_match
from orchestra.config import ProviderSpec
from orchestra.data.seeds import omnigaia_metadata_path
from orchestra.errors import ConfigError
from orchestra.evaluation.items import latencies
from orchestra.evaluation.scoring import (
    CATEGORIES,
    CATEGORY_SHORT,
    JUDGE_PROMPT,
    LEVELS,
    LLMJudge,
    Verdict,
    bootstrap_ci,
    extract_answer,
    latency_summary,
    parse_verdict,
    summarize,
)

QUESTION = "Which city hosts the Louvre?"


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def assistant(text: str | None) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def judge_at(url: str, retries: int = 0) -> LLMJudge:
    return LLMJudge(
        ProviderSpec(kind="openai", base_url=url, model="scripted", max_retries=retries, timeout_s=10)
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- answers and exact match ------------------------------------------------------------------------

TWENTY_FIVE = " ".join(f"w{i}" for i in range(1, 26))


@pytest.mark.parametrize(
    ("messages", "finish", "expected"),
    [
        ([user("q"), assistant("I think <answer> Paris </answer>")], None, "Paris"),
        ([assistant("<answer>Lyon</answer> no wait <answer>Paris</answer>")], None, "Paris"),
        ([assistant("<answer>\n  New\nYork \n</answer>")], None, "New\nYork"),
        ([assistant(TWENTY_FIVE)], None, " ".join(f"w{i}" for i in range(6, 26))),
        ([assistant("it is\n\tParis")], None, "it is Paris"),
        ([assistant("no block here")], "  Paris ", "Paris"),
        ([assistant("no block here")], "   ", "no block here"),
        ([assistant("<answer>Paris</answer>")], "Lyon", "Paris"),  # the block wins over the finish answer
        (
            [assistant("<answer>Lyon</answer>"), user("tool"), assistant("so it is Paris")],
            None,
            "so it is Paris",
        ),
        ([assistant("<answer>Lyon</answer>"), user("tool"), assistant("done")], "Paris", "Paris"),
        (
            [assistant("<answer>Paris</answer>"), user("thanks")],
            None,
            "Paris",
        ),  # a later user turn is not read
        ([assistant([{"type": "text", "text": "<answer>Paris</answer>"}])], None, "Paris"),
        ([assistant("<answer></answer>")], "Lyon", ""),  # an empty block is the (empty) answer
        ([assistant("<answer>unclosed")], None, "<answer>unclosed"),
        ([user("only the question")], None, ""),
        ([user("only the question")], "Paris", "Paris"),
        ([], None, ""),
        (None, None, ""),
        ([assistant(None)], None, ""),
    ],
)
def test_extract_answer_follows_the_protocol(
    messages: list[dict[str, Any]] | None, finish: str | None, expected: str
) -> None:
    assert extract_answer(messages, finish) == expected


@pytest.mark.parametrize(
    ("pred", "gold", "expected"),
    [
        ("Paris", "Paris", 1),
        ("PARIS", "paris", 1),
        ("  Paris  ", "Paris", 1),
        ("New   York", "new york", 1),
        ("New\nYork", "New York", 1),
        ("New\tYork\r\n", "new york", 1),
        ("NewYork", "New York", 0),
        ("Paris.", "Paris", 0),  # punctuation is kept
        ("paris,", "Paris", 0),
        ("1,234", "1234", 0),  # number formats are kept
        ("12%", "12", 0),
        ("3.50", "3.5", 0),
        ("", "", 0),  # an empty prediction never matches
        ("   ", "", 0),
        ("", "Paris", 0),
    ],
)
def test_exact_match_normalises_case_and_whitespace_only(pred: str, gold: str, expected: int) -> None:
    assert exact_match(pred, gold) == expected


def test_extracted_answers_are_matched_exactly() -> None:
    messages = [
        assistant("<answer>Lyon</answer>"),
        user("tool"),
        assistant("Final: <answer> PARIS\n</answer>"),
    ]
    assert exact_match(extract_answer(messages), "paris") == 1
    assert exact_match(extract_answer([assistant("<answer>Paris.</answer>")]), "Paris") == 0


def test_normalize_does_nothing_else() -> None:
    assert normalize("  A\tB\n\nC\r D  ") == "a b c d"
    assert normalize("1,234.50 %!") == "1,234.50 %!"


@pytest.mark.parametrize(
    ("pred", "gold", "expected"),
    [
        ("1,234", "1234", 1),
        ("12%", "12", 1),
        ("-3.5", "-3.50", 1),
        ("+7", "7", 1),
        (" 790 ", "790", 1),
        ("101", "100", 1),  # within 1 %
        ("102", "100", 0),  # outside 1 %
        ("0", "0", 1),
        ("1e-10", "0", 0),  # not a number in our grammar: exact match
        ("0.0000000001", "0", 1),  # within abs_tol
        ("-5", "5", 0),
        ("1,23", "123", 0),  # not a thousands grouping: exact match
        ("about 12", "12", 0),
        ("Paris", "paris", 1),  # not numbers: exact match
        ("Paris.", "Paris", 0),
        ("", "0", 0),
        (".", ".", 1),  # no digit: not a number, exact match
    ],
)
def test_numeric_match(pred: str, gold: str, expected: int) -> None:
    assert numeric_match(pred, gold) == expected


def test_numeric_match_tolerances_are_parameters() -> None:
    assert numeric_match("101", "100", rel_tol=1e-6) == 0
    assert numeric_match("100.5", "100", rel_tol=0.0, abs_tol=0.5) == 1
    assert numeric_match("100.6", "100", rel_tol=0.0, abs_tol=0.5) == 0


# --- the judge's reply ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "equal", "reason"),
    [
        ("Correct", True, "correct"),
        ("  correct.\n", True, "correct"),
        ('"Correct"', True, "correct"),
        ('"Correct".', True, "correct"),
        ("CORRECT", True, "correct"),
        ("Correct\nThe capital matches.", True, "correct"),
        ("Incorrect", False, "incorrect"),
        ("'incorrect.'", False, "incorrect"),
        ("Maybe correct", False, "unparsed: Maybe correct"),
        ("The answer is correct.", False, "unparsed: The answer is correct."),
        ("Not incorrect", False, "unparsed: Not incorrect"),
        ("Correct!", False, "unparsed: Correct!"),
        ("", False, "unparsed: "),
        ("x" * 100, False, "unparsed: " + "x" * 80),
    ],
)
def test_parse_verdict_is_strict(reply: str, equal: bool, reason: str) -> None:
    assert parse_verdict(reply) == Verdict(equal=equal, reason=reason)


def test_judge_prompt_asks_for_one_word() -> None:
    text = JUDGE_PROMPT.format(question="Q {x}", gold="G", prediction="P")
    assert "Question: Q {x}" in text and "Labeled Answer: G" in text and "Predicted Answer: P" in text
    assert "completely accurate" in text and "exactly one word: Correct or Incorrect" in text


# --- the LLM judge over loopback HTTP ---------------------------------------------------------------


def test_llm_judge_on_orchestra_serve_maps_replies(tmp_path: Path, serve_process: Any) -> None:
    script = [{"content": "Correct"}, {"content": "  incorrect."}, {"content": "Maybe correct"}]
    path = tmp_path / "script.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in script))
    with serve_process(path, name="judge") as (_, url):
        judge = judge_at(url)
        # exact and empty predictions are decided first, without a call: the script is not advanced
        assert judge.judge(QUESTION, " PARIS ", "Paris") == Verdict(equal=True, reason="em")
        assert judge.judge(QUESTION, "  ", "Paris") == Verdict(equal=False, reason="empty")
        assert judge.judge(QUESTION, "Paris, France", "Paris") == Verdict(equal=True, reason="correct")
        assert judge.judge(QUESTION, "Lyon", "Paris") == Verdict(equal=False, reason="incorrect")
        assert judge.judge(QUESTION, "France", "Paris") == Verdict(
            equal=False, reason="unparsed: Maybe correct"
        )
        exhausted = judge.judge(QUESTION, "Nice", "Paris")  # the script is used up: HTTP 500
    assert not exhausted.equal
    assert exhausted.reason.startswith("error: ") and "HTTP 500" in exhausted.reason


def test_llm_judge_sends_one_prompt_at_temperature_zero_and_none_for_em() -> None:
    responder = ScriptedResponder([{"content": "Correct"}])
    with start_server(responder) as srv:
        judge = judge_at(srv.url)
        assert judge.judge(QUESTION, "paris", "Paris").reason == "em"
        assert judge.judge(QUESTION, "", "Paris").reason == "empty"
        assert responder.requests == []
        assert judge.judge(QUESTION, "Paris, France", "Paris") == Verdict(equal=True, reason="correct")
    (request,) = responder.requests
    assert request["temperature"] == 0.0 and request["max_tokens"] == 16
    assert request["messages"] == [
        {
            "role": "user",
            "content": JUDGE_PROMPT.format(question=QUESTION, gold="Paris", prediction="Paris, France"),
        }
    ]


def test_llm_judge_failed_calls_are_error_verdicts_after_retries() -> None:
    responder = ScriptedResponder([{"status": 503, "content": "busy"}, {"status": 503, "content": "busy"}])
    with start_server(responder) as srv:
        verdict = judge_at(srv.url, retries=1).judge(QUESTION, "Lyon", "Paris")
    assert len(responder.requests) == 2
    assert not verdict.equal and verdict.reason.startswith("error: ") and "HTTP 503" in verdict.reason

    url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    verdict = judge_at(url).judge(QUESTION, "Lyon", "Paris")
    assert not verdict.equal and verdict.reason.startswith(f"error: {url}/chat/completions: ")


def test_llm_judge_needs_an_openai_provider() -> None:
    with pytest.raises(ConfigError, match="'builtin'"):
        LLMJudge(ProviderSpec())


# --- bootstrap --------------------------------------------------------------------------------------


def test_bootstrap_ci_is_deterministic_and_contains_the_mean() -> None:
    values = [1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0]
    lo, hi = bootstrap_ci(values, seed=3)
    assert (lo, hi) == bootstrap_ci(values, seed=3)
    spread = [0.1 * i**1.5 for i in range(12)]  # continuous values: another seed, another interval
    assert bootstrap_ci(spread, seed=3) == bootstrap_ci(spread, seed=3) != bootstrap_ci(spread, seed=4)
    assert 0.0 <= lo < 0.6 < hi <= 1.0
    assert bootstrap_ci(values, level=0.5, seed=3)[1] - bootstrap_ci(values, level=0.5, seed=3)[0] < hi - lo


def test_bootstrap_ci_narrows_with_more_values() -> None:
    def width(n: int) -> float:
        lo, hi = bootstrap_ci([float(i % 2) for i in range(n)])
        assert lo <= 0.5 <= hi
        return hi - lo

    assert width(1000) < width(100) / 2 < width(10) / 4


def test_bootstrap_ci_edge_cases() -> None:
    assert bootstrap_ci([1.0] * 30) == (1.0, 1.0)
    assert bootstrap_ci([0.0]) == (0.0, 0.0)
    assert bootstrap_ci([]) == (0.0, 0.0)
    with pytest.raises(ValueError, match="level"):
        bootstrap_ci([1.0], level=1.0)


# --- the summary ------------------------------------------------------------------------------------


FIELDS = ("id", "Level", "category", "task_type", "em_score", "llm_equal", "numeric_score")
MORE = ("predicted_answer", "tool_call_num", "latency_s", "tokens", "cost", "not_run")
MISSING = object()  # the key is absent


def result(*values: Any) -> dict[str, Any]:
    item = dict(zip(FIELDS + MORE, values, strict=True))
    return {k: v for k, v in item.items() if v is not MISSING}


TECH, GEO, VIDEO, IMAGE_AUDIO = "Technology", "Geography & Travel", "video w/ audio", "image + audio"
ITEMS = [
    result(1, "Easy", TECH, IMAGE_AUDIO, 1, 1, 1, "790", 3, 1.0, 100, 0.01, None),
    result(2, "Easy", GEO, VIDEO, 0, 1, 0, "Paris.", 2, 2.0, 200, 0.02, None),
    result(3, "Medium", TECH, IMAGE_AUDIO, 0, 0, 1, "1,234", 4, 3.0, 300, 0.03, None),
    result(4, "Medium", "Sports", VIDEO, 1, 1, 1, "Messi", 1, 4.0, 400, 0.04, None),
    result(5, "Hard", "Medical & Health Science", "image", 0, 0, 0, "", 0, 5.0, 50, 0.0, None),
    result(6, "Hard", "Astronomy", None, 1, 1, 1, "x", 2, 6.0, 150, 0.05, None),
    result(7, MISSING, None, "audio", 0, 0, 0, "   ", 5, 7.0, 70, 0.01, None),
    # could not run: its (stale) scores count as wrong, its latency is not a measurement
    result(8, "Medium", "Sports", VIDEO, 1, None, 1, "", 0, 100.0, 0, 0.0, "media missing: videos/x.mp4"),
]


def test_summarize_counts_every_item() -> None:
    s = summarize(ITEMS, n_boot=200)
    json.dumps(s)  # JSON-serialisable
    assert s["n"] == 8
    acc = s["accuracy"]
    assert acc["em"]["mean"] == 3 / 8 and acc["judge"]["mean"] == 4 / 8 and acc["numeric"]["mean"] == 4 / 8
    for block in acc.values():
        lo, hi = block["ci"]
        assert lo <= block["mean"] <= hi
    assert list(s["by_level"]) == ["Easy", "Medium", "Hard", "unknown"]
    assert {k: v["n"] for k, v in s["by_level"].items()} == {"Easy": 2, "Medium": 3, "Hard": 2, "unknown": 1}
    assert {k: v["em"]["mean"] for k, v in s["by_level"].items()} == {
        "Easy": 0.5, "Medium": 1 / 3, "Hard": 0.5, "unknown": 0.0
    }  # fmt: skip
    assert {k: v["judge"]["mean"] for k, v in s["by_level"].items()} == {
        "Easy": 1.0, "Medium": 1 / 3, "Hard": 0.5, "unknown": 0.0
    }  # fmt: skip
    assert s["by_level"]["Medium"]["numeric"]["mean"] == 2 / 3
    # the papers' order (not alphabetical: Sports after Technology), then others sorted, unknown last
    assert list(s["by_category"]) == [
        "Geography & Travel", "Technology", "Sports", "Astronomy", "Medical & Health Science", "unknown"
    ]  # fmt: skip
    assert s["by_category"]["Sports"]["n"] == 2 and s["by_category"]["Sports"]["em"]["mean"] == 0.5
    assert s["by_category"]["Technology"]["em"]["mean"] == 0.5
    assert list(s["by_task_type"]) == ["audio", "image", "image + audio", "video w/ audio", "unknown"]
    assert s["by_task_type"]["video w/ audio"]["n"] == 3
    assert s["avg_tool_calls"] == 17 / 8
    assert s["non_empty_ratio"] == 5 / 8
    assert "latency_s" not in s  # a clock reading: the run record's (runner.write_timing)
    clocks = {str(it["id"]): {"latency_s": it["latency_s"]} for it in ITEMS}
    assert latency_summary(latencies(ITEMS, clocks)) == {"p50": 4.0, "p95": pytest.approx(6.7)}  # ran only
    assert s["tokens"] == {"total": 1270, "mean": 1270 / 8}
    assert s["cost"] == {"total": pytest.approx(0.16), "mean": pytest.approx(0.02)}
    assert s["not_run"] == {"count": 1, "items": [{"id": 8, "reason": "media missing: videos/x.mp4"}]}
    assert summarize(ITEMS, n_boot=200) == s  # deterministic


def test_summarize_without_a_judge_and_empty() -> None:
    s = summarize([{**it, "llm_equal": None} for it in ITEMS], n_boot=50)
    assert s["accuracy"]["judge"] is None and s["accuracy"]["em"]["mean"] == 3 / 8
    assert all(g["judge"] is None for g in s["by_level"].values())
    empty = summarize([])
    assert empty["n"] == 0 and empty["accuracy"]["em"] == {"mean": 0.0, "ci": [0.0, 0.0]}
    assert empty["accuracy"]["judge"] is None and empty["by_level"] == {} and empty["not_run"]["count"] == 0
    assert latency_summary([]) == {"p50": 0.0, "p95": 0.0} and empty["non_empty_ratio"] == 0.0


def test_groups_use_the_shipped_metadata_spelling() -> None:
    tasks = json.loads(omnigaia_metadata_path().read_text(encoding="utf-8"))
    assert set(Counter(t["Level"] for t in tasks)) == set(LEVELS)
    categories = Counter(t["category"] for t in tasks)
    assert set(CATEGORIES) <= set(categories) and sum(categories[c] for c in CATEGORIES) >= 355
    assert list(CATEGORY_SHORT.values())[:3] == ["Geo.", "Tech.", "Hist."]
