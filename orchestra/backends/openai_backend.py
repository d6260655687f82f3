"""OpenAI-compatible chat client (stdlib urllib) and the `openai` backend: a ReAct loop with tool calling."""

from __future__ import annotations

import json
import os
import random
import re
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from orchestra.backends.base import Backend, SubResult, SubTaskInput
from orchestra.backends.builtin import ToolBox
from orchestra.backends.chat import ChatClient, ChatResult, LMError, client_for
from orchestra.backends.goals import GoalError, literal
from orchestra.config import BackendSpec, LatencySpec, PriceSpec, ProviderSpec
from orchestra.text import count_tokens
from orchestra.tools.base import Tool

__all__ = ["OpenAIBackend", "OpenAIClient", "openai_factory"]


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


_SYSTEM = (
    "You are a sub-agent. Solve the sub-task with the tools: call them with JSON arguments and read "
    "their results. Modal inputs are files given by path. When you know the result, reply without a "
    "tool call and end with a line 'ANSWER: <value>' holding only the value."
)
_ANSWER = re.compile(r"ANSWER:\s*(.+?)\s*\Z", re.IGNORECASE | re.DOTALL)


def _prompt(task: SubTaskInput) -> str:
    lines = [f"Question (context): {task.question}", f"Sub-task: {task.subtask.goal}"]
    for key, m in sorted(task.modal_inputs.items()):
        path = m.path if not task.media_root else os.path.join(task.media_root, m.path)
        lines.append(f"#{key}: {m.type} file at {path}")
    for dep, r in sorted(task.dependencies.items()):
        lines.append(f"#{dep} result: {r.value!r} ({r.claim})")
    return "\n".join(lines)


class OpenAIBackend(Backend):
    """A sub-agent on a chat model: OpenAI tool calling (``tools=[tool.spec()]``, results sent back as
    ``role: tool`` messages) for at most ``max_steps`` model calls; a reply without tool calls is the
    final answer (the text after ``ANSWER:``, else the whole reply). The modal inputs of the kinds
    its provider takes (``media.inputs``) go with the sub-task as content parts
    (:mod:`orchestra.backends.media`); the others it reads through its tools, by path."""

    kind = "openai"

    def __init__(
        self,
        name: str,
        client: ChatClient,
        skills: Mapping[str, float],
        cost: PriceSpec | None = None,
        latency: LatencySpec | None = None,
        description: str = "",
        media: ProviderSpec | None = None,
    ) -> None:
        super().__init__(name, skills, cost, latency, description)
        self.client, self.media = client, media

    def _user(self, task: SubTaskInput) -> str | list[dict[str, Any]]:
        """The sub-task's message: its text, then the media its provider takes as parts."""
        from orchestra.backends.media import content_parts

        root = Path(task.media_root) if task.media_root else None
        parts = content_parts(sorted(task.modal_inputs.items()), root, self.media, self.client)
        return [{"type": "text", "text": _prompt(task)}, *parts] if parts else _prompt(task)

    async def run(self, task: SubTaskInput, tools: Sequence[Tool]) -> SubResult:
        import asyncio

        from orchestra.tools.media import MediaError

        box = ToolBox(tools, max_steps=10 * task.max_steps)
        specs = [t.spec() for t in tools]
        try:
            user = await asyncio.to_thread(self._user, task)
        except (MediaError, LMError) as e:
            return self._result(False, None, "", box, 0, 0, f"cannot send the sub-task's media: {e}")
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": _SYSTEM},
            {"role": "user", "content": user},
        ]
        tin = tout = 0
        error = f"no final answer within {task.max_steps} model calls"
        for _ in range(task.max_steps):
            try:
                res = await asyncio.to_thread(self.client.chat, messages, specs or None)
            except LMError as e:
                error = str(e)
                break
            tin, tout = tin + res.prompt_tokens, tout + res.completion_tokens
            if not res.tool_calls:
                m = _ANSWER.search(res.content)
                text = (m.group(1) if m else res.content).strip()
                if not text:
                    error = "the model replied with neither a tool call nor an answer"
                    messages += [
                        {"role": "assistant", "content": res.content},
                        {"role": "user", "content": "Reply with a tool call or 'ANSWER: <value>'."},
                    ]
                    continue
                return self._result(True, literal(text), text, box, tin, tout, None)
            messages.append(
                {
                    "role": "assistant",
                    "content": res.content or None,
                    "tool_calls": [
                        {
                            "id": c["id"],
                            "type": "function",
                            "function": {"name": c["name"], "arguments": c["arguments"]},
                        }
                        for c in res.tool_calls
                    ],
                }
            )
            for c in res.tool_calls:
                messages.append(
                    {"role": "tool", "tool_call_id": c["id"], "content": await self._call(box, c)}
                )
        return self._result(False, None, "", box, tin, tout, error)

    async def _call(self, box: ToolBox, call: Mapping[str, str]) -> str:
        try:
            args = json.loads(call["arguments"] or "{}")
        except json.JSONDecodeError as e:
            return f"error: arguments are not JSON ({e.msg}); send a JSON object"
        if not isinstance(args, dict):
            return "error: arguments must be a JSON object"
        try:
            obs = await box.call(call["name"], args)
        except GoalError as e:
            return f"error: {e}"
        return obs.text

    def _result(
        self, ok: bool, value: Any, claim: str, box: ToolBox, tin: int, tout: int, error: str | None
    ) -> SubResult:
        return SubResult(
            ok=ok,
            value=value,
            claim=claim,
            tool_calls=list(box.calls),
            backend=self.name,
            input_tokens=tin,
            output_tokens=tout,
            cost=self.cost.price(tin, tout),
            error=error,
        )


def openai_factory(providers: Mapping[str, ProviderSpec]) -> Any:
    """The ``openai``/``transformers`` kinds' factory: the backend's provider names the chat client."""

    def make(name: str, spec: BackendSpec) -> OpenAIBackend:
        if spec.provider is None or spec.provider not in providers:
            raise LMError(f"backend {name!r}: provider {spec.provider!r} is not in providers")
        provider = providers[spec.provider]
        client = client_for(provider)
        return OpenAIBackend(name, client, spec.skills, spec.price, spec.latency, spec.description, provider)

    return make
