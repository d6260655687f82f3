"""The `openai` (and `transformers`) backend: a sub-agent ReAct loop with tool calling on a chat client."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from orchestra.backends.base import Backend, SubResult, SubTaskInput
from orchestra.backends.builtin import ToolBox
from orchestra.backends.goals import GoalError, literal
from orchestra.config import BackendSpec, LatencySpec, PriceSpec, ProviderSpec
from orchestra.lm.chat import ChatClient, LMError
from orchestra.lm.clients import client_for
from orchestra.tools.base import Tool

__all__ = ["OpenAIBackend", "openai_factory"]


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
    (:mod:`orchestra.lm.media`); the others it reads through its tools, by path."""

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
        from orchestra.lm.media import content_parts

        root = Path(task.media_root) if task.media_root else None
        parts = content_parts(sorted(task.modal_inputs.items()), root, self.media, self.client)
        return [{"type": "text", "text": _prompt(task)}, *parts] if parts else _prompt(task)

    async def run(self, task: SubTaskInput, tools: Sequence[Tool]) -> SubResult:
        import asyncio

        from orchestra.tools.media import MediaError

        box = ToolBox(tools, max_steps=10 * task.max_steps, media_root=task.media_root)
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
