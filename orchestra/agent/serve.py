"""A loopback OpenAI-compatible server (`/v1/models`, `/v1/chat/completions`: a local model or a script;
`/v1/audio/transcriptions`: the embedded speech recogniser).

Responders:

- :class:`ModelResponder` answers with a :class:`~orchestra.lm.chat.ChatClient`
  (e.g. a local transformers model directory).
- :class:`ScriptedResponder` replays a JSONL script, one reply per request, for protocol tests.
  Each line is an object with any of ``content`` (text), ``tool_calls`` (``[{"name", "arguments"}]``,
  arguments an object or a JSON string), ``delay_s`` (sleep before answering), ``status`` (an HTTP
  error status to answer with), ``headers`` (sent with it, e.g. ``Retry-After``) and ``raw`` (a body
  sent verbatim instead of JSON — garbage). A line with ``match`` (a regular expression) answers
  only a request whose text (every message's text, joined by newlines) it is found in, ``times``
  requests (default 1; 0: any number): each request gets the first line not used up that matches
  it, so a pipeline's requests may come in any order. The requests it received are kept in
  ``requests`` (tests check the tool-call round trip and the media sent with them).

A request with ``"stream": true`` gets the finished reply as OpenAI server-sent events
(``text/event-stream``, chunked): a role chunk, the content in word pieces, each tool call (id and name,
then its arguments), a ``finish_reason`` chunk, a usage chunk when ``stream_options.include_usage`` is
true, then ``data: [DONE]``. Errors and ``raw`` replies are never streamed: they keep their status and
body. ``POST /v1/audio/transcriptions`` (multipart form data: ``file``, ``model``, optional
``response_format`` json | text) answers ``{"text": ...}`` from :class:`orchestra.tools.speech.AudioSpeech`
(numbers, and the names a server is started with: ``orchestra serve --world``); audio it cannot read
is HTTP 400 with the reason. :func:`stop_on_signals` makes SIGTERM and SIGINT stop
a server blocked in :meth:`Server.wait`.
"""

from __future__ import annotations

import json
import re
import signal
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType
from typing import Any, Protocol

from orchestra.errors import OrchestraError
from orchestra.lm.chat import ChatClient
from orchestra.text import count_tokens

__all__ = [
    "ModelResponder",
    "Reply",
    "Responder",
    "ScriptedResponder",
    "Server",
    "request_text",
    "StopServing",
    "start_server",
    "stop_on_signals",
]


class ServeError(OrchestraError):
    """The server cannot start, or its script is unreadable."""


class StopServing(BaseException):  # control flow like KeyboardInterrupt, not an OrchestraError
    """Raised in the main thread by the handler :func:`stop_on_signals` installs; carries the signal name."""


@dataclass
class Reply:
    """What the server sends for one request; ``completion`` is set for a chat completion it may stream."""

    status: int = 200
    body: bytes = b""
    delay_s: float = 0.0
    completion: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)


def _error(
    status: int, message: str, delay_s: float = 0.0, headers: Mapping[str, str] | None = None
) -> Reply:
    return Reply(
        status, json.dumps({"error": {"message": message}}).encode(), delay_s, None, dict(headers or {})
    )


def request_text(request: Mapping[str, Any]) -> str:
    """Every message's text in a chat request (string contents and the text of content parts), one
    per line: what a script line's ``match`` is searched in."""
    out: list[str] = []
    for m in request.get("messages") or []:
        content = m.get("content") if isinstance(m, Mapping) else None
        if isinstance(content, str):
            out.append(content)
        elif isinstance(content, list):
            out += [
                str(p.get("text", "")) for p in content if isinstance(p, Mapping) and p.get("type") == "text"
            ]
    return "\n".join(out)


class Responder(Protocol):
    model: str

    def reply(self, request: Mapping[str, Any]) -> Reply: ...


def _completion(
    model: str, request: Mapping[str, Any], content: str, calls: list[dict[str, Any]], delay_s: float = 0.0
) -> Reply:
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
    return Reply(200, json.dumps(data).encode(), delay_s, data)


def _chunks(completion: Mapping[str, Any], include_usage: bool) -> Iterator[dict[str, Any]]:
    """The ``chat.completion.chunk`` objects that stream ``completion`` (one choice)."""
    head = {k: completion[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    choice = completion["choices"][0]
    msg = choice["message"]

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return head | {"choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}

    yield chunk({"role": "assistant", "content": ""})
    for piece in re.findall(r"\S*\s*", msg.get("content") or ""):
        if piece:
            yield chunk({"content": piece})
    for i, call in enumerate(msg.get("tool_calls") or []):
        fn = call["function"]
        named = {"index": i, "id": call["id"], "type": "function"}
        yield chunk({"tool_calls": [named | {"function": {"name": fn["name"], "arguments": ""}}]})
        yield chunk({"tool_calls": [{"index": i, "function": {"arguments": fn["arguments"]}}]})
    yield chunk({}, choice["finish_reason"])
    if include_usage:
        yield head | {"choices": [], "usage": completion["usage"]}


@dataclass
class ScriptedResponder:
    """Replies from a script (see the module docstring); running out answers HTTP 500."""

    script: list[dict[str, Any]]
    model: str = "scripted"
    requests: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._used = [0] * len(self.script)

    def _fits(self, k: int, item: Mapping[str, Any], text: str) -> bool:
        times = int(item.get("times", 1))
        if times and self._used[k] >= times:
            return False
        return "match" not in item or re.search(str(item["match"]), text) is not None

    @classmethod
    def from_jsonl(cls, path: Path, model: str = "scripted") -> ScriptedResponder:
        try:
            lines = [json.loads(x) for x in Path(path).read_text(encoding="utf-8").splitlines() if x.strip()]
        except (OSError, json.JSONDecodeError) as e:
            raise ServeError(f"{path}: cannot read the reply script: {e}") from e
        return cls(lines, model)

    def reply(self, request: Mapping[str, Any]) -> Reply:
        text = request_text(request)
        with self._lock:
            self.requests.append(dict(request))
            k = next((i for i, item in enumerate(self.script) if self._fits(i, item, text)), None)
            if k is None:
                return _error(500, "reply script exhausted (no line left that matches this request)")
            self._used[k] += 1
            item = self.script[k]
        delay = float(item.get("delay_s", 0.0))
        headers = {str(h): str(v) for h, v in (item.get("headers") or {}).items()}
        if "raw" in item:
            return Reply(int(item.get("status", 200)), str(item["raw"]).encode(), delay, None, headers)
        if "status" in item and int(item["status"]) != 200:
            return _error(int(item["status"]), str(item.get("content", "scripted error")), delay, headers)
        content, calls = str(item.get("content") or ""), list(item.get("tool_calls") or [])
        return _completion(self.model, request, content, calls, delay)


@dataclass
class ModelResponder:
    """Replies with a chat client (a local model): the generated text, never a tool call."""

    client: ChatClient
    model: str = "local"

    def reply(self, request: Mapping[str, Any]) -> Reply:
        messages: Sequence[Mapping[str, Any]] = request.get("messages") or []
        tools = [t.get("function", t) for t in request.get("tools") or []]
        res = self.client.chat(messages, tools or None)
        return _completion(self.model, request, res.content, [])


def _form(content_type: str, body: bytes) -> dict[str, bytes]:
    """The fields of a multipart/form-data body (name -> bytes)."""
    import email.parser
    import email.policy

    if not content_type.startswith("multipart/form-data"):
        raise ServeError(f"expected multipart/form-data, got {content_type or 'no Content-Type'!r}")
    head = f"Content-Type: {content_type}\r\nMIME-Version: 1.0\r\n\r\n".encode()
    msg = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + body)
    fields = {}
    for part in msg.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if name:
            fields[str(name)] = part.get_payload(decode=True) or b""
    if "file" not in fields:
        raise ServeError(f"the form has no 'file' field (fields: {sorted(fields) or 'none'})")
    return fields


def transcribe_wav(data: bytes, names: Sequence[str] = ()) -> str:
    """The embedded recogniser's words for a WAV file's bytes (numbers, and ``names``)."""
    import tempfile

    from orchestra.tools.speech import AudioSpeech

    with tempfile.TemporaryDirectory(prefix="orchestra-transcribe-") as tmp:
        path = Path(tmp) / "audio.wav"
        path.write_bytes(data)
        obs = AudioSpeech(names=names)(path=str(path))
    if not obs.ok:
        raise ServeError(obs.error or "the speech tool failed")
    return str(obs.data["text"])


def _handler(responder: Responder, speech_names: Sequence[str]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
            return

        def _send(self, reply: Reply) -> None:
            if reply.delay_s:
                time.sleep(reply.delay_s)
            try:
                self.send_response(reply.status)
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply.body)))
                self.end_headers()
                self.wfile.write(reply.body)
            except (BrokenPipeError, ConnectionResetError):  # the client gave up (its timeout)
                self.close_connection = True

        def _stream(self, completion: Mapping[str, Any], include_usage: bool, delay_s: float) -> None:
            """Server-sent events, chunked for HTTP/1.1 (an HTTP/1.0 client gets them until close)."""
            if delay_s:
                time.sleep(delay_s)
            chunked = self.request_version != "HTTP/1.0"
            events = [b"data: %s\n\n" % json.dumps(c).encode() for c in _chunks(completion, include_usage)]
            try:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                if chunked:
                    self.send_header("Transfer-Encoding", "chunked")
                else:
                    self.send_header("Connection", "close")
                self.end_headers()
                for event in [*events, b"data: [DONE]\n\n"]:
                    self.wfile.write(b"%X\r\n%s\r\n" % (len(event), event) if chunked else event)
                if chunked:
                    self.wfile.write(b"0\r\n\r\n")
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True

        def do_GET(self) -> None:  # noqa: N802 - stdlib name
            if self.path.rstrip("/") == "/v1/models":
                model = {"id": responder.model, "object": "model", "created": 0, "owned_by": "orchestra"}
                self._send(Reply(200, json.dumps({"object": "list", "data": [model]}).encode()))
            else:
                self._send(_error(404, "not found"))

        def _transcribe(self, raw: bytes) -> None:
            try:
                fields = _form(self.headers.get("Content-Type", ""), raw)
                text = transcribe_wav(fields["file"], speech_names)
            except ServeError as e:
                self._send(_error(400, f"bad request: {e}"))
                return
            except OrchestraError as e:
                self._send(_error(400, f"cannot transcribe the audio: {e}"))
                return
            if fields.get("response_format", b"json") == b"text":
                self._send(Reply(200, text.encode()))
            else:
                self._send(Reply(200, json.dumps({"text": text}).encode()))

        def do_POST(self) -> None:  # noqa: N802 - stdlib name
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            if self.path.rstrip("/") == "/v1/audio/transcriptions":
                self._transcribe(raw)
                return
            if self.path.rstrip("/") != "/v1/chat/completions":
                self._send(_error(404, "not found"))
                return
            try:
                request = json.loads(raw)
                if not isinstance(request, dict) or not isinstance(request.get("messages"), list):
                    raise ValueError("body needs a 'messages' list")
            except (json.JSONDecodeError, ValueError) as e:
                self._send(_error(400, f"bad request: {e}"))
                return
            try:
                reply = responder.reply(request)
            except OrchestraError as e:
                reply = _error(500, str(e))
            if request.get("stream") is True and reply.status == 200 and reply.completion is not None:
                options = request.get("stream_options")
                usage = isinstance(options, dict) and options.get("include_usage") is True
                self._stream(reply.completion, usage, reply.delay_s)
            else:
                self._send(reply)

    return Handler


class _Listener(ThreadingHTTPServer):
    """A thread per connection, and room for many clients connecting at once: the standard library's
    backlog of 5 resets the rest (32 concurrent clients met 'connection reset by peer')."""

    request_queue_size = 128


class Server:
    """A running loopback server; ``url`` is the OpenAI base URL (``http://127.0.0.1:PORT/v1``)."""

    def __init__(
        self, responder: Responder, host: str = "127.0.0.1", port: int = 0, speech_names: Sequence[str] = ()
    ) -> None:
        try:
            self.httpd = _Listener((host, port), _handler(responder, tuple(speech_names)))
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

    def wait(self) -> None:
        """Block until the serving thread ends, or until :func:`stop_on_signals`' handler interrupts it."""
        while self.thread.is_alive():
            time.sleep(0.2)

    def close(self) -> None:
        """Stop serving and close the listening socket (idempotent)."""
        if self.thread.is_alive():
            self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def start_server(
    responder: Responder, host: str = "127.0.0.1", port: int = 0, speech_names: Sequence[str] = ()
) -> Server:
    """Start serving ``responder`` in a background thread (port 0: a free port); the transcription
    endpoint knows ``speech_names`` besides numbers."""
    return Server(responder, host, port, speech_names).start()


def stop_on_signals(signums: Sequence[int] = (signal.SIGTERM, signal.SIGINT)) -> None:
    """Make each of ``signums`` raise :class:`StopServing` in the main thread, whatever disposition was
    inherited (an ignored SIGTERM survives fork and exec). The first one restores their defaults, so a
    second signal during shutdown ends the process at once. Call it from the main thread."""

    def handler(signum: int, frame: FrameType | None) -> None:
        for s in signums:
            signal.signal(s, signal.SIG_DFL)
        raise StopServing(signal.Signals(signum).name)

    for s in signums:
        signal.signal(s, handler)
