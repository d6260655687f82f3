"""ReWOO-style references in decisions: `#M<n>` names the n-th modal input, `#E<n>` sub-task E<n>'s result,
`#Q<n>` the n-th span of the question (:func:`question_spans`), so a policy points at a word instead of
copying it."""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from orchestra.errors import OrchestraError
from orchestra.text import ValueFormatError, format_value

__all__ = [
    "QUESTION_REF",
    "REF_PATTERN",
    "SUBTASK_ID_PATTERN",
    "Ref",
    "ReferenceError_",
    "find_refs",
    "missing_refs",
    "modal_key",
    "mark_question",
    "next_subtask_id",
    "question_spans",
    "ref_keys",
    "substitute",
    "substitute_spans",
]

#: A reference in text: ``#M1`` (1-based modal input) or ``#E3`` (the result of sub-task ``E3``).
REF_PATTERN = re.compile(r"#([EM])([1-9][0-9]*)(?![0-9A-Za-z_])")
#: A question-span reference: ``#Q2`` is the second span of :func:`question_spans`.
QUESTION_REF = re.compile(r"#Q([1-9][0-9]*)(?![0-9A-Za-z_])")
#: The shape every sub-task id must have, so that ``#E<n>`` can name it.
SUBTASK_ID_PATTERN = re.compile(r"E[1-9][0-9]*")


class ReferenceError_(OrchestraError):  # noqa: N801 - trailing underscore avoids the builtin
    """A reference names something that does not exist (yet) or has no value."""


@dataclass(frozen=True, order=True)
class Ref:
    """One reference: ``kind`` 'M' (modal input) or 'E' (evidence), and its number."""

    kind: Literal["E", "M"]
    number: int

    @property
    def key(self) -> str:
        """The name it resolves to: 'M1' for a modal input, 'E3' for sub-task E3."""
        return f"{self.kind}{self.number}"

    @property
    def token(self) -> str:
        return f"#{self.key}"


def modal_key(index0: int) -> str:
    """The key of the modal input at 0-based position ``index0``: 0 -> 'M1'."""
    return f"M{index0 + 1}"


def next_subtask_id(ids: Iterable[str]) -> str:
    """The first id E<n> after the largest one in ``ids`` (others are ignored): E1 for none."""
    nums = [int(i[1:]) for i in ids if SUBTASK_ID_PATTERN.fullmatch(i)]
    return f"E{max(nums, default=0) + 1}"


def find_refs(text: str) -> list[Ref]:
    """Every distinct reference in ``text``, in order of first appearance."""
    seen: dict[Ref, None] = {}
    for m in REF_PATTERN.finditer(text):
        seen.setdefault(Ref(m.group(1), int(m.group(2))), None)  # type: ignore[arg-type]
    return list(seen)


def missing_refs(
    text: str,
    *,
    n_modal: int,
    evidence_ids: Collection[str],
    later_ids: Collection[str] = (),
) -> list[Ref]:
    """References in ``text`` that cannot resolve.

    ``#M<n>`` needs ``1 <= n <= n_modal``; ``#E<n>`` needs ``E<n>`` in ``evidence_ids`` (results
    that exist) or in ``later_ids`` (sub-tasks that will have finished before this text is used,
    e.g. the ancestors of a node in the same batch).
    """
    bad = []
    for ref in find_refs(text):
        if ref.kind == "M":
            ok = ref.number <= n_modal
        else:
            ok = ref.key in evidence_ids or ref.key in later_ids
        if not ok:
            bad.append(ref)
    return bad


def substitute(text: str, values: Mapping[str, Any], *, code: bool = False) -> str:
    """Replace every ``#M<n>``/``#E<n>`` in ``text`` with ``values['M<n>']``/``values['E<n>']``.

    Raises :class:`ReferenceError_` naming the first reference that has no value.
    """

    def repl(m: re.Match[str]) -> str:
        key = m.group(1) + m.group(2)
        if key not in values:
            known = ", ".join(f"#{k}" for k in sorted(values)) or "none"
            raise ReferenceError_(f"#{key} does not exist yet (known: {known})")
        try:
            return format_value(values[key], code=code)
        except ValueFormatError as e:
            raise ReferenceError_(f"#{key}: {e}") from e

    return REF_PATTERN.sub(repl, text)


def ref_keys(texts: Iterable[str]) -> set[str]:
    """The keys ('E1', 'M2', ...) referenced anywhere in ``texts``."""
    return {ref.key for text in texts for ref in find_refs(text)}


# a quoted phrase, a run of capitalised words, a number, or any other word
_SPAN_TOKEN = re.compile(r'"(?P<quoted>[^"\n]{1,80})"|(?P<word>[A-Za-z][A-Za-z0-9\'-]*|[0-9]+(?:\.[0-9]+)?)')
_SENTENCE_END = re.compile(r"[.!?]\s*$")


def _span_matches(
    question: str, vocabulary: Collection[str], plain: Collection[str]
) -> list[tuple[int, int, str]]:
    """``(start, end, value)`` of every span occurrence in ``question``, in order (see question_spans)."""
    vocab = {v.casefold(): v for v in vocabulary}
    plain = {w.casefold() for w in plain}
    out: list[tuple[int, int, str]] = []
    tokens = list(_SPAN_TOKEN.finditer(question))
    k = 0
    while k < len(tokens):
        m = tokens[k]
        if m.group("quoted") is not None:
            out.append((m.start(), m.end(), m.group("quoted").strip()))
            k += 1
            continue
        word = m.group("word")
        low = word.casefold()
        opens_sentence = _SENTENCE_END.search(question[: m.start()] or ".") is not None
        singular = low[:-1] if low.endswith("s") else low
        if low in vocab or singular in vocab:
            out.append((m.start(), m.end(), vocab.get(low) or vocab[singular]))
        elif word[0].isdigit():
            out.append((m.start(), m.end(), word))
        elif word[0].isupper() and low not in plain and not opens_sentence:
            end = k  # a name of several capitalised words is one span
            while (
                end + 1 < len(tokens)
                and (w := tokens[end + 1].group("word")) is not None
                and w[0].isupper()
                and question[tokens[end].end() : tokens[end + 1].start()] == " "
            ):
                end += 1
            out.append((m.start(), tokens[end].end(), question[m.start() : tokens[end].end()]))
            k = end + 1
            continue
        k += 1
    return out


def question_spans(question: str, vocabulary: Collection[str] = (), plain: Collection[str] = ()) -> list[str]:
    """The spans of ``question`` that ``#Q1``, ``#Q2``, ... name, distinct, in order of first appearance:
    quoted phrases, names (runs of capitalised words not opening a sentence, none of them a word of
    ``plain``: e.g. 'Morse' and 'DTMF', which the goal grammar spells itself), numbers, and words of
    ``vocabulary`` (the closed argument values of the tools, e.g. colour and shape names; a plural
    ``-s`` is dropped, so the value is the tool's own word). A deterministic function of the
    question, so a policy, its training targets and the runtime agree on the numbering."""
    return list(dict.fromkeys(value for _, _, value in _span_matches(question, vocabulary, plain)))


def mark_question(question: str, vocabulary: Collection[str] = (), plain: Collection[str] = ()) -> str:
    """``question`` with each span occurrence followed by its reference: ``the yellow #Q1 squares #Q2``."""
    spans = question_spans(question, vocabulary, plain)
    out, last = [], 0
    for _start, end, value in _span_matches(question, vocabulary, plain):
        out += [question[last:end], f" #Q{spans.index(value) + 1}"]
        last = end
    return "".join([*out, question[last:]])


def substitute_spans(text: str, spans: Sequence[str]) -> str:
    """``text`` with every ``#Q<n>`` replaced by the n-th of ``spans``; :class:`ReferenceError_` for a
    reference beyond them."""

    def repl(m: re.Match[str]) -> str:
        n = int(m.group(1))
        if n > len(spans):
            raise ReferenceError_(f"#Q{n} names no span of the question (it has {len(spans)})")
        return spans[n - 1]

    return QUESTION_REF.sub(repl, text)
