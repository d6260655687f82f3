"""Orchestrator policies: the Policy seam (decide + how a state is rendered for it), scripted, oracle."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

from orchestra.agent.decision import (
    Action,
    DecisionError,
    Format,
    ParseError,
    parse_decision,
    render_decision,
    resolve,
)
from orchestra.agent.expert import ExpertMode, Routing, expert_decision
from orchestra.agent.state import OrchestraState, Style, render_state, validation_context
from orchestra.config import AgentParams
from orchestra.errors import OrchestraError
from orchestra.schemas import SolutionStep, Task
from orchestra.text import count_tokens

__all__ = [
    "OraclePolicy",
    "Policy",
    "PolicyError",
    "PolicyReply",
    "ScriptedPolicy",
    "oracle_for",
]


class PolicyError(OrchestraError):
    """A policy cannot be built or has nothing left to say (a bad *output* is a ParseError instead)."""


@dataclass
class PolicyReply:
    """One decision call: the action (None when the output was unusable), the raw text, and its cost."""

    action: Action | None = None
    raw_output: str = ""
    error: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    attempts: int = 1


class Policy(ABC):
    """``decide(state) -> Action``: the one abstract method. ``respond`` wraps it with the raw text
    and token counts that trajectories record; LM policies override ``respond`` to add retries.

    How a state is shown to the policy is the policy's own: :meth:`render` renders it in ``style``
    (``verbose`` for LLMs, ``compact`` for a small trained policy) within one budget counted by
    :meth:`count_tokens` — the reader's tokenizer where it has one (the regex counter otherwise):
    ``agent.state_tokens``, capped at ``context_tokens - agent.decision_tokens`` when the reader's
    context length is known.
    """

    name: str = "policy"
    fmt: Format = "json"
    style: Style = "verbose"
    context_tokens: int | None = None
    blocking: bool = False  # True: respond waits on I/O or a model, so systems run it in a thread

    def count_tokens(self, text: str) -> int:
        return count_tokens(text)

    def state_budget(self, agent: AgentParams) -> int:
        """Tokens the rendered state may take for this reader."""
        if self.context_tokens is None:
            return agent.state_tokens
        return max(1, min(agent.state_tokens, self.context_tokens - agent.decision_tokens))

    def render(self, state: OrchestraState, agent: AgentParams) -> list[dict[str, str]]:
        """``[system, user]`` messages of ``state`` for this policy (see :func:`render_state`)."""
        return render_state(
            state,
            self.state_budget(agent),
            fmt=self.fmt,
            style=self.style,
            counter=self.count_tokens,
            evidence_tokens=agent.evidence_tokens,
        )

    @abstractmethod
    def decide(self, state: OrchestraState) -> Action:
        """The next decision for ``state`` (Delegate, Finish, or a Maestro search)."""

    def respond(self, state: OrchestraState, messages: Sequence[dict[str, str]]) -> PolicyReply:
        action = self.decide(state)
        raw = render_decision(action, self.fmt)
        return PolicyReply(
            action=action,
            raw_output=raw,
            input_tokens=sum(self.count_tokens(m["content"]) for m in messages),
            output_tokens=self.count_tokens(raw),
        )


class ScriptedPolicy(Policy):
    """Replays fixed outputs in order: actions, or raw texts parsed in the policy's format (so a test
    can feed garbage). Running out of script is an error."""

    def __init__(self, script: Sequence[Action | str], fmt: Format = "json", name: str = "scripted") -> None:
        self.script = list(script)
        self.fmt, self.name = fmt, name
        self._next = 0

    def _pop(self) -> Action | str:
        if self._next >= len(self.script):
            raise PolicyError(f"scripted policy ran out of its {len(self.script)} outputs")
        item = self.script[self._next]
        self._next += 1
        return item

    def _parse(self, text: str, state: OrchestraState) -> Action | ParseError:
        """``text`` parsed, its redo lines and span references resolved in ``state`` (as an LM policy's
        output is); the runtime validates it."""
        parsed = parse_decision(text, fmt=self.fmt)
        return parsed if isinstance(parsed, ParseError) else resolve(parsed, validation_context(state))

    def decide(self, state: OrchestraState) -> Action:
        item = self._pop()
        if isinstance(item, str):
            parsed = self._parse(item, state)
            if isinstance(parsed, ParseError):
                raise DecisionError(parsed)
            return parsed
        return item

    def respond(self, state: OrchestraState, messages: Sequence[dict[str, str]]) -> PolicyReply:
        item = self._pop()
        tin = sum(self.count_tokens(m["content"]) for m in messages)
        if isinstance(item, str):
            parsed = self._parse(item, state)
            error = str(parsed) if isinstance(parsed, ParseError) else None
            action = None if isinstance(parsed, ParseError) else parsed
            return PolicyReply(
                action=action,
                raw_output=item,
                error=error,
                input_tokens=tin,
                output_tokens=self.count_tokens(item),
            )
        raw = render_decision(item, self.fmt)
        return PolicyReply(
            action=item, raw_output=raw, input_tokens=tin, output_tokens=self.count_tokens(raw)
        )


class OraclePolicy(Policy):
    """The expert as a policy: each decision is :func:`~orchestra.agent.expert.expert_decision` on the
    task's solution program — the expert for trajectories, and the upper bound in tables (always
    labelled ``oracle``). It keeps no state of its own, so one instance may serve any number of runs
    of its task, and it reads no recorded values or gold answer: every value comes from tool runs.
    """

    name = "oracle"

    def __init__(
        self,
        task: Task,
        agent: AgentParams | None = None,
        *,
        mode: ExpertMode = "dag",
        fmt: Format = "json",
        max_attempts: int = 2,
        assign_backends: bool = True,
        routing: Routing = "selection",
        escalate: bool = True,
    ) -> None:
        if not task.solution_program:
            raise PolicyError(f"task {task.id} has no solution program for the oracle to replay")
        self.program: list[SolutionStep] = list(task.solution_program)
        self.agent = agent or AgentParams()
        self.mode, self.fmt, self.max_attempts = mode, fmt, max_attempts
        self.assign_backends = assign_backends
        self.routing, self.escalate = routing, escalate

    def decide(self, state: OrchestraState) -> Action:
        return expert_decision(
            state,
            self.program,
            mode=self.mode,
            fmt=self.fmt,
            assign_backends=self.assign_backends,
            max_attempts=self.max_attempts,
            agent=self.agent,
            routing=self.routing,
            escalate=self.escalate,
        )


def oracle_for(task: Task, system: str, agent: AgentParams | None = None) -> OraclePolicy:
    """The oracle as each system wants it: ``orchestra``/``linear`` one DAG batch, ``react`` one step
    per decision with no backend named, ``maestro`` one ``Model@@Skill`` search per decision."""
    if system in ("orchestra", "linear"):
        return OraclePolicy(task, agent, mode="dag")
    if system == "react":
        return OraclePolicy(task, agent, mode="steps", assign_backends=False)
    if system == "maestro":
        return OraclePolicy(task, agent, mode="steps", fmt="maestro")
    raise PolicyError(f"unknown system {system!r}; valid: orchestra, linear, react, maestro")
