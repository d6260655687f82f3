"""The backend seam: sub-task inputs/results, cost and latency models, the Backend base and registry."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from orchestra.config import BackendSpec, LatencySpec, PriceSpec
from orchestra.errors import OrchestraError
from orchestra.schemas import ModalInput, SubTask
from orchestra.tools.base import Observation, Tool

__all__ = [
    "DEFAULT_EST_TOKENS",
    "Backend",
    "BackendCard",
    "BackendError",
    "BackendFactory",
    "BackendRegistry",
    "CostModel",
    "LatencyProfile",
    "SubResult",
    "SubTaskInput",
    "ToolCall",
    "registry_from_params",
]

#: Tokens assumed per sub-task call when estimating cost/latency before the call is made.
DEFAULT_EST_TOKENS = 1000


class BackendError(OrchestraError):
    """A backend cannot be built or looked up (a failing backend *run* is a failed SubResult)."""


class CostModel(PriceSpec):
    """Price of one call: ``per_call + per_1k_input_tokens*in/1000 + per_1k_output_tokens*out/1000``."""

    def price(self, input_tokens: int = 0, output_tokens: int = 0) -> float:
        return (
            self.per_call
            + self.per_1k_input_tokens * input_tokens / 1000.0
            + self.per_1k_output_tokens * output_tokens / 1000.0
        )

    def estimate(self, tokens: int = DEFAULT_EST_TOKENS) -> float:
        """Expected price before the call: ``tokens`` split 3:1 between prompt and completion."""
        return self.price(input_tokens=tokens * 3 // 4, output_tokens=tokens - tokens * 3 // 4)


class LatencyProfile(LatencySpec):
    """Expected seconds of one call: ``base_s + per_1k_tokens_s * tokens / 1000``."""

    def estimate(self, tokens: int = DEFAULT_EST_TOKENS) -> float:
        return self.base_s + self.per_1k_tokens_s * tokens / 1000.0


class ToolCall(BaseModel):
    """One tool call a sub-agent made, as recorded in evidence and accounting."""

    model_config = ConfigDict(extra="forbid")

    tool: str
    args: dict[str, Any] = Field(default_factory=dict)
    ok: bool = True
    text: str = Field("", description="the observation text, possibly shortened")
    latency_s: float = Field(0.0, ge=0)
    cost: float = Field(0.0, ge=0)

    @classmethod
    def from_observation(cls, args: Mapping[str, Any], obs: Observation, max_chars: int = 500) -> ToolCall:
        text = obs.text if len(obs.text) <= max_chars else obs.text[: max_chars - 1] + "…"
        return cls(
            tool=obs.tool, args=dict(args), ok=obs.ok, text=text, latency_s=obs.latency_s, cost=obs.cost
        )


class SubResult(BaseModel):
    """What a sub-agent hands back for one sub-task attempt.

    ``ok=False`` (with ``error``) is a failure the scheduler records and may retry, exactly like an
    exception raised by the runner. ``value`` is what ``#E<n>`` resolves to; ``claim`` is the
    sentence the orchestrator reads.
    """

    model_config = ConfigDict(extra="forbid")

    ok: bool = True
    value: Any = None
    claim: str = ""
    sources: list[str] = Field(default_factory=list)
    tool_calls: list[ToolCall] = Field(default_factory=list)
    backend: str | None = None
    input_tokens: int = Field(0, ge=0)
    output_tokens: int = Field(0, ge=0)
    cost: float = Field(0.0, ge=0, description="the backend's own price for this attempt (tools excluded)")
    error: str | None = None
    confidence: float | None = Field(
        None, ge=0, le=1, description="how sure the expert is of the value (a tool's confidence); None: n/a"
    )
    routing: dict[str, Any] | None = Field(None, description="why this backend ran it (score terms)")

    @property
    def total_cost(self) -> float:
        return self.cost + sum(c.cost for c in self.tool_calls)


class SubTaskInput(BaseModel):
    """Everything one sub-agent gets: its own copy, shared with no other running sub-task."""

    model_config = ConfigDict(extra="forbid")

    question: str = Field(description="the user's question q, for context")
    subtask: SubTask = Field(description="the node, its goal with #M/#E references already substituted")
    modal_inputs: dict[str, ModalInput] = Field(
        default_factory=dict, description="the inputs the modality mask allows, by key 'M1', 'M2', ..."
    )
    media_root: str | None = Field(None, description="folder the modal input paths are relative to")
    dependencies: dict[str, SubResult] = Field(
        default_factory=dict, description="results of the sub-tasks it depends on, by id"
    )
    max_steps: int = Field(6, ge=1)
    seed: int = Field(0, ge=0)


class BackendCard(BaseModel):
    """A backend as the orchestrator sees it in its state (plain data)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    kind: str
    description: str = ""
    skills: dict[str, float]
    price_per_call: float
    latency_s: float


class Backend(ABC):
    """A sub-agent backend: a name, a skill vector in [0, 1], a cost model and a latency profile.

    The one abstract method is the coroutine :meth:`run`. Implementations with blocking work
    (tool programs, a local model) should push it to a thread with ``asyncio.to_thread`` so that
    sub-tasks of one batch overlap in time. ``run`` may raise an OrchestraError or return
    ``SubResult(ok=False, error=...)``; the scheduler records either as a failed attempt. Any other
    exception is a bug and propagates out of the run.
    """

    kind: ClassVar[str] = "builtin"

    def __init__(
        self,
        name: str,
        skills: Mapping[str, float],
        cost: PriceSpec | None = None,
        latency: LatencySpec | None = None,
        description: str = "",
    ) -> None:
        if not name:
            raise BackendError("a backend needs a name")
        bad = {k: v for k, v in skills.items() if not 0.0 <= float(v) <= 1.0}
        if bad:
            raise BackendError(f"backend {name!r}: skill levels must lie in [0, 1], got {bad}")
        self.name = name
        self.skills: dict[str, float] = {k: float(skills[k]) for k in sorted(skills)}
        self.cost = CostModel.model_validate((cost or PriceSpec()).model_dump())
        self.latency = LatencyProfile.model_validate((latency or LatencySpec()).model_dump())
        self.description = description

    @abstractmethod
    async def run(self, task: SubTaskInput, tools: Sequence[Tool]) -> SubResult:
        """Solve ``task.subtask.goal`` with ``tools``; report value, claim, tool calls and tokens."""

    def skill_names(self) -> list[str]:
        """The skills it has (level > 0), sorted: what Maestro's ``Model@@Skill`` may name."""
        return [k for k, v in self.skills.items() if v > 0]

    def card(self) -> BackendCard:
        return BackendCard(
            name=self.name,
            kind=self.kind,
            description=self.description,
            skills={k: v for k, v in self.skills.items() if v > 0},
            price_per_call=self.cost.estimate(),
            latency_s=self.latency.estimate(),
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


class BackendRegistry:
    """Backends by name. Duplicate names are refused; an unknown name lists the valid ones."""

    def __init__(self, backends: Iterable[Backend] = ()) -> None:
        self._backends: dict[str, Backend] = {}
        for backend in backends:
            self.register(backend)

    def register(self, backend: Backend) -> None:
        if backend.name in self._backends:
            raise BackendError(f"a backend named {backend.name!r} is already registered")
        self._backends[backend.name] = backend

    def get(self, name: str) -> Backend:
        try:
            return self._backends[name]
        except KeyError:
            valid = ", ".join(self.names()) or "none"
            raise BackendError(f"unknown backend {name!r}; valid backends: {valid}") from None

    def names(self) -> list[str]:
        return sorted(self._backends)

    def cards(self) -> list[BackendCard]:
        return [b.card() for b in self]

    def skills_by_backend(self) -> dict[str, frozenset[str]]:
        """name -> skill names, the shape decision validation wants."""
        return {b.name: frozenset(b.skill_names()) for b in self}

    def __contains__(self, name: object) -> bool:
        return name in self._backends

    def __iter__(self) -> Iterator[Backend]:
        return iter([self._backends[n] for n in self.names()])

    def __len__(self) -> int:
        return len(self._backends)


#: Builds one backend of a kind from its params entry: ``factory(name, spec) -> Backend``.
BackendFactory = Callable[[str, BackendSpec], Backend]


def registry_from_params(
    specs: Mapping[str, BackendSpec], factories: Mapping[str, BackendFactory]
) -> BackendRegistry:
    """Build the pool B from ``params.agent.backends`` with one factory per backend kind."""
    registry = BackendRegistry()
    for name in sorted(specs):
        spec = specs[name]
        if spec.kind not in factories:
            kinds = ", ".join(sorted(factories)) or "none"
            raise BackendError(f"backend {name!r}: no factory for kind {spec.kind!r}; available: {kinds}")
        backend = factories[spec.kind](name, spec)
        if backend.name != name:
            raise BackendError(f"factory for {spec.kind!r} built {backend.name!r} when asked for {name!r}")
        registry.register(backend)
    return registry
