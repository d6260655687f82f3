"""Accounting: tokens, cost and latency per call, totalled per policy, per backend and per tool."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from orchestra.agent.memory import Evidence
from orchestra.backends.base import CostModel, ToolCall
from orchestra.config import PriceSpec

__all__ = ["CallKind", "Ledger", "Usage"]

CallKind = Literal["policy", "backend", "tool"]


class Usage(BaseModel):
    """Totals over a set of calls."""

    model_config = ConfigDict(extra="forbid")

    calls: int = Field(0, ge=0)
    failures: int = Field(0, ge=0)
    input_tokens: int = Field(0, ge=0)
    output_tokens: int = Field(0, ge=0)
    cost: float = Field(0.0, ge=0)
    latency_s: float = Field(0.0, ge=0, description="summed call time (not wall time: calls overlap)")

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def add(self, other: Usage) -> None:
        self.calls += other.calls
        self.failures += other.failures
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.cost += other.cost
        self.latency_s += other.latency_s


class Ledger:
    """Every call of one task run, by kind and name. Tool prices come from the price table
    (``params.agent.tool_prices``) when listed there, else from the tool's own reported cost;
    policy calls are priced with ``policy_price``; backend costs are what the backend reported."""

    def __init__(
        self, tool_prices: Mapping[str, PriceSpec] | None = None, policy_price: PriceSpec | None = None
    ) -> None:
        self.tool_prices = {
            k: CostModel.model_validate(v.model_dump()) for k, v in (tool_prices or {}).items()
        }
        self.policy_price = CostModel.model_validate((policy_price or PriceSpec()).model_dump())
        self._usage: dict[tuple[CallKind, str], Usage] = {}

    def record(
        self,
        kind: CallKind,
        name: str,
        *,
        input_tokens: int = 0,
        output_tokens: int = 0,
        cost: float = 0.0,
        latency_s: float = 0.0,
        ok: bool = True,
    ) -> Usage:
        """Add one call; returns the Usage of that call."""
        call = Usage(
            calls=1,
            failures=0 if ok else 1,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cost=cost,
            latency_s=latency_s,
        )
        self._usage.setdefault((kind, name), Usage()).add(call)
        return call

    def record_policy(self, name: str, input_tokens: int, output_tokens: int, latency_s: float) -> Usage:
        """One orchestrator decision, priced with the policy price."""
        cost = self.policy_price.price(input_tokens, output_tokens)
        return self.record(
            "policy",
            name,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cost=cost,
            latency_s=latency_s,
        )

    def record_evidence(self, evidence: Iterable[Evidence]) -> None:
        """Book each sub-task's backend call and every tool call it made (skipped ones made none)."""
        for e in evidence:
            if e.status == "skipped" or e.attempts == 0:
                continue
            self.record(
                "backend",
                e.backend or "(unassigned)",
                input_tokens=e.input_tokens,
                output_tokens=e.output_tokens,
                cost=e.cost,
                latency_s=e.latency_s,
                ok=e.ok,
            )
            for c in e.tool_calls:
                self.record("tool", c.tool, cost=self.tool_cost(c), latency_s=c.latency_s, ok=c.ok)

    def tool_cost(self, call: ToolCall) -> float:
        """A tool call's price: the price table's where it lists the tool, else what the tool reported."""
        price = self.tool_prices.get(call.tool)
        return price.price() if price else call.cost

    def by(self, kind: CallKind) -> dict[str, Usage]:
        return {name: u.model_copy() for (k, name), u in sorted(self._usage.items()) if k == kind}

    def total(self, kind: CallKind | None = None) -> Usage:
        out = Usage()
        for (k, _), u in self._usage.items():
            if kind is None or k == kind:
                out.add(u)
        return out

    def summary(self) -> dict[str, Any]:
        """JSON-able totals: overall, per kind and per name."""
        return {
            "total": self.total().model_dump(),
            **{
                kind: {name: u.model_dump() for name, u in self.by(kind).items()}
                for kind in ("policy", "backend", "tool")
            },
        }
