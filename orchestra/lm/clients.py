"""The chat client factory: a provider's settings in, a ready client out (nothing set after construction)."""

from __future__ import annotations

import os

from orchestra.config import ProviderSpec
from orchestra.lm.chat import ChatClient, LMError
from orchestra.lm.openai_chat import OpenAIClient
from orchestra.lm.transformers_chat import TransformersChat

__all__ = ["client_for", "openai_client"]


def _cap(spec: ProviderSpec, max_new_tokens: int | None) -> int:
    """The completion cap: the provider's ``max_new_tokens``, else the caller's, else 512."""
    return spec.max_new_tokens or max_new_tokens or 512


def openai_client(
    spec: ProviderSpec, max_new_tokens: int | None = None, *, temperature: float = 0.0
) -> OpenAIClient:
    """The HTTP client of an ``openai`` provider (its URL, model, key from ``api_key_env``, timeout,
    retries, seed, token parameter, backoff), sampling at ``temperature``; capped as :func:`client_for`.
    For callers that need what only this client has (``response_format``, ``base_url``)."""
    if spec.kind != "openai":
        raise LMError(f"provider kind {spec.kind!r} is not 'openai'")
    key = os.environ.get(spec.api_key_env) if spec.api_key_env else None
    return OpenAIClient(
        spec.base_url or "",
        spec.model or "",
        api_key=key,
        timeout_s=spec.timeout_s,
        max_retries=spec.max_retries,
        temperature=temperature,
        max_tokens=_cap(spec, max_new_tokens),
        seed=spec.seed,
        token_param=spec.token_param,
        backoff_s=spec.backoff_s,
    )


def client_for(
    spec: ProviderSpec, max_new_tokens: int | None = None, *, temperature: float = 0.0
) -> ChatClient:
    """A chat client for a provider: ``openai`` over HTTP, ``transformers`` from a local directory,
    sampling at ``temperature`` (0: greedy).

    The completion cap is the provider's ``max_new_tokens``, else ``max_new_tokens`` (a policy passes
    its decision budget, ``agent.decision_tokens``), else 512 (a sub-agent's tool-calling turn).
    """
    if spec.kind == "openai":
        return openai_client(spec, max_new_tokens, temperature=temperature)
    if spec.kind == "transformers":
        return TransformersChat(
            spec.model or "", max_new_tokens=_cap(spec, max_new_tokens), temperature=temperature
        )
    raise LMError(f"provider kind {spec.kind!r} has no chat client here (use openai or transformers)")
