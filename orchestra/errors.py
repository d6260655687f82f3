"""The OrchestraError hierarchy: every error the library raises on purpose."""

from __future__ import annotations

from collections.abc import Mapping


class OrchestraError(Exception):
    """Base of every error Orchestra raises deliberately."""


class ConfigError(OrchestraError):
    """params.yaml is missing, unreadable or invalid."""


class RecordError(OrchestraError):
    """A record file is missing, corrupt or does not match its schema."""


class StageError(OrchestraError):
    """A pipeline stage cannot run (unknown stage, missing upstream data, bad source), or produced nothing."""

    @classmethod
    def empty(cls, stage: str, what: str, reasons: Mapping[str, int], top: int = 5) -> StageError:
        """The error of a stage whose output has no rows: ``what`` it would have written, and its
        ``top`` most frequent rejection reasons with their counts (``reasons``: reason -> count)."""
        ranked = sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))
        listed = "; ".join(f"{n} x {r}" for r, n in ranked[:top]) or "no reasons recorded"
        more = f" (+{len(ranked) - top} more reasons)" if len(ranked) > top else ""
        return cls(f"{stage} produced no {what}: {listed}{more}")


class WorldError(OrchestraError):
    """The procedural world cannot be generated or replayed."""


class ToolError(OrchestraError):
    """A tool cannot be built or looked up, or rejects its input; raised inside a run, ``Tool.__call__``
    turns it into a failed Observation the agent reads."""


class ReplyError(OrchestraError):
    """A model answered, but not with what was asked: not JSON, or not the requested schema. The item it
    was about is set aside with this reason; a failed call (transport, HTTP status) is an LMError instead."""
