"""The OpenAI-compatible chat client (stdlib urllib): retries with backoff, tool calls, transcriptions."""

from __future__ import annotations

import json
import random
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from typing import Any

from orchestra.lm.chat import ChatResult, LMError
from orchestra.text import count_tokens

__all__ = ["HTTPStatusError", "OpenAIClient"]


class HTTPStatusError(LMError):
    """An HTTP error status from the endpoint, with its ``Retry-After`` (seconds) when it sent one."""

    def __init__(self, message: str, status: int, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status, self.retry_after = status, retry_after


def _retry_after(value: str | None) -> float | None:
    """A ``Retry-After`` header (seconds, or an HTTP date) as seconds from now; None when absent or odd."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        from email.utils import parsedate_to_datetime

        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


def _retryable(e: LMError) -> bool:
    """Transport errors, timeouts, HTTP 429 and 5xx may pass; another 4xx will not."""
    return not isinstance(e, HTTPStatusError) or e.status == 429 or e.status >= 500


class OpenAIClient:
    """``POST {base_url}/chat/completions``, retried after a transport error, a timeout, HTTP 429 or 5xx
    with exponential backoff and jitter (``backoff_s``, doubled per attempt, times 0.5-1.5), waiting
    what a ``Retry-After`` header asks instead when it is longer; another 4xx fails at once.

    A remote model's tokenizer is unknown here: ``count_tokens`` is the regex counter and
    ``context_tokens`` is None (the state budget alone bounds the prompt). ``seed`` (when set) is
    sent with every request; the completion cap goes in ``token_param`` (``max_tokens``, or
    ``max_completion_tokens`` for newer hosted APIs)."""

    context_tokens: int | None = None
    #: the longest a single wait before a retry may be, whatever Retry-After says
    MAX_WAIT_S = 120.0

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 60.0,
        max_retries: int = 2,
        temperature: float = 0.0,
        max_tokens: int = 512,
        seed: int | None = None,
        token_param: str = "max_tokens",
        backoff_s: float = 1.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model, self.api_key = model, api_key
        self.timeout_s, self.max_retries = timeout_s, max_retries
        self.temperature, self.max_tokens = temperature, max_tokens
        self.seed, self.token_param, self.backoff_s = seed, token_param, backoff_s

    def count_tokens(self, text: str) -> int:
        return count_tokens(text)

    def _send(self, path: str, data: bytes, content_type: str) -> bytes:
        headers = {"Content-Type": content_type, "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        req = urllib.request.Request(self.base_url + path, data=data, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:  # noqa: S310 - configured URL
                return bytes(resp.read())
        except urllib.error.HTTPError as e:
            detail = e.read()[:300].decode("utf-8", "replace")
            wait = _retry_after(e.headers.get("Retry-After") if e.headers else None)
            raise HTTPStatusError(f"{self.base_url}{path}: HTTP {e.code}: {detail}", e.code, wait) from e
        except TimeoutError as e:
            raise LMError(f"{self.base_url}{path}: no answer within {self.timeout_s:g}s") from e
        except (urllib.error.URLError, OSError) as e:
            raise LMError(f"{self.base_url}{path}: {getattr(e, 'reason', e)}") from e

    def _wait(self, attempt: int, error: LMError) -> float:
        backoff = self.backoff_s * 2**attempt * random.uniform(0.5, 1.5)  # noqa: S311 - jitter, not crypto
        asked = error.retry_after if isinstance(error, HTTPStatusError) else None
        return min(self.MAX_WAIT_S, max(backoff, asked or 0.0))

    def post(self, path: str, data: bytes, content_type: str = "application/json") -> bytes:
        """The raw answer to ``POST {base_url}{path}``, retried as the class docstring says."""
        for attempt in range(self.max_retries + 1):
            try:
                return self._send(path, data, content_type)
            except LMError as e:
                if attempt == self.max_retries or not _retryable(e):
                    raise
                time.sleep(self._wait(attempt, e))
        raise AssertionError("unreachable: the last attempt raises")  # pragma: no cover

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        raw = self.post(path, json.dumps(body).encode())
        try:
            data = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise LMError(f"{self.base_url}{path}: the answer is not JSON: {raw[:120]!r}") from e
        if not isinstance(data, dict):
            raise LMError(f"{self.base_url}{path}: the answer is not a JSON object")
        return data

    def transcribe(self, wav: bytes, model: str, filename: str = "audio.wav") -> str:
        """The text of ``POST {base_url}/audio/transcriptions`` for a WAV file's bytes."""
        from orchestra.tools.speech_openai import multipart

        body, ctype = multipart({"model": model, "response_format": "json"}, "file", filename, wav)
        raw = self.post("/audio/transcriptions", body, ctype)
        try:
            text = json.loads(raw).get("text")
        except (json.JSONDecodeError, UnicodeDecodeError, AttributeError) as e:
            raise LMError(f"{self.base_url}/audio/transcriptions: no JSON object: {raw[:120]!r}") from e
        if not isinstance(text, str):
            raise LMError(f"{self.base_url}/audio/transcriptions: the answer has no 'text'")
        return text

    def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
        *,
        response_format: Mapping[str, Any] | None = None,
    ) -> ChatResult:
        """One completion. ``response_format`` (e.g. ``{"type": "json_schema", ...}``) is sent as is."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [dict(m) for m in messages],
            "temperature": self.temperature,
            self.token_param: self.max_tokens,
        }
        if self.seed is not None:
            body["seed"] = self.seed
        if tools:
            body["tools"] = [{"type": "function", "function": dict(t)} for t in tools]
            body["tool_choice"] = "auto"
        if response_format is not None:
            body["response_format"] = dict(response_format)
        t0 = time.perf_counter()
        data = self._post("/chat/completions", body)
        return _parse_completion(data, time.perf_counter() - t0)


def _parse_completion(data: Mapping[str, Any], latency: float) -> ChatResult:
    try:
        msg = data["choices"][0]["message"]
    except (KeyError, IndexError, TypeError) as e:
        raise LMError(f"completion without choices[0].message: {json.dumps(data)[:200]}") from e
    calls = []
    for k, c in enumerate(msg.get("tool_calls") or []):
        fn = c.get("function") or {}
        if not fn.get("name"):
            raise LMError(f"tool call {k} has no function name")
        args = fn.get("arguments", "{}")
        calls.append(
            {
                "id": str(c.get("id") or f"call_{k}"),
                "name": str(fn["name"]),
                "arguments": args if isinstance(args, str) else json.dumps(args),
            }
        )
    usage = data.get("usage") or {}
    return ChatResult(
        content=str(msg.get("content") or ""),
        tool_calls=calls,
        prompt_tokens=int(usage.get("prompt_tokens") or 0),
        completion_tokens=int(usage.get("completion_tokens") or 0),
        latency_s=latency,
    )
