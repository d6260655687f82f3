"""`orchestra serve`: the official openai client (streaming included), the SSE framing over plain HTTP,
and a clean exit on SIGTERM/SIGINT even when the process inherited them ignored."""

from __future__ import annotations

import http.client
import json
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import openai
import pytest
from conftest import IGNORING

from orchestra.agent.serve import ScriptedResponder, start_server

MSG = [{"role": "user", "content": "hi"}]
TOOLS = [
    {"type": "function", "function": {"name": n, "parameters": {"type": "object", "properties": {}}}}
    for n in ("web_search", "page_browser")
]
STREAMED = "streamed in  a few pieces,\nthen ANSWER: 42 "
SCRIPT: list[dict[str, Any]] = [
    {"content": "hello there"},
    {"tool_calls": [{"name": "web_search", "arguments": {"query": "moon"}}]},
    {"content": STREAMED},
    {
        "content": "two lookups",
        "tool_calls": [
            {"name": "web_search", "arguments": {"query": "a"}},
            {"name": "page_browser", "arguments": '{"url": "https://x"}'},
        ],
    },
    {"content": "via the helper", "tool_calls": [{"name": "page_browser", "arguments": {"url": "u"}}]},
    {"status": 503, "content": "overloaded"},
]


def _write(path: Path, script: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(x) + "\n" for x in script))
    return path


def _exercise_openai_client(url: str) -> None:
    """Every call kind of the official client against a server replaying SCRIPT from its start."""
    client = openai.OpenAI(base_url=url, api_key="x", max_retries=0, timeout=10)
    assert [m.id for m in client.models.list()] == ["demo"]

    plain = client.chat.completions.create(model="demo", messages=MSG)
    assert plain.choices[0].message.content == "hello there" and plain.choices[0].finish_reason == "stop"
    assert plain.usage is not None and plain.usage.prompt_tokens == 1

    called = client.chat.completions.create(model="demo", messages=MSG, tools=TOOLS)
    (call,) = called.choices[0].message.tool_calls or []
    assert call.function.name == "web_search" and json.loads(call.function.arguments) == {"query": "moon"}
    assert called.choices[0].finish_reason == "tool_calls" and call.id.startswith("call_")

    stream = client.chat.completions.create(
        model="demo", messages=MSG, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    assert deltas[0].role == "assistant"
    assert "".join(d.content or "" for d in deltas) == STREAMED
    assert sum(1 for d in deltas if d.content) > 3, "the content comes in pieces"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage is not None and chunks[-1].usage.total_tokens > 1

    calls: dict[int, dict[str, str]] = {}
    text, finish, n = "", None, 0
    for chunk in client.chat.completions.create(model="demo", messages=MSG, tools=TOOLS, stream=True):
        n += 1
        assert chunk.usage is None and chunk.object == "chat.completion.chunk"
        choice = chunk.choices[0]
        text += choice.delta.content or ""
        finish = choice.finish_reason or finish
        for tc in choice.delta.tool_calls or []:
            acc = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
            acc["id"] += tc.id or ""
            acc["name"] += (tc.function.name or "") if tc.function else ""
            acc["arguments"] += (tc.function.arguments or "") if tc.function else ""
    assert text == "two lookups" and finish == "tool_calls" and n > 4
    assert [(c["name"], json.loads(c["arguments"])) for c in calls.values()] == [
        ("web_search", {"query": "a"}),
        ("page_browser", {"url": "https://x"}),
    ]
    assert sorted(calls) == [0, 1] and all(c["id"].startswith("call_") for c in calls.values())

    with client.chat.completions.stream(model="demo", messages=MSG, tools=TOOLS) as helper:
        final = helper.get_final_completion()  # the SDK's own accumulator of the chunks
    msg = final.choices[0].message
    assert msg.content == "via the helper" and final.choices[0].finish_reason == "tool_calls"
    assert [(t.function.name, t.function.arguments) for t in msg.tool_calls or []] == [
        ("page_browser", '{"url": "u"}')
    ]

    with pytest.raises(openai.APIStatusError) as err:
        list(client.chat.completions.create(model="demo", messages=MSG, stream=True))
    assert err.value.status_code == 503 and "overloaded" in str(err.value)


@pytest.mark.parametrize("where", ["thread", "process"])
def test_official_openai_client_against_the_server(tmp_path: Path, where: str, serve_process: Any) -> None:
    script = _write(tmp_path / "replies.jsonl", SCRIPT)
    if where == "thread":
        with start_server(ScriptedResponder.from_jsonl(script, "demo")) as srv:
            _exercise_openai_client(srv.url)
    else:
        with serve_process(script) as (_, url):
            _exercise_openai_client(url)


def _events(body: bytes) -> list[str]:
    assert body.endswith(b"\n\n") and all(e.startswith(b"data: ") for e in body[:-2].split(b"\n\n")), body
    return [e[len(b"data: ") :].decode() for e in body[:-2].split(b"\n\n")]


def _raw_post(port: int, version: str, body: bytes) -> tuple[str, dict[str, str], bytes]:
    """One POST over a bare socket; the whole response as sent (status line, headers, undecoded body)."""
    head = f"POST /v1/chat/completions {version}\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(head.encode() + b"Connection: close\r\n\r\n" + body)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    top, _, rest = data.partition(b"\r\n\r\n")
    status, *lines = top.decode().split("\r\n")
    return status, {k.lower(): v.strip() for k, v in (x.split(":", 1) for x in lines)}, rest


def _dechunk(body: bytes) -> bytes:
    out = b""
    while True:
        size, _, body = body.partition(b"\r\n")
        n = int(size, 16)
        if n == 0:
            assert body == b"\r\n", body  # the last chunk, no trailers, nothing after it
            return out
        assert body[n : n + 2] == b"\r\n"
        out, body = out + body[:n], body[n + 2 :]


def test_stream_framing_over_http11_chunked_and_http10_until_close() -> None:
    request = json.dumps({"messages": MSG, "stream": True}).encode()
    with start_server(ScriptedResponder([{"content": "a b c"}] * 2)) as srv:
        port = srv.httpd.server_address[1]
        status, headers, body = _raw_post(port, "HTTP/1.1", request)
        assert status == "HTTP/1.1 200 OK" and headers["content-type"] == "text/event-stream"
        assert headers["transfer-encoding"] == "chunked" and "content-length" not in headers
        events = _events(_dechunk(body))
        status, headers, body = _raw_post(port, "HTTP/1.0", request)
        assert status.endswith(" 200 OK") and headers["connection"] == "close"
        assert "transfer-encoding" not in headers and len(_events(body)) == len(events)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"} and len({c["id"] for c in chunks}) == 1
    assert [c["choices"][0]["delta"] for c in chunks] == [
        {"role": "assistant", "content": ""},
        {"content": "a "},
        {"content": "b "},
        {"content": "c"},
        {},
    ]
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None] * 4 + ["stop"]


def test_urllib_reads_a_stream_and_errors_are_never_streamed() -> None:
    script = [{"content": "x y"}, {"status": 429, "content": "slow down"}, {"raw": "<html>garbage"}]
    with start_server(ScriptedResponder(script)) as srv:

        def post(body: dict[str, Any]) -> http.client.HTTPResponse:
            req = urllib.request.Request(srv.url + "/chat/completions", json.dumps(body).encode())
            return urllib.request.urlopen(req, timeout=10)

        stream = {"messages": MSG, "stream": True, "stream_options": {"include_usage": True}}
        with post(stream) as res:
            assert res.headers["Content-Type"] == "text/event-stream"
            events = _events(res.read())
        with pytest.raises(urllib.error.HTTPError) as err:
            post(stream)
        assert err.value.code == 429 and err.value.headers["Content-Type"] == "application/json"
        assert json.loads(err.value.read()) == {"error": {"message": "slow down"}}
        with post(stream) as res:
            assert res.headers["Content-Type"] == "application/json" and res.read() == b"<html>garbage"
        port = srv.httpd.server_address[1]
    usage = json.loads(events[-2])
    assert events[-1] == "[DONE]" and usage["choices"] == [] and usage["usage"]["total_tokens"] > 0
    assert "".join(json.loads(e)["choices"][0]["delta"].get("content", "") for e in events[:-2]) == "x y"
    with pytest.raises(ConnectionRefusedError):  # close() closed the listening socket
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


def test_the_ignoring_wrapper_really_hands_down_ignored_signals() -> None:
    """The control for the next test: without its own handlers, the server would be unkillable."""
    code = "import signal as s; print([s.getsignal(n) == s.SIG_IGN for n in (s.SIGTERM, s.SIGINT)])"
    cmd = [sys.executable, "-c", IGNORING, sys.executable, "-c", code]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    assert run.stdout.strip() == "[True, True]", run.stderr


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_serve_exits_0_promptly_on_a_signal_it_inherited_as_ignored(
    tmp_path: Path, signum: int, serve_process: Any
) -> None:
    script = _write(tmp_path / "replies.jsonl", [{"content": "one"}])
    with serve_process(script, ignoring=True) as (proc, url):
        idle = http.client.HTTPConnection(url.split("/")[2], timeout=10)  # a kept-alive, idle client
        idle.request("GET", "/v1/models")
        assert json.loads(idle.getresponse().read())["data"][0]["id"] == "demo"
        t0 = time.monotonic()
        if signum == signal.SIGTERM:
            proc.terminate()
        else:
            proc.send_signal(signum)
        rc = proc.wait(timeout=10)
        elapsed = time.monotonic() - t0
        assert proc.stderr is not None
        said = proc.stderr.read()
        idle.close()
    print(f"{signal.Signals(signum).name}: exit {rc} after {elapsed:.2f} s")
    assert rc == 0 and elapsed < 3, (rc, elapsed, said)
    assert f"stopping on {signal.Signals(signum).name}" in said and "Traceback" not in said
