"""The LM policy: a chat model (OpenAI-compatible endpoint or local model) with validation and retries."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from orchestra.agent.decision import Action, DecisionError, ErrorKind, Format, ParseError, parse_decision
from orchestra.agent.policies import Policy, PolicyError, PolicyReply
from orchestra.agent.state import STYLES, OrchestraState, Style, validation_context
from orchestra.config import AgentParams, ProviderSpec
from orchestra.lm.chat import ChatClient, LMError
from orchestra.lm.clients import client_for

__all__ = ["VIEW_FILE", "LMPolicy", "lm_policy", "named_provider", "sampling_copy", "saved_view"]

#: Beside a trained policy's weights: how it reads states and writes decisions ({"style", "fmt"}).
VIEW_FILE = "orchestra_policy.json"


class LMPolicy(Policy):
    """Asks ``client`` for a decision on the rendered state, parses and validates it (format and
    validity in the state), and on a bad output asks again with the problem named, at most
    ``max_retries`` extra times. A transport failure (timeout, HTTP error, non-JSON body) counts as
    an attempt too. ``respond`` returns the last raw output with its error when every attempt failed,
    so the system records an invalid decision instead of crashing.

    States are counted with the client's tokenizer and fit its context (see :class:`Policy`);
    ``agent`` gives the budgets when :meth:`decide` renders a state itself."""

    blocking = True

    def __init__(
        self,
        client: ChatClient,
        *,
        fmt: Format = "json",
        style: Style = "verbose",
        max_retries: int = 2,
        name: str = "lm",
        agent: AgentParams | None = None,
    ) -> None:
        self.client, self.fmt, self.style = client, fmt, style
        self.max_retries, self.name = max_retries, name
        self.agent = agent or AgentParams()
        self.context_tokens = client.context_tokens

    def count_tokens(self, text: str) -> int:
        return self.client.count_tokens(text)

    def decide(self, state: OrchestraState) -> Action:
        reply = self.respond(state, self.render(state, self.agent))
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


def saved_view(model_dir: str | Path) -> tuple[Style, Format] | None:
    """``(style, format)`` saved with a policy trained here (:data:`VIEW_FILE`); None for any other
    model directory."""
    f = Path(model_dir) / VIEW_FILE
    if not f.is_file():
        return None
    try:
        view = json.loads(f.read_text(encoding="utf-8"))
        style, fmt = view["style"], view["fmt"]
    except (ValueError, KeyError, TypeError) as e:
        raise PolicyError(f"{f}: not a policy view ({e})") from e
    if style not in STYLES or fmt not in ("json", "lines", "maestro"):
        raise PolicyError(f"{f}: unknown style {style!r} or format {fmt!r}")
    return style, fmt


def lm_policy(spec: ProviderSpec, agent: AgentParams, *, fmt: Format = "json", name: str = "lm") -> LMPolicy:
    """The LM policy of a provider: its chat client capped at ``agent.decision_tokens`` (unless the
    provider sets ``max_new_tokens``), rendered in the provider's ``state_style`` and writing
    ``fmt`` — or, for JSON, the provider's ``decision_format``. A ``transformers`` directory trained
    here reads and writes as it was trained (its saved view), whatever the provider says."""
    client = client_for(spec, agent.decision_tokens)
    style: Style = spec.state_style
    if fmt == "json":
        fmt = spec.decision_format
    view = saved_view(spec.model or "") if spec.kind == "transformers" else None
    if view is not None and fmt != "maestro":
        style, fmt = view
    return LMPolicy(client, fmt=fmt, style=style, name=name, agent=agent)


def named_provider(name: str, providers: Mapping[str, ProviderSpec], what: str = "policy") -> ProviderSpec:
    """The model a setting names: ``checkpoint:DIR`` (a trained model directory), ``openai:MODEL``
    (the ``openai`` provider with that model) or a key of ``providers`` of kind openai or
    transformers; a PolicyError naming ``what`` otherwise."""
    if name.startswith("checkpoint:"):
        return ProviderSpec(kind="transformers", model=name.split(":", 1)[1])
    if name.startswith("openai:"):
        base = providers.get("openai")
        if base is None or base.kind != "openai":
            raise PolicyError(f"{what} {name!r} needs an 'openai' entry in params providers (base_url)")
        return base.model_copy(update={"model": name.split(":", 1)[1]})
    if name in providers and providers[name].kind != "builtin":
        return providers[name]
    models = ", ".join(sorted(k for k, v in providers.items() if v.kind != "builtin")) or "none"
    raise PolicyError(
        f"{what} {name!r} is not a model: checkpoint:DIR, openai:MODEL or a key of params providers of "
        f"kind openai or transformers ({models})"
    )


def sampling_copy(policy: LMPolicy, temperature: float, seed: int) -> LMPolicy:
    """The same policy sampling at ``temperature`` with ``seed`` (a local model shares its weights;
    a remote client sends both in its request)."""
    import copy

    p = copy.copy(policy)
    client = copy.copy(policy.client)
    client.temperature, client.seed = temperature, seed  # type: ignore[attr-defined]
    p.client = client
    return p
