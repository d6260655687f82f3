"""The OmniGAIA scorer: answer extraction, the LLM judge, bootstrap intervals, the summary.

The protocol is OmniGAIA's: the predicted answer is the last ``<answer>…</answer>`` block of the last
assistant message (:func:`extract_answer`); exact match compares answers after
:func:`orchestra.answers.normalize` (case and whitespace only, punctuation and number formats kept, so
"Paris." is not "Paris"); the judge (:class:`LLMJudge`) asks a chat model whether the prediction is
completely accurate. :func:`orchestra.answers.numeric_match` is our own extra, reported beside the
protocol's scores, never in their place.
:func:`summarize` turns a run's result items into the numbers the tables print: every item counts,
one that could not run is wrong everywhere (never dropped from a denominator), each mean with a
percentile-bootstrap interval.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from pydantic import BaseModel

from orchestra.answers import exact_match, normalize
from orchestra.config import ProviderSpec
from orchestra.errors import ConfigError
from orchestra.lm.chat import LMError
from orchestra.lm.clients import openai_client

__all__ = [
    "CATEGORIES",
    "CATEGORY_SHORT",
    "JUDGE_PROMPT",
    "LEVELS",
    "LLMJudge",
    "Verdict",
    "bootstrap_ci",
    "extract_answer",
    "latency_summary",
    "parse_verdict",
    "summarize",
]

#: OmniGAIA's categories (the spelling of its test_metadata.json), in the papers' column order
CATEGORIES = (
    "Geography & Travel",
    "Technology",
    "History & Society",
    "Finance & Commerce",
    "Sports",
    "Arts & Culture",
    "Movies",
    "Science & Nature",
    "Food & Nutrition",
)
#: the papers' column headings for CATEGORIES
CATEGORY_SHORT = dict(
    zip(CATEGORIES, ("Geo.", "Tech.", "Hist.", "Fin.", "Sport", "Art", "Movie", "Sci.", "Food"), strict=True)
)
LEVELS = ("Easy", "Medium", "Hard")
#: the group of an item whose Level, category or task_type is missing
UNKNOWN = "unknown"
#: how many trailing words stand in for the answer when the last assistant message has no block
TAIL_WORDS = 20
#: the judge's completion cap when its provider sets no max_new_tokens (one word is asked for)
JUDGE_TOKENS = 16
#: how much of a reply that is neither word its verdict quotes
QUOTE_CHARS = 80

JUDGE_PROMPT = (
    "You are an evaluation assistant. Determine whether the predicted answer is completely accurate "
    "when compared with the labeled answer for the question.\n\n"
    "Question: {question}\n\n"
    "Labeled Answer: {gold}\n\n"
    "Predicted Answer: {prediction}\n\n"
    "Is the predicted answer completely accurate? Answer with exactly one word: Correct or Incorrect."
)

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_QUOTES = "\"'`\u2018\u2019\u201c\u201d"


# -- answers -----------------------------------------------------------------------------------------


def _text(content: Any) -> str:
    """A message's text: a string as is, the text parts of an OpenAI content list joined, else ''."""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        parts = [p.get("text") for p in content if isinstance(p, Mapping) and p.get("type") == "text"]
        return "\n".join(p for p in parts if isinstance(p, str))
    return ""


def extract_answer(messages: Sequence[Mapping[str, Any]] | None, finish_answer: str | None = None) -> str:
    """The predicted answer of a run, by the OmniGAIA protocol.

    The last ``<answer>`` block (stripped) of the last assistant message; else ``finish_answer``
    (stripped) when non-empty; else the last 20 words of the last assistant message; else ''. Only
    the last assistant message is read: a block in an earlier one is a draft, not the answer.
    """
    last = next((m for m in reversed(messages or ()) if m.get("role") == "assistant"), None)
    text = _text(last.get("content")) if last is not None else ""
    blocks = _ANSWER.findall(text)
    if blocks:
        return blocks[-1].strip()
    if finish_answer and finish_answer.strip():
        return finish_answer.strip()
    return " ".join(text.split()[-TAIL_WORDS:])


# -- the LLM judge -----------------------------------------------------------------------------------


class Verdict(BaseModel):
    """Whether the judge counts a prediction equal, and why: ``em`` (exact match, no call), ``empty``
    (empty prediction, no call), ``correct``, ``incorrect``, ``unparsed: <reply start>`` (neither
    word: not equal) or ``error: <message>`` (the call failed after the client's retries: not equal)."""

    equal: bool
    reason: str


def _word(text: str) -> str:
    return text.strip().strip(_QUOTES).strip().removesuffix(".").strip().strip(_QUOTES).strip().casefold()


def parse_verdict(reply: str) -> Verdict:
    """The judge's reply as a verdict, strictly: the reply (or its first line), without surrounding
    whitespace, quotes and a trailing period, case-folded, must be exactly "correct" or "incorrect".

    Stricter than scorers that count any reply lacking "Incorrect" as correct: "Maybe correct", an
    empty reply or a refusal is ``unparsed`` and not equal.
    """
    stripped = reply.strip()
    for candidate in (stripped, stripped.split("\n", 1)[0]):
        word = _word(candidate)
        if word in ("correct", "incorrect"):
            return Verdict(equal=word == "correct", reason=word)
    return Verdict(equal=False, reason=f"unparsed: {reply[:QUOTE_CHARS]}")


class LLMJudge:
    """The OmniGAIA judge on an ``openai`` provider: :data:`JUDGE_PROMPT` as one user message,
    temperature 0, a small completion cap (the provider's max_new_tokens when it sets one)."""

    def __init__(self, spec: ProviderSpec) -> None:
        if spec.kind != "openai":
            raise ConfigError(f"the LLM judge needs an 'openai' provider, not a {spec.kind!r} one")
        self.client = openai_client(spec, JUDGE_TOKENS, temperature=0.0)

    def judge(self, question: str, prediction: str, gold: str) -> Verdict:
        """One verdict; an empty or exactly matching prediction is decided without a call. A failed call
        (LMError after the client's retries) is a not-equal ``error`` verdict; anything else propagates."""
        if not normalize(prediction):
            return Verdict(equal=False, reason="empty")
        if exact_match(prediction, gold):
            return Verdict(equal=True, reason="em")
        prompt = JUDGE_PROMPT.format(question=question, gold=gold, prediction=prediction)
        try:
            res = self.client.chat([{"role": "user", "content": prompt}])
        except LMError as e:
            return Verdict(equal=False, reason=f"error: {e}")
        return parse_verdict(res.content)


# -- statistics --------------------------------------------------------------------------------------


def bootstrap_ci(
    values: Sequence[float], n_boot: int = 1000, seed: int = 0, level: float = 0.95
) -> tuple[float, float]:
    """The percentile-bootstrap interval of the mean (``numpy.random.default_rng(seed)``: the same
    values and seed give the same interval); (0.0, 0.0) for no values."""
    if n_boot < 1 or not 0 < level < 1:
        raise ValueError(f"bootstrap_ci needs n_boot >= 1 and 0 < level < 1, got {n_boot} and {level}")
    arr = np.asarray(values, dtype=float)
    if arr.size == 0:
        return 0.0, 0.0
    rng = np.random.default_rng(seed)
    means = arr[rng.integers(0, arr.size, size=(n_boot, arr.size))].mean(axis=1)
    lo, hi = np.percentile(means, [50 * (1 - level), 50 * (1 + level)])
    return float(lo), float(hi)


def _mean(values: Sequence[float]) -> float:
    return float(sum(values) / len(values)) if values else 0.0


def _score(values: Sequence[float], n_boot: int, seed: int) -> dict[str, Any]:
    lo, hi = bootstrap_ci(values, n_boot, seed)
    return {"mean": _mean(values), "ci": [lo, hi]}


def _group(item: Mapping[str, Any], key: str) -> str:
    value = item.get(key)
    return UNKNOWN if value is None else str(value)


def _order(names: set[str], known: Sequence[str]) -> list[str]:
    """``known`` names present in their order, then the others sorted, then ``unknown``."""
    rest = sorted(names - set(known) - {UNKNOWN})
    return [n for n in known if n in names] + rest + ([UNKNOWN] if UNKNOWN in names else [])


def latency_summary(latencies: Sequence[float]) -> dict[str, float]:
    """The median and 95th percentile of the items' wall seconds (0 when none ran)."""
    return {
        "p50": float(np.percentile(latencies, 50)) if latencies else 0.0,
        "p95": float(np.percentile(latencies, 95)) if latencies else 0.0,
    }


def summarize(items: Sequence[Mapping[str, Any]], n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
    """The summary of one evaluation's result items (JSON-serialisable; see the module docstring).

    An item with a ``not_run`` reason (it could not run) scores 0 in every accuracy. The judge's accuracy is
    None when no item has an ``llm_equal``; otherwise an item without one scores 0 there. Tool calls,
    tokens and cost are averaged over all items. (Latencies are clock readings, which the run record
    keeps: :func:`latency_summary`.)
    Groups without a Level, category or task_type are ``unknown`` (listed last).
    """
    ran = [it.get("not_run") is None for it in items]
    judged = any(it.get("llm_equal") is not None for it in items)

    def flag(key: str) -> list[float]:
        return [float(bool(it.get(key))) if ok else 0.0 for it, ok in zip(items, ran, strict=True)]

    scores = {"em": flag("em_score"), "judge": flag("llm_equal"), "numeric": flag("numeric_score")}

    def accuracy(idx: Sequence[int]) -> dict[str, Any]:
        out = {k: _score([v[i] for i in idx], n_boot, seed) for k, v in scores.items()}
        return {"n": len(idx), **out, "judge": out["judge"] if judged else None}

    def by(key: str, known: Sequence[str]) -> dict[str, Any]:
        groups: dict[str, list[int]] = {}
        for i, it in enumerate(items):
            groups.setdefault(_group(it, key), []).append(i)
        return {name: accuracy(groups[name]) for name in _order(set(groups), known)}

    overall = accuracy(range(len(items)))
    tokens = [int(it.get("tokens") or 0) for it in items]
    cost = [float(it.get("cost") or 0.0) for it in items]
    answered = [float(bool(str(it.get("predicted_answer") or "").strip())) for it in items]
    return {
        "n": len(items),
        "accuracy": {k: overall[k] for k in scores},
        "by_level": by("Level", LEVELS),
        "by_category": by("category", CATEGORIES),
        "by_task_type": by("task_type", ()),
        "avg_tool_calls": _mean([int(it.get("tool_call_num") or 0) for it in items]),
        "non_empty_ratio": _mean(answered),
        "tokens": {"total": sum(tokens), "mean": _mean(tokens)},
        "cost": {"total": sum(cost), "mean": _mean(cost)},
        "not_run": {
            "count": ran.count(False),
            "items": [
                {"id": it.get("id"), "reason": str(it["not_run"])}
                for it, ok in zip(items, ran, strict=True)
                if not ok
            ],
        },
    }
