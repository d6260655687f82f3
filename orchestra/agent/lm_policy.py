"""The LM policy: a chat model (OpenAI-compatible endpoint or local model) with validation and retries."""

from __future__ import annotations

from collections.abc import Sequence

from orchestra.agent.decision import Action, DecisionError, ErrorKind, Format, ParseError, parse_decision
from orchestra.agent.policies import Policy, PolicyReply
from orchestra.agent.state import OrchestraState, render_state, validation_context
from orchestra.backends.openai_backend import ChatClient, LMError

__all__ = ["LMPolicy"]


class LMPolicy(Policy):
    """Asks ``client`` for a decision on the rendered state, parses and validates it (format and
    validity in the state), and on a bad output asks again with the problem named, at most
    ``max_retries`` extra times. A transport failure (timeout, HTTP error, non-JSON body) counts as
    an attempt too. ``respond`` returns the last raw output with its error when every attempt failed,
    so the system records an invalid decision instead of crashing."""

    blocking = True

    def __init__(
        self,
        client: ChatClient,
        *,
        fmt: Format = "json",
        max_retries: int = 2,
        name: str = "lm",
        state_tokens: int = 2048,
    ) -> None:
        self.client, self.fmt, self.max_retries, self.name = client, fmt, max_retries, name
        self.state_tokens = state_tokens

    def decide(self, state: OrchestraState) -> Action:
        reply = self.respond(state, render_state(state, self.state_tokens, fmt=self.fmt))
        if reply.action is None:
            raise DecisionError(ParseError(kind=ErrorKind.BAD_FORMAT, reason=reply.error or "no decision"))
        return reply.action

    def respond(self, state: OrchestraState, messages: Sequence[dict[str, str]]) -> PolicyReply:
        convo: list[dict[str, str]] = [dict(m) for m in messages]
        ctx = validation_context(state)
        tin = tout = 0
        raw, error = "", "no attempt made"
        for attempt in range(1, self.max_retries + 2):
            try:
                res = self.client.chat(convo)
            except LMError as e:
                error = f"model call failed: {e}"
                continue
            tin, tout = tin + res.prompt_tokens, tout + res.completion_tokens
            raw = res.content
            parsed = parse_decision(raw, fmt=self.fmt, context=ctx)
            if not isinstance(parsed, ParseError):
                return PolicyReply(
                    action=parsed, raw_output=raw, input_tokens=tin, output_tokens=tout, attempts=attempt
                )
            error = str(parsed)
            convo += [
                {"role": "assistant", "content": raw},
                {
                    "role": "user",
                    "content": f"That is not a valid decision ({error}). Reply again, "
                    "with exactly one decision in the required format.",
                },
            ]
        return PolicyReply(
            action=None,
            raw_output=raw,
            error=error,
            input_tokens=tin,
            output_tokens=tout,
            attempts=self.max_retries + 1,
        )
