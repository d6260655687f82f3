"""Params as a stage sees them: only the sections and keys its row of the stage table declares.

The lineage digests a stage's declared params, so a stage that read another one would go on being
called up to date after that one changed. :func:`scoped` hands a stage a view of the params in which
reading anything undeclared raises :class:`UndeclaredParams` at the read, naming the stage and the key.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from orchestra.errors import StageError

__all__ = ["ScopedParams", "UndeclaredParams", "scoped"]


class UndeclaredParams(StageError):
    """A stage read a params key its row of the stage table does not declare."""


class ScopedParams:
    """A params model (or one of its sections) through which only declared keys can be read.

    ``allowed`` holds dotted keys relative to the root params (``"train.sft"``, ``"agent"``); reading a
    key under an allowed one gives the real value, a section on the way to one gives another view,
    anything else raises. Dumping gives the declared keys only."""

    __slots__ = ("_model", "_prefix", "_allowed", "_stage")

    def __init__(self, model: BaseModel, allowed: frozenset[str], stage: str, prefix: str = "") -> None:
        object.__setattr__(self, "_model", model)
        object.__setattr__(self, "_allowed", allowed)
        object.__setattr__(self, "_stage", stage)
        object.__setattr__(self, "_prefix", prefix)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        value = getattr(self._model, name)
        key = self._prefix + name
        if _declared(key, self._allowed):
            return value
        if isinstance(value, BaseModel) and _on_the_way(key, self._allowed):
            return ScopedParams(value, self._allowed, self._stage, key + ".")
        declared = ", ".join(sorted(self._allowed)) or "none"
        raise UndeclaredParams(
            f"stage {self._stage} read params {key}, which its row of the stage table does not declare "
            f"(it declares: {declared}); add it to the row's params in orchestra/stages.py"
        )

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"params are read-only ({self._prefix}{name})")

    def __reduce__(self) -> tuple[Any, ...]:  # a stage's worker processes get the same view
        return (ScopedParams, (self._model, self._allowed, self._stage, self._prefix))

    def __repr__(self) -> str:
        return f"ScopedParams({self._stage}: {', '.join(sorted(self._allowed))})"

    def model_dump(self, **kwargs: Any) -> dict[str, Any]:
        """The declared keys only, nested as in the model."""
        return _dump(self._model.model_dump(**kwargs), self._allowed, self._prefix)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> ScopedParams:
        """A copy with ``update`` (keys it may read) replaced; the same view."""
        for name in update or {}:
            getattr(self, name)  # an undeclared key cannot be written either
        return ScopedParams(
            self._model.model_copy(update=update, deep=deep), self._allowed, self._stage, self._prefix
        )


def _declared(key: str, allowed: frozenset[str]) -> bool:
    """``key`` is a declared key or lies under one."""
    return any(key == a or key.startswith(a + ".") for a in allowed)


def _on_the_way(key: str, allowed: frozenset[str]) -> bool:
    """``key`` is a section some declared key lies under."""
    return any(a.startswith(key + ".") for a in allowed)


def _dump(data: dict[str, Any], allowed: frozenset[str], prefix: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in data.items():
        key = prefix + name
        if _declared(key, allowed):
            out[name] = value
        elif isinstance(value, dict) and _on_the_way(key, allowed):
            out[name] = _dump(value, allowed, key + ".")
    return out


def scoped(params: BaseModel, keys: tuple[str, ...], stage: str) -> Any:
    """``params`` as stage ``stage`` may read them: ``keys`` (its declared sections and dotted keys).
    Typed ``Any`` on purpose: stage functions take it where they take ``Params``."""
    return ScopedParams(params, frozenset(keys), stage)
