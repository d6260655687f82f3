"""The chat seam every model provider shares: ChatClient, ChatResult, LMError, and client_for(provider)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from orchestra.config import ProviderSpec
from orchestra.errors import OrchestraError

__all__ = ["ChatClient", "ChatResult", "LMError", "client_for"]


class LMError(OrchestraError):
    """A model call failed: transport error, timeout, HTTP error status, or a malformed response."""


@dataclass
class ChatResult:
    """One chat completion: text, tool calls ``[{id, name, arguments (raw JSON text)}]``, token usage."""

    content: str = ""
    tool_calls: list[dict[str, str]] = field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0


class ChatClient(Protocol):
    """Anything that completes a chat: the HTTP client, or a local transformers model.

    ``count_tokens`` counts text in the model's own tokens where the client has its tokenizer
    (the regex counter of :mod:`orchestra.text` otherwise); ``context_tokens`` is the model's
    context length when known (None: unknown), so a state is rendered to fit what the reader reads.
    """

    context_tokens: int | None

    def chat(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None = None
    ) -> ChatResult: ...

    def count_tokens(self, text: str) -> int: ...


def client_for(spec: ProviderSpec, max_new_tokens: int | None = None) -> ChatClient:
    """A chat client for a provider: ``openai`` over HTTP, ``transformers`` from a local directory.

    The completion cap is the provider's ``max_new_tokens``, else ``max_new_tokens`` (a policy passes
    its decision budget, ``agent.decision_tokens``), else 512 (a sub-agent's tool-calling turn).
    """
    cap = spec.max_new_tokens or max_new_tokens or 512
    if spec.kind == "openai":
        from orchestra.backends.openai_backend import OpenAIClient

        key = os.environ.get(spec.api_key_env) if spec.api_key_env else None
        return OpenAIClient(
            spec.base_url or "",
            spec.model or "",
            api_key=key,
            timeout_s=spec.timeout_s,
            max_retries=spec.max_retries,
            max_tokens=cap,
            seed=spec.seed,
            token_param=spec.token_param,
            backoff_s=spec.backoff_s,
        )
    if spec.kind == "transformers":
        from orchestra.backends.transformers_backend import TransformersChat

        return TransformersChat(spec.model or "", max_new_tokens=cap)
    raise LMError(f"provider kind {spec.kind!r} has no chat client here (use openai or transformers)")
