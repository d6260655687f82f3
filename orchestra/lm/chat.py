"""The chat seam every model provider shares: ChatClient, ChatResult, LMError (factory: lm.clients)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from orchestra.errors import OrchestraError

__all__ = ["ChatClient", "ChatResult", "LMError"]


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
