"""`orchestra answer` (run one question through a system and show its trajectory) and `orchestra serve`."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import typer

from orchestra.cli_common import fail
from orchestra.errors import OrchestraError

app = typer.Typer(no_args_is_help=True, add_completion=False, help="Answer questions; serve a local model.")

_TYPES = {".png": "image", ".jpg": "image", ".jpeg": "image", ".wav": "audio", ".mp4": "video"}


def _why(r: dict[str, Any]) -> str:
    """Which expert ran a node and why: who chose it, and the score terms of the ranking."""
    routing = r.get("routing") or {}
    by = routing.get("by")
    if by is None:
        return f"expert {r['backend']}"
    if by == "react":
        return f"expert {r['backend']} (the ReAct agent runs everything)"
    terms = []
    for row in routing.get("ranking", []):
        terms.append(
            f"{row['backend']} {row['score']:.3f} = match {row['match']:.3f} - cost {row['cost']:.3f}"
            f" - latency {row['latency']:.3f}"
        )
    chosen = "chosen by the policy" if by == "policy" else "chosen by cost-aware selection"
    conf = "" if r.get("confidence") is None else f", confidence {r['confidence']:.2f}"
    return f"expert {r['backend']} ({chosen}{conf}); ranking: " + "; ".join(terms)


def _tree(traj: Any) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.tree import Tree

    root = Tree(
        f"[bold]{traj.system}[/] / {traj.policy}: answer [bold green]{traj.answer}[/] "
        f"({traj.latency_s:.2f}s, {traj.tokens} tokens, cost {traj.cost:.4f})"
    )
    for step in traj.steps:
        kind = step.decision.kind if step.decision is not None else "invalid"
        node = root.add(f"turn {step.index}: {kind}" + (f" [red]{step.error}[/]" if step.error else ""))
        if step.decision is not None and step.decision.kind == "finish":
            node.add(f"answer: {step.decision.answer}")
        for r in step.results:
            status = "green" if r["status"] == "ok" else "red"
            deps = ",".join(r["depends_on"]) or "-"
            head = (
                f"{r['id']} [{status}]{r['status']}[/] {r['backend']} tools={','.join(r['tools']) or 'auto'} "
                f"deps={deps} {r['start_s'] or 0:.2f}-{r['end_s'] or 0:.2f}s"
            )
            sub = node.add(head)
            sub.add(f"goal: {r['goal']}")
            sub.add(escape(_why(r)))
            sub.add(f"value: {r['value']!r}" if r["status"] == "ok" else f"error: {r['error']}")
    Console().print(root)


@app.command("answer")
def answer(
    question: str | None = typer.Option(None, "--question", "-q", help="the question"),
    inputs: list[Path] = typer.Option([], "--input", "-i", help="a modal input file (.png/.jpg/.wav/.mp4)"),
    system: str = typer.Option("orchestra", "--system", "-s", help="orchestra | linear | react | maestro"),
    policy: str = typer.Option(
        "oracle",
        "--policy",
        "-p",
        help="oracle (needs --task), script:FILE (one decision per line), "
        "or a key of params `providers` (openai/transformers)",
    ),
    world: Path | None = typer.Option(None, "--world", "-w", help="world folder: pages for search/browse"),
    task_id: str | None = typer.Option(None, "--task", help="answer this task of WORLD/tasks.json"),
    params_file: Path = typer.Option(Path("params.yaml"), "--params", help="agent/tools/providers sections"),
    max_turns: int = typer.Option(8, "--max-turns", min=1, max=64),
    as_json: bool = typer.Option(False, "--json", help="print the whole trajectory as JSON"),
    out: Path | None = typer.Option(None, "--out", "-o", help="also write the trajectory JSON to this file"),
) -> None:
    """Answer a question (or a world task) with a system and policy; print the answer and the trajectory."""
    from orchestra.agent.runtime import open_runtime
    from orchestra.agent.systems import SYSTEMS
    from orchestra.config import Params, load_params

    try:
        if system not in SYSTEMS:
            raise OrchestraError(f"unknown system {system!r}; valid: {', '.join(SYSTEMS)}")
        params = load_params(params_file) if params_file.is_file() else Params()
        task, media_root = _the_task(question, inputs, task_id, world)
        pol = _the_policy(policy, system, task if task_id is not None else None, params)
        t0 = time.perf_counter()
        runtime = open_runtime(
            params.agent,
            params.tools,
            pages=world,
            media_root=media_root,
            providers=params.providers,
            max_turns=max_turns,
        )
        with runtime as env:
            traj = _run(task, system, pol, env)
    except (OrchestraError, OSError) as e:
        raise fail(str(e)) from e
    text = json.dumps(traj.model_dump(mode="json"), ensure_ascii=False, indent=2)
    if out is not None:
        from orchestra.io import atomic_write_text

        atomic_write_text(out, text + "\n")
    if as_json:
        typer.echo(text)
        return
    typer.echo(traj.answer if traj.answer is not None else f"(no answer: {traj.error})")
    _tree(traj)
    typer.echo(f"wall {time.perf_counter() - t0:.2f}s")


def _the_task(
    question: str | None, inputs: list[Path], task_id: str | None, world: Path | None
) -> tuple[Any, Any]:
    """The task to answer and the folder its media paths are relative to (None: absolute paths)."""
    from orchestra.schemas import ModalInput, Task, read_tasks_json

    if task_id is not None:
        if world is None:
            raise OrchestraError("--task needs --world")
        found = [t for t in read_tasks_json(world / "tasks.json") if str(t.id) == task_id]
        if not found:
            raise OrchestraError(f"no task {task_id!r} in {world / 'tasks.json'}")
        return found[0], world / "media"
    if not question:
        raise OrchestraError("give --question (or --task with --world)")
    for p in inputs:
        if p.suffix.lower() not in _TYPES or not p.is_file():
            raise OrchestraError(f"--input {p}: not a readable {'/'.join(_TYPES)} file")
    files = [p.resolve() for p in inputs]
    # the folder the inputs share: task media paths are relative to one (a file named is its own)
    root = Path(os.path.commonpath([f.parent for f in files])) if files else None
    mods = [
        ModalInput(type=_TYPES[f.suffix.lower()], id=f"input{k}", path=f.relative_to(root).as_posix())
        for k, f in enumerate(files, 1)
    ]
    return Task(id="cli", question=question, omni_modal_input=mods, answer="?"), root


def _the_policy(policy: str, system: str, world_task: Any, params: Any) -> Any:
    """The policy ``--policy`` names (the oracle replays ``world_task``'s program)."""
    from orchestra.agent.lm_policy import lm_policy
    from orchestra.agent.policies import ScriptedPolicy, oracle_for
    from orchestra.agent.systems import system_format

    if policy == "oracle":
        if world_task is None:
            raise OrchestraError("the oracle replays a world task's program: give --task and --world")
        return oracle_for(world_task, system, params.agent)  # type: ignore[arg-type]
    if policy.startswith("script:"):
        lines = Path(policy[7:]).read_text(encoding="utf-8").splitlines()
        return ScriptedPolicy([x for x in lines if x.strip()], fmt=system_format(system))  # type: ignore[arg-type]
    if policy in params.providers:
        return lm_policy(params.providers[policy], params.agent, fmt=system_format(system), name=policy)  # type: ignore[arg-type]
    raise OrchestraError(
        f"unknown policy {policy!r}: oracle, script:FILE or one of {sorted(params.providers)}"
    )


def _run(task: Any, system: str, pol: Any, env: Any) -> Any:
    """One run of ``system`` with ``pol``: a ReAct agent on a chat model calls the tools itself."""
    from orchestra.agent.lm_policy import LMPolicy
    from orchestra.agent.systems import run_task_sync

    if system == "react" and isinstance(pol, LMPolicy):
        import asyncio

        from orchestra.agent.systems import run_react_lm
        from orchestra.backends.openai_backend import OpenAIBackend

        agent_lm = OpenAIBackend("react_agent", pol.client, {"reasoning": 1.0})
        return asyncio.run(run_react_lm(task, agent_lm, env, pol.name))
    return run_task_sync(task, system, pol, env)  # type: ignore[arg-type]


@app.command("serve")
def serve(
    model: Path | None = typer.Option(None, "--model", help="a local transformers model directory"),
    script: Path | None = typer.Option(
        None, "--script", help="a JSONL reply script (see orchestra.agent.serve)"
    ),
    host: str = typer.Option("127.0.0.1", "--host"),
    port: int = typer.Option(8000, "--port", min=0, max=65535),
    name: str | None = typer.Option(None, "--name", help="model id reported by /v1/models"),
    max_new_tokens: int = typer.Option(256, "--max-new-tokens", min=1),
    world: Path | None = typer.Option(
        None, "--world", help="a world or seed_tasks folder: /v1/audio/transcriptions knows its page titles"
    ),
) -> None:
    """Serve an OpenAI-compatible /v1/chat/completions (and /v1/audio/transcriptions) on HOST:PORT until
    SIGTERM or SIGINT (exit 0)."""
    from orchestra.agent.serve import (
        ModelResponder,
        Responder,
        ScriptedResponder,
        Server,
        StopServing,
        start_server,
        stop_on_signals,
    )

    stop_on_signals()  # first: an ignored SIGTERM inherited from the parent would make us unkillable
    srv: Server | None = None
    try:
        try:
            if (model is None) == (script is None):
                raise OrchestraError("give exactly one of --model DIR or --script FILE")
            responder: Responder
            if model is not None:
                from orchestra.lm.transformers_chat import TransformersChat

                responder = ModelResponder(TransformersChat(model, max_new_tokens), name or model.name)
            else:
                assert script is not None
                responder = ScriptedResponder.from_jsonl(script, name or "scripted")
            names: list[str] = []
            if world is not None:
                from orchestra.tools.registry import page_store, speech_names

                names = speech_names(page_store(world))
            srv = start_server(responder, host, port, names)
        except OrchestraError as e:
            raise fail(str(e)) from e
        typer.echo(f"serving {responder.model} at {srv.url}", err=True)
        srv.wait()
    except StopServing as e:
        typer.echo(f"stopping on {e}", err=True)
    finally:
        if srv is not None:
            srv.close()
