"""ReWOO-style references in decisions: `#M<n>` names the n-th modal input, `#E<n>` sub-task E<n>'s result,
`#C<n>`, `#S<n>`, `#N<n>`, `#D<n>`, `#F<n>` the n-th span of its kind in the question (:func:`question_spans`:
the n-th colour, shape, name, number or knowledge-base field named), so a policy points at a word instead
of copying it."""

from __future__ import annotations

import functools
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from orchestra.errors import OrchestraError
from orchestra.text import ValueFormatError, format_value

__all__ = [
    "SPAN_REF",
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
    "rename_refs",
    "substitute",
    "substitute_spans",
    "vocabulary_kinds",
]

#: A reference in text: ``#M1`` (1-based modal input) or ``#E3`` (the result of sub-task ``E3``).
REF_PATTERN = re.compile(r"#([EM])([1-9][0-9]*)(?![0-9A-Za-z_])")
#: A question-span reference: ``#C2`` is the second colour the question names (:func:`question_spans`);
#: any capital letter but ``E`` and ``M`` may be a span kind.
SPAN_REF = re.compile(r"#([A-DF-LN-Z][1-9][0-9]*)(?![0-9A-Za-z_])")
#: The span kinds that are not a tool's closed argument set: names (and quoted phrases), numbers, and
#: the phrases that name a knowledge-base field (:func:`question_spans`' ``phrases``).
NAME_KIND, NUMBER_KIND, FIELD_KIND = "N", "D", "F"
_RESERVED_KINDS = frozenset({"E", "M", NAME_KIND, NUMBER_KIND, FIELD_KIND})
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


_BARE_ID = re.compile(r"(?<![#0-9A-Za-z_])E[1-9][0-9]*(?![0-9A-Za-z_])")


def rename_refs(text: str, mapping: Mapping[str, str]) -> str:
    """``text`` with its ``#E<n>`` references (and bare ids, as in ``E2 did not finish``) renamed by
    ``mapping`` (old id -> new id; ids it does not name stay)."""
    text = REF_PATTERN.sub(
        lambda m: f"#{mapping.get('E' + m.group(2), 'E' + m.group(2))}" if m.group(1) == "E" else m.group(0),
        text,
    )
    return _BARE_ID.sub(lambda m: mapping.get(m.group(0), m.group(0)), text)


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


def vocabulary_kinds(values: Mapping[str, Iterable[str]]) -> dict[str, str]:
    """value -> span kind for closed argument sets given as input property -> values: a value's kind
    is its property's initial (``colour``/``color`` -> ``C``, ``shape`` -> ``S``), ``V`` where that
    letter is reserved (``E``, ``M``, names' ``N``, numbers' ``D``); a value in two properties keeps
    the first."""
    out: dict[str, str] = {}
    for prop, vals in values.items():
        kind = prop[:1].upper()
        kind = "V" if kind in _RESERVED_KINDS or not kind.isalpha() else kind
        for v in vals:
            out.setdefault(str(v), kind)
    return out


@functools.cache
def _phrase_pattern(phrases: frozenset[str]) -> re.Pattern[str]:
    """A field phrase as a question names a field: after ``the`` or a possessive (``the birth year of``,
    ``the museum's city``), not an entity's description (``the city whose name ...``); longest first."""
    alts = "|".join(re.escape(p) for p in sorted(phrases, key=lambda p: (-len(p), p)))
    return re.compile(rf"(?:(?<=\bthe )|(?<='s )|(?<=' ))({alts})(?![\w-])(?! whose\b| with its\b)", re.I)


def _phrase_matches(question: str, phrases: Mapping[str, str]) -> dict[int, tuple[int, str]]:
    """start -> (end, value) of each field phrase in ``question``."""
    if not phrases:
        return {}
    values = {p.casefold(): v for p, v in phrases.items()}
    found = _phrase_pattern(frozenset(values)).finditer(question)
    return {m.start(): (m.end(), values[m.group(1).casefold()]) for m in found}


def _span_matches(
    question: str, vocabulary: Mapping[str, str], plain: Collection[str], phrases: Mapping[str, str]
) -> list[tuple[int, int, str, str]]:
    """``(start, end, value, kind)`` of every span occurrence in ``question``, in order (see
    question_spans)."""
    vocab = {v.casefold(): (v, kind) for v, kind in vocabulary.items()}
    plain = {w.casefold() for w in plain}
    fields = _phrase_matches(question, phrases)
    out: list[tuple[int, int, str, str]] = []
    tokens = list(_SPAN_TOKEN.finditer(question))
    k = 0
    while k < len(tokens):
        m = tokens[k]
        if m.start() in fields:  # a field phrase is one span; its words are no other span
            end, value = fields[m.start()]
            out.append((m.start(), end, value, FIELD_KIND))
            while k < len(tokens) and tokens[k].start() < end:
                k += 1
            continue
        if m.group("quoted") is not None:
            out.append((m.start(), m.end(), m.group("quoted").strip(), NAME_KIND))
            k += 1
            continue
        word = m.group("word")
        low = word.casefold()
        opens_sentence = _SENTENCE_END.search(question[: m.start()] or ".") is not None
        singular = low[:-1] if low.endswith("s") else low
        if low in vocab or singular in vocab:
            out.append((m.start(), m.end(), *(vocab.get(low) or vocab[singular])))
        elif word[0].isdigit():
            out.append((m.start(), m.end(), word, NUMBER_KIND))
        elif word[0].isupper() and low not in plain and not opens_sentence:
            end = k  # a name of several capitalised words is one span
            while (
                end + 1 < len(tokens)
                and (w := tokens[end + 1].group("word")) is not None
                and w[0].isupper()
                and question[tokens[end].end() : tokens[end + 1].start()] == " "
            ):
                end += 1
            out.append((m.start(), tokens[end].end(), question[m.start() : tokens[end].end()], NAME_KIND))
            k = end + 1
            continue
        k += 1
    return out


def _keys(matches: Iterable[tuple[int, int, str, str]]) -> list[str]:
    """The key of each span occurrence: the n-th occurrence of a kind is ``<kind><n>``."""
    counts: dict[str, int] = {}
    keys = []
    for _, _, _, kind in matches:
        counts[kind] = counts.get(kind, 0) + 1
        keys.append(f"{kind}{counts[kind]}")
    return keys


def question_spans(
    question: str,
    vocabulary: Mapping[str, str] | None = None,
    plain: Collection[str] = (),
    phrases: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The spans of ``question`` by the key that names them, ``#C1`` naming the first colour: each
    kind numbered on its own, every occurrence in order (a colour named twice has two keys, so the
    second count of a colour is ``#C2`` whichever colour it is). The kinds: ``N`` quoted phrases and
    names (runs of capitalised words not opening a sentence, none of them a word of ``plain``: e.g.
    'Morse' and 'DTMF', which the goal grammar spells itself), ``D`` numbers, and the words of
    ``vocabulary`` (value -> kind, :func:`vocabulary_kinds`: the closed argument values of the tools,
    e.g. colour and shape names; a plural ``-s`` is dropped, so the value is the tool's own word), and
    ``F`` the phrases of ``phrases`` (phrase -> the knowledge-base field key it names, e.g. ``birth
    year`` -> ``born``; the span's value is the key) where the question names a field with them.
    Numbering by kind keeps a colour's key when a name or a number comes before it. A deterministic
    function of the question, so a policy, its training targets and the runtime agree on the keys."""
    matches = _span_matches(question, vocabulary or {}, plain, phrases or {})
    return {key: m[2] for key, m in zip(_keys(matches), matches, strict=True)}


def mark_question(
    question: str,
    vocabulary: Mapping[str, str] | None = None,
    plain: Collection[str] = (),
    phrases: Mapping[str, str] | None = None,
) -> str:
    """``question`` with each span occurrence followed by its key: ``the yellow #C1 squares #S1``."""
    matches = _span_matches(question, vocabulary or {}, plain, phrases or {})
    out, last = [], 0
    for key, (_start, end, _value, _kind) in zip(_keys(matches), matches, strict=True):
        out += [question[last:end], f" #{key}"]
        last = end
    return "".join([*out, question[last:]])


def substitute_spans(text: str, spans: Mapping[str, str]) -> str:
    """``text`` with every span reference (``#C1``, ``#N2``: :data:`SPAN_REF`) replaced by the span it
    names in ``spans`` (:func:`question_spans`); :class:`ReferenceError_` for a key the question lacks."""

    def repl(m: re.Match[str]) -> str:
        key = m.group(1)
        if key not in spans:
            known = ", ".join(f"#{k}" for k in spans) or "none"
            raise ReferenceError_(f"#{key} names no span of the question (its spans: {known})")
        return spans[key]

    return SPAN_REF.sub(repl, text)
