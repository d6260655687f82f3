"""The tool seam: Observation, the Tool base (one abstract method, `run`) and the ToolRegistry."""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from orchestra.errors import OrchestraError, ToolError


class Observation(BaseModel):
    """What a tool hands back: text the agent reads, structured data, and accounting."""

    model_config = ConfigDict(extra="forbid")

    tool: str
    ok: bool = True
    text: str = Field(description="what the agent reads")
    data: dict[str, Any] = Field(default_factory=dict, description="structured result")
    error: str | None = None
    latency_s: float = 0.0
    cost: float = 0.0


class Tool(ABC):
    """A tool. Subclasses set ``name``, ``description``, ``input_schema`` and implement ``run``.

    Call tools through :meth:`__call__`: it times the run and turns any failure into an error
    Observation the agent can read, so a bad input never crashes the caller.
    """

    name: ClassVar[str]
    description: ClassVar[str]
    input_schema: ClassVar[dict[str, Any]]
    cost_per_call: ClassVar[float] = 0.0

    @abstractmethod
    def run(self, **kwargs: Any) -> Observation:
        """Do the work; may raise OrchestraError (or OSError/ValueError) on bad input."""

    def __call__(self, **kwargs: Any) -> Observation:
        start = time.perf_counter()
        try:
            missing = [k for k in self.input_schema.get("required", []) if k not in kwargs]
            if missing:
                raise ToolError(f"missing required argument(s) {missing} for tool {self.name!r}")
            obs = self.run(**kwargs)
        except (OrchestraError, OSError, ValueError, TypeError, KeyError) as e:
            obs = self.failure(f"{type(e).__name__}: {e}")
        obs.latency_s = time.perf_counter() - start
        obs.cost = obs.cost or self.cost_per_call
        return obs

    def failure(self, message: str, **data: Any) -> Observation:
        return Observation(
            tool=self.name, ok=False, text=f"[{self.name} failed] {message}", error=message, data=data
        )

    def spec(self) -> dict[str, Any]:
        """The tool as an OpenAI-style function spec."""
        return {"name": self.name, "description": self.description, "parameters": self.input_schema}


class ToolRegistry:
    """Tools by name. Duplicate names are refused; an unknown name lists the valid ones."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            self.register(tool)

    def register(self, tool: Tool) -> None:
        if tool.name in self._tools:
            raise ToolError(f"a tool named {tool.name!r} is already registered")
        self._tools[tool.name] = tool

    def get(self, name: str) -> Tool:
        try:
            return self._tools[name]
        except KeyError:
            raise ToolError(f"unknown tool {name!r}; valid tools: {', '.join(sorted(self._tools))}") from None

    def names(self) -> list[str]:
        return sorted(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self._tools[n] for n in self.names())

    def __len__(self) -> int:
        return len(self._tools)
