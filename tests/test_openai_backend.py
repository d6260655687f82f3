"""The openai backend and the LM policy against a real OpenAI-compatible HTTP server on loopback."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from pathlib import Path

import pytest

from orchestra.agent.lm_policy import LMPolicy
from orchestra.agent.runtime import Environment
from orchestra.agent.serve import ModelResponder, ScriptedResponder, start_server
from orchestra.agent.state import OrchestraState
from orchestra.agent.systems import run_task_sync
from orchestra.backends.base import SubTaskInput
from orchestra.backends.openai_backend import OpenAIBackend
from orchestra.backends.pool import builtin_backends
from orchestra.config import AgentParams
from orchestra.lm.chat import LMError
from orchestra.lm.openai_chat import OpenAIClient
from orchestra.schemas import Delegate, Finish, SubTask, Task, read_tasks_json
from orchestra.tools.registry import default_registry


@pytest.fixture(scope="module")
def tools(small_world: Path):  # type: ignore[no-untyped-def]
    with default_registry(small_world) as reg:
        yield reg


def _page(small_world: Path) -> dict[str, str]:
    return json.loads((small_world / "kb" / "pages.jsonl").read_text().splitlines()[0])


def _backend(url: str, timeout_s: float = 5.0, retries: int = 0) -> OpenAIBackend:
    client = OpenAIClient(url, "scripted", timeout_s=timeout_s, max_retries=retries)
    return OpenAIBackend("lm_expert", client, {"search": 0.8, "browse": 0.8})


def _input(goal: str) -> SubTaskInput:
    return SubTaskInput(question="q?", subtask=SubTask(id="E1", goal=goal), max_steps=4)


def test_models_endpoint_lists_the_served_model() -> None:
    with start_server(ScriptedResponder([], model="tiny")) as srv:
        data = json.loads(urllib.request.urlopen(srv.url + "/models", timeout=5).read())
    assert [m["id"] for m in data["data"]] == ["tiny"]


def test_tool_call_round_trip(small_world: Path, tools) -> None:  # type: ignore[no-untyped-def]
    page = _page(small_world)
    script = [
        {"content": "", "tool_calls": [{"name": "web_search", "arguments": {"query": page["title"]}}]},
        {"content": "", "tool_calls": [{"name": "web_search", "arguments": "{not json"}]},
        {"content": f"Found it.\nANSWER: {page['url']}"},
    ]
    responder = ScriptedResponder(script)
    with start_server(responder) as srv:
        res = asyncio.run(_backend(srv.url).run(_input(f"find {page['title']}"), [tools.get("web_search")]))
    assert res.ok, res.error
    assert res.value == page["url"]
    assert [c.tool for c in res.tool_calls] == ["web_search"]  # the bad-JSON call never reached the tool
    assert res.input_tokens > 0 and res.output_tokens > 0
    first, second, third = responder.requests
    assert first["tools"][0]["function"]["name"] == "web_search"
    call = second["messages"][-2]["tool_calls"][0]
    tool_msg = second["messages"][-1]
    assert tool_msg["role"] == "tool" and tool_msg["tool_call_id"] == call["id"]
    assert page["url"] in tool_msg["content"]  # the real search result went back to the model
    assert third["messages"][-1]["role"] == "tool" and "not JSON" in third["messages"][-1]["content"]


def test_garbage_body_and_http_errors_fail_cleanly(tools) -> None:  # type: ignore[no-untyped-def]
    script = [{"raw": "<html>definitely not json"}, {"status": 503, "content": "overloaded"}]
    with start_server(ScriptedResponder(script)) as srv:
        client = OpenAIClient(srv.url, "m", timeout_s=5, max_retries=0)
        with pytest.raises(LMError, match="not JSON"):
            client.chat([{"role": "user", "content": "hi"}])
        res = asyncio.run(_backend(srv.url).run(_input("anything"), [tools.get("web_search")]))
    assert not res.ok and "HTTP 503" in (res.error or "")


def test_retry_after_server_error_then_success() -> None:
    script = [{"status": 500, "content": "boom"}, {"content": "ANSWER: 42"}]
    with start_server(ScriptedResponder(script)) as srv:
        res = asyncio.run(_backend(srv.url, retries=1).run(_input("what?"), []))
    assert res.ok and res.value == 42


def test_timeout_is_an_error_not_a_hang() -> None:
    with start_server(ScriptedResponder([{"content": "ANSWER: late", "delay_s": 2.0}])) as srv:
        client = OpenAIClient(srv.url, "m", timeout_s=0.3, max_retries=0)
        with pytest.raises(LMError, match="no answer within|timed out"):
            client.chat([{"role": "user", "content": "hi"}])


def _world_task(small_world: Path) -> Task:
    return read_tasks_json(small_world / "tasks.json")[0]


def test_lm_policy_retries_garbage_and_invalid_output(small_world: Path) -> None:
    task = _world_task(small_world)
    agent = AgentParams()
    state = OrchestraState(
        question=task.question, modal_inputs=task.omni_modal_input, backends=builtin_backends(agent).cards()
    )
    bad_backend = json.dumps({"kind": "delegate", "subtasks": [{"id": "E1", "goal": "x", "backend": "nope"}]})
    script = [
        {"content": "I think the answer is"},
        {"content": bad_backend},
        {"content": '{"kind": "finish", "answer": 7}'},
    ]
    responder = ScriptedResponder(script)
    with start_server(responder) as srv:
        reply = LMPolicy(OpenAIClient(srv.url, "m", timeout_s=5), max_retries=2).respond(
            state, [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
        )
    assert isinstance(reply.action, Finish) and reply.action.answer == "7" and reply.attempts == 3
    feedback = responder.requests[2]["messages"][-1]["content"]
    assert "unknown_backend" in feedback  # the model was told what was wrong
    with start_server(ScriptedResponder([{"content": "nope"}] * 2)) as srv:
        reply = LMPolicy(OpenAIClient(srv.url, "m", timeout_s=5), max_retries=1).respond(
            state, [{"role": "user", "content": "u"}]
        )
    assert reply.action is None and "bad_json" in (reply.error or "")


def test_orchestra_system_with_lm_policy_over_http(small_world: Path, tools) -> None:  # type: ignore[no-untyped-def]
    """A full run: the LM policy (scripted over HTTP) delegates a search the builtin web expert runs."""
    page = _page(small_world)
    task = Task(id="t1", question=f"What is the wiki URL of {page['title']}?", answer=page["url"])
    delegate = Delegate(
        subtasks=[
            SubTask(
                id="E1",
                goal=f'search the wiki for the page titled "{page["title"]}"',
                tools=["web_search"],
                backend="web_expert",
            )
        ]
    )
    script = [{"content": delegate.model_dump_json()}, {"content": '{"kind": "finish", "answer": "#E1"}'}]
    agent = AgentParams()
    env = Environment(
        tools=tools, backends=builtin_backends(agent), agent=agent, media_root=small_world / "media"
    )
    with start_server(ScriptedResponder(script)) as srv:
        traj = run_task_sync(task, "orchestra", LMPolicy(OpenAIClient(srv.url, "m", timeout_s=5)), env)
    assert traj.answer == page["url"]
    assert traj.steps[0].results[0]["status"] == "ok"
    assert traj.accounting["policy"]["lm"]["calls"] == 2


@pytest.mark.slow
def test_served_tiny_transformers_model_output_is_handled(tmp_path: Path, small_world: Path, tools) -> None:  # type: ignore[no-untyped-def]
    """A tiny randomly initialised local model behind the server: its garbage never crashes the run."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    from orchestra.lm.transformers_chat import TransformersChat

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.train_from_iterator(
        ['{"kind": "finish", "answer": "1"} delegate subtasks goal'] * 20,
        trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<eos>"]),
    )
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="<eos>")
    fast.save_pretrained(tmp_path)
    GPT2LMHeadModel(GPT2Config(vocab_size=len(fast), n_layer=1, n_embd=32, n_head=2)).save_pretrained(
        tmp_path
    )
    chat = TransformersChat(tmp_path, max_new_tokens=12)
    task = _world_task(small_world)
    agent = AgentParams()
    env = Environment(
        tools=tools,
        backends=builtin_backends(agent),
        agent=agent,
        media_root=small_world / "media",
        max_turns=2,
    )
    with start_server(ModelResponder(chat, model="tiny")) as srv:
        traj = run_task_sync(
            task, "orchestra", LMPolicy(OpenAIClient(srv.url, "tiny", timeout_s=30), max_retries=1), env
        )
    assert traj.answer is None and traj.error == "no finish within 2 turns"
    assert all(s.error for s in traj.steps) and all(s.raw_output is not None for s in traj.steps)


def test_react_with_a_model_calling_tools_itself(small_world: Path, tools) -> None:  # type: ignore[no-untyped-def]
    """ReAct + LM: the served model calls the real tools in turn; the final ANSWER becomes the answer."""
    from orchestra.agent.systems import run_react_lm
    from orchestra.schemas import PerceiveStep

    task = next(
        t
        for t in read_tasks_json(small_world / "tasks.json")
        if t.solution_program
        and isinstance(t.solution_program[0], PerceiveStep)
        and t.solution_program[0].perception == "morse_text"
    )
    audio = next(m for m in task.omni_modal_input if m.id == task.solution_program[0].input_id)
    url = task.solution_program[1].value
    script = [
        {
            "tool_calls": [
                {"name": "audio_morse", "arguments": {"path": str(small_world / "media" / audio.path)}}
            ]
        },
        {"tool_calls": [{"name": "page_browser", "arguments": {"url": url}}]},
        {"content": f"ANSWER: {task.solution_program[2].value}"},
    ]
    responder = ScriptedResponder(script)
    agent = AgentParams()
    env = Environment(
        tools=tools, backends=builtin_backends(agent), agent=agent, media_root=small_world / "media"
    )
    with start_server(responder) as srv:
        backend = OpenAIBackend("react_agent", OpenAIClient(srv.url, "m", timeout_s=5), {"reasoning": 1.0})
        traj = asyncio.run(run_react_lm(task, backend, env))
    assert traj.answer == str(task.solution_program[2].value)
    assert [c["tool"] for c in traj.steps[0].results[0]["tool_calls"]] == ["audio_morse", "page_browser"]
    morse = responder.requests[1]["messages"][-1]["content"]
    assert str(task.solution_program[0].value).upper() in morse.upper()  # the real decode went back
    assert set(traj.accounting["tool"]) == {"audio_morse", "page_browser"}


def test_openai_backend_from_params_in_the_pool(small_world: Path, tools) -> None:  # type: ignore[no-untyped-def]
    """params.agent.backends with kind openai: the orchestrator delegates to it like to any expert."""
    from orchestra.agent.policies import ScriptedPolicy
    from orchestra.backends.pool import backend_pool
    from orchestra.config import BackendSpec, ProviderSpec

    page = _page(small_world)
    script = [
        {"tool_calls": [{"name": "page_browser", "arguments": {"url": page["url"]}}]},
        {"content": f"ANSWER: {page['title']}"},
    ]
    with start_server(ScriptedResponder(script)) as srv:
        providers = {"local": ProviderSpec(kind="openai", base_url=srv.url, model="m", timeout_s=5)}
        lm = BackendSpec(kind="openai", provider="local", skills={"browse": 0.7, "reasoning": 0.9})
        agent = AgentParams(backends={**AgentParams().backends, "lm_expert": lm})
        pool = backend_pool(agent, providers)
        assert isinstance(pool.get("lm_expert"), OpenAIBackend)
        env = Environment(tools=tools, backends=pool, agent=agent, media_root=small_world / "media")
        node = SubTask(
            id="E1",
            goal=f"open {page['url']} and give its title",
            tools=["page_browser"],
            backend="lm_expert",
        )
        policy = ScriptedPolicy([Delegate(subtasks=[node]), Finish(answer="#E1")])
        traj = run_task_sync(Task(id="t", question="title?", answer=page["title"]), "orchestra", policy, env)
    assert traj.answer == page["title"]
    assert traj.accounting["backend"]["lm_expert"]["input_tokens"] > 0
    assert traj.accounting["tool"]["page_browser"]["calls"] == 1


def test_serve_command_answers_on_loopback(tmp_path: Path) -> None:
    """`orchestra serve --script` as a real process: /v1/models and a chat completion over HTTP, then a
    clean exit on SIGTERM; the server installs its own handler, so an ignored SIGTERM inherited from
    whatever ran before in this process (an in-process Dagster run) cannot leave it unkillable."""
    import select
    import subprocess
    import sys

    script = tmp_path / "replies.jsonl"
    script.write_text(json.dumps({"content": "hello from the script"}) + "\n")
    code = "from orchestra.agent.cli import app; app()"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "serve", "--script", str(script), "--port", "0", "--name", "demo"],
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    try:
        ready = select.select([proc.stderr], [], [], 60)[0]
        line = proc.stderr.readline() if ready else "(nothing within 60 s)"
        url = line.strip().rsplit(" ", 1)[-1]  # "serving demo at http://127.0.0.1:PORT/v1"
        assert line.startswith("serving demo at http://127.0.0.1:"), line
        models = json.loads(urllib.request.urlopen(url + "/models", timeout=5).read())
        assert models["data"][0]["id"] == "demo"
        res = OpenAIClient(url, "demo", timeout_s=5).chat([{"role": "user", "content": "hi"}])
        assert res.content == "hello from the script" and res.prompt_tokens == 1
        proc.terminate()
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        proc.stderr.close()


def test_429_waits_what_retry_after_asks_then_succeeds() -> None:
    import time

    script = [{"status": 429, "content": "slow down", "headers": {"Retry-After": "0.6"}}, {"content": "ok"}]
    responder = ScriptedResponder(script)
    with start_server(responder) as srv:
        client = OpenAIClient(srv.url, "m", timeout_s=5, max_retries=1, backoff_s=0.001)
        t0 = time.perf_counter()
        res = client.chat([{"role": "user", "content": "hi"}])
        took = time.perf_counter() - t0
    assert res.content == "ok" and len(responder.requests) == 2
    assert took >= 0.6  # the header's wait, not the 1 ms backoff


def test_5xx_retried_with_backoff_4xx_not_retried() -> None:
    script = [{"status": 503}, {"status": 502}, {"content": "third time"}, {"status": 400, "content": "bad"}]
    responder = ScriptedResponder(script)
    with start_server(responder) as srv:
        client = OpenAIClient(srv.url, "m", timeout_s=5, max_retries=2, backoff_s=0.001)
        assert client.chat([{"role": "user", "content": "hi"}]).content == "third time"
        with pytest.raises(LMError, match="HTTP 400"):
            client.chat([{"role": "user", "content": "hi"}])
    assert len(responder.requests) == 4  # the 400 was asked once


def test_retries_give_up_with_the_last_error() -> None:
    responder = ScriptedResponder([{"status": 500, "content": "down", "times": 0}])
    with start_server(responder) as srv:
        client = OpenAIClient(srv.url, "m", timeout_s=5, max_retries=2, backoff_s=0.001)
        with pytest.raises(LMError, match="HTTP 500: .*down"):
            client.chat([{"role": "user", "content": "hi"}])
    assert len(responder.requests) == 3


def test_request_carries_seed_tool_choice_and_the_configured_token_field() -> None:
    from orchestra.config import ProviderSpec
    from orchestra.lm.clients import client_for

    responder = ScriptedResponder([{"content": "a"}, {"content": "b"}])
    with start_server(responder) as srv:
        spec = ProviderSpec(
            kind="openai", base_url=srv.url, model="m", seed=5, token_param="max_completion_tokens"
        )
        client = client_for(spec, 77)
        client.chat([{"role": "user", "content": "hi"}], [{"name": "web_search", "parameters": {}}])
        plain = client_for(ProviderSpec(kind="openai", base_url=srv.url, model="m"), 77)
        plain.chat([{"role": "user", "content": "hi"}])
    first, second = responder.requests
    assert first["seed"] == 5 and first["max_completion_tokens"] == 77 and "max_tokens" not in first
    assert first["tool_choice"] == "auto" and first["tools"][0]["function"]["name"] == "web_search"
    assert second["max_tokens"] == 77 and "seed" not in second and "tool_choice" not in second


def test_vllm_is_no_provider_kind_and_says_what_to_use() -> None:
    from orchestra.config import parse_params
    from orchestra.errors import ConfigError

    with pytest.raises(ConfigError, match="vllm serve MODEL .*kind 'openai'"):
        parse_params({"providers": {"big": {"kind": "vllm", "model": "Qwen/Qwen3-8B"}}})


def test_scripted_lines_with_match_answer_requests_in_any_order() -> None:
    script = [
        {"match": "extract", "content": "E", "times": 2},
        {"match": "rewrite", "content": "R"},
        {"content": "anything else"},
    ]
    responder = ScriptedResponder(script)
    with start_server(responder) as srv:
        client = OpenAIClient(srv.url, "m", timeout_s=5, max_retries=0)
        said = [client.chat([{"role": "user", "content": w}]).content for w in ("rewrite", "extract", "x")]
        said.append(client.chat([{"role": "user", "content": "extract"}]).content)
        with pytest.raises(LMError, match="exhausted"):
            client.chat([{"role": "user", "content": "rewrite"}])
    assert said == ["R", "E", "anything else", "E"]
