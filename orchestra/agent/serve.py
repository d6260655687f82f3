"""A loopback OpenAI-compatible server (`/v1/models`, `/v1/chat/completions`): a local model or a script.

Responders:

- :class:`ModelResponder` answers with a :class:`~orchestra.backends.openai_backend.ChatClient`
  (e.g. a local transformers model directory).
- :class:`ScriptedResponder` replays a JSONL script, one reply per request, for protocol tests.
  Each line is an object with any of ``content`` (text), ``tool_calls`` (``[{"name", "arguments"}]``,
  arguments an object or a JSON string), ``delay_s`` (sleep before answering), ``status`` (an HTTP
  error status to answer with) and ``raw`` (a body sent verbatim instead of JSON — garbage). The
  requests it received are kept in ``requests`` (tests check the tool-call round trip with them).
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Protocol

from orchestra.backends.goals import count_tokens
from orchestra.backends.openai_backend import ChatClient
from orchestra.errors import OrchestraError

__all__ = ["ModelResponder", "Reply", "Responder", "ScriptedResponder", "Server", "start_server"]


class ServeError(OrchestraError):
    """The server cannot start, or its script is unreadable."""


@dataclass
class Reply:
    """What the server sends for one request."""

    status: int = 200
    body: bytes = b""
    delay_s: float = 0.0


class Responder(Protocol):
    model: str

    def reply(self, request: Mapping[str, Any]) -> Reply: ...


def _completion(model: str, request: Mapping[str, Any], content: str, calls: list[dict[str, Any]]) -> bytes:
    msg: dict[str, Any] = {"role": "assistant", "content": content or None}
    if calls:
        msg["tool_calls"] = [
            {
                "id": f"call_{uuid.uuid4().hex[:12]}",
                "type": "function",
                "function": {
                    "name": c["name"],
                    "arguments": c["arguments"]
                    if isinstance(c.get("arguments"), str)
                    else json.dumps(c.get("arguments") or {}),
                },
            }
            for c in calls
        ]
    prompt = sum(count_tokens(str(m.get("content") or "")) for m in request.get("messages", []))
    data = {
        "id": f"chatcmpl-{uuid.uuid4().hex[:16]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": msg, "finish_reason": "tool_calls" if calls else "stop"}],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": count_tokens(content or json.dumps(calls)),
            "total_tokens": prompt + count_tokens(content or json.dumps(calls)),
        },
    }
    return json.dumps(data).encode()


@dataclass
class ScriptedResponder:
    """Replies from a script (see the module docstring); running out answers HTTP 500."""

    script: list[dict[str, Any]]
    model: str = "scripted"
    requests: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._next = 0

    @classmethod
    def from_jsonl(cls, path: Path, model: str = "scripted") -> ScriptedResponder:
        try:
            lines = [json.loads(x) for x in Path(path).read_text(encoding="utf-8").splitlines() if x.strip()]
        except (OSError, json.JSONDecodeError) as e:
            raise ServeError(f"{path}: cannot read the reply script: {e}") from e
        return cls(lines, model)

    def reply(self, request: Mapping[str, Any]) -> Reply:
        with self._lock:
            self.requests.append(dict(request))
            if self._next >= len(self.script):
                return Reply(500, json.dumps({"error": {"message": "reply script exhausted"}}).encode())
            item = self.script[self._next]
            self._next += 1
        delay = float(item.get("delay_s", 0.0))
        if "raw" in item:
            return Reply(int(item.get("status", 200)), str(item["raw"]).encode(), delay)
        if "status" in item and int(item["status"]) != 200:
            body = json.dumps({"error": {"message": item.get("content", "scripted error")}}).encode()
            return Reply(int(item["status"]), body, delay)
        body = _completion(
            self.model, request, str(item.get("content") or ""), list(item.get("tool_calls") or [])
        )
        return Reply(200, body, delay)


@dataclass
class ModelResponder:
    """Replies with a chat client (a local model): the generated text, never a tool call."""

    client: ChatClient
    model: str = "local"

    def reply(self, request: Mapping[str, Any]) -> Reply:
        messages: Sequence[Mapping[str, Any]] = request.get("messages") or []
        tools = [t.get("function", t) for t in request.get("tools") or []]
        res = self.client.chat(messages, tools or None)
        return Reply(200, _completion(self.model, request, res.content, []))


def _handler(responder: Responder) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
            return

        def _send(self, reply: Reply) -> None:
            if reply.delay_s:
                time.sleep(reply.delay_s)
            try:
                self.send_response(reply.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply.body)))
                self.end_headers()
                self.wfile.write(reply.body)
            except (BrokenPipeError, ConnectionResetError):  # the client gave up (its timeout)
                return

        def do_GET(self) -> None:  # noqa: N802 - stdlib name
            if self.path.rstrip("/") == "/v1/models":
                body = {
                    "object": "list",
                    "data": [{"id": responder.model, "object": "model", "owned_by": "orchestra"}],
                }
                self._send(Reply(200, json.dumps(body).encode()))
            else:
                self._send(Reply(404, b'{"error": {"message": "not found"}}'))

        def do_POST(self) -> None:  # noqa: N802 - stdlib name
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            if self.path.rstrip("/") != "/v1/chat/completions":
                self._send(Reply(404, b'{"error": {"message": "not found"}}'))
                return
            try:
                request = json.loads(raw)
                if not isinstance(request, dict) or not isinstance(request.get("messages"), list):
                    raise ValueError("body needs a 'messages' list")
            except (json.JSONDecodeError, ValueError) as e:
                self._send(Reply(400, json.dumps({"error": {"message": f"bad request: {e}"}}).encode()))
                return
            try:
                reply = responder.reply(request)
            except OrchestraError as e:
                reply = Reply(500, json.dumps({"error": {"message": str(e)}}).encode())
            self._send(reply)

    return Handler


class Server:
    """A running loopback server; ``url`` is the OpenAI base URL (``http://127.0.0.1:PORT/v1``)."""

    def __init__(self, responder: Responder, host: str = "127.0.0.1", port: int = 0) -> None:
        try:
            self.httpd = ThreadingHTTPServer((host, port), _handler(responder))
        except OSError as e:
            raise ServeError(f"cannot listen on {host}:{port}: {e}") from e
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="orchestra-serve", daemon=True)
        self.responder = responder

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def start(self) -> Server:
        self.thread.start()
        return self

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def start_server(responder: Responder, host: str = "127.0.0.1", port: int = 0) -> Server:
    """Start serving ``responder`` in a background thread (port 0: a free port)."""
    return Server(responder, host, port).start()
