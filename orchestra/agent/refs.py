"""ReWOO-style references in decisions: `#M<n>` names the n-th modal input, `#E<n>` sub-task E<n>'s result."""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from orchestra.errors import OrchestraError
from orchestra.text import ValueFormatError, format_value

__all__ = [
    "REF_PATTERN",
    "SUBTASK_ID_PATTERN",
    "Ref",
    "ReferenceError_",
    "find_refs",
    "missing_refs",
    "modal_key",
    "next_subtask_id",
    "ref_keys",
    "substitute",
]

#: A reference in text: ``#M1`` (1-based modal input) or ``#E3`` (the result of sub-task ``E3``).
REF_PATTERN = re.compile(r"#([EM])([1-9][0-9]*)(?![0-9A-Za-z_])")
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
