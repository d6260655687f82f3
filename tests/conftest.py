"""Shared fixtures: a small generated world every test module may reuse (read-only), its seeds and action
tools, and `orchestra serve --script` as a process."""

from __future__ import annotations

import select
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from orchestra.config import AgentParams, ToolParams, WorldParams
from orchestra.schemas import Task, read_tasks_json
from orchestra.tools.base import ToolRegistry
from orchestra.tools.registry import action_tools, page_store

if TYPE_CHECKING:
    from orchestra.agent.runtime import Environment

SMALL_WORLD = WorldParams(n_seeds=24, n_entities=60)
SMALL_MUXED_WORLD = WorldParams(n_seeds=24, n_entities=60, video_audio_track="muxed")

#: The smallest policy that still trains: seconds per recipe on 2 cores (the `tiny_train` fixture).
TINY_TRAIN = {
    "seed": 17,
    "policy": {"vocab_size": 400, "hidden_size": 32, "layers": 1, "heads": 2, "max_length": 768},
    "sft": {"epochs": 1, "max_steps": 60, "batch_size": 8, "learning_rate": 5e-3, "save_steps": 20,
            "warmup_steps": 0, "first_decision_repeats": 1},
    "dagrpo": {"max_steps": 2, "num_generations": 2, "per_device_batch_size": 2, "max_completion_length": 48,
               "save_steps": 1, "learning_rate": 1e-3},
    "grpo": {"max_steps": 2, "num_generations": 2, "per_device_batch_size": 4, "max_completion_length": 48,
             "save_steps": 1, "learning_rate": 1e-3},
}  # fmt: skip
#: ``eval`` params of the smallest benchmark_scores: every row, two tasks each, two turns at most
TINY_EVAL = {"tasks": 2, "max_turns": 2, "concurrency": 2}


@pytest.fixture(scope="session")
def small_world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 24-seed, 60-entity world (seed 7) generated once per session; do not modify its files."""
    from orchestra.world import generate_world

    out = tmp_path_factory.mktemp("small_world")
    generate_world(SMALL_WORLD, out)
    return out


@pytest.fixture(scope="session")
def small_muxed_world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``small_world``'s params with ``video_audio_track: muxed``: its "video w/ audio" tasks carry one
    MP4 with a sound track; every other file is the same bytes. Do not modify its files."""
    from orchestra.world import generate_world

    out = tmp_path_factory.mktemp("small_muxed_world")
    generate_world(SMALL_MUXED_WORLD, out)
    return out


@pytest.fixture(scope="module")
def world_env(small_world: Path) -> Iterator[Environment]:
    """The embedded-default runtime over ``small_world``: its tools and the builtin expert pool."""
    from orchestra.agent.runtime import Environment
    from orchestra.backends.pool import builtin_backends
    from orchestra.tools.registry import default_registry

    agent = AgentParams()
    tools = default_registry(small_world)
    yield Environment(
        tools=tools, backends=builtin_backends(agent), agent=agent, media_root=small_world / "media"
    )
    tools.close()


@pytest.fixture()
def loopback() -> Iterator[Callable[[type[BaseHTTPRequestHandler]], int]]:
    """Start a real HTTP server on 127.0.0.1 for a handler class; returns its port. Stopped after the test."""
    servers: list[ThreadingHTTPServer] = []

    def start(handler: type[BaseHTTPRequestHandler]) -> int:
        srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        srv.daemon_threads, srv.block_on_close = True, False
        srv.handle_error = lambda request, address: None  # type: ignore[method-assign]  # client hung up
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return srv.server_address[1]

    yield start
    for srv in servers:
        srv.shutdown()
        srv.server_close()


def _best_latency(tool: Any, path: Path, mode: str, runs: int = 3) -> float:
    """The fastest of ``runs`` calls of ``tool`` on ``path`` in ``mode`` (seconds): a comparison of
    variants that a busy machine's one-off stall cannot flip."""
    best = float("inf")
    for _ in range(runs):
        t0 = time.perf_counter()
        assert tool(path=str(path), mode=mode).ok
        best = min(best, time.perf_counter() - t0)
    return best


@pytest.fixture()
def best_latency() -> Callable[..., float]:
    return _best_latency


SERVE = "from orchestra.agent.cli import app; app()"
# Runs argv[1:] with SIGTERM and SIGINT ignored: that disposition survives exec, as under a Dagster run.
IGNORING = (
    "import os, signal, sys\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "signal.signal(signal.SIGINT, signal.SIG_IGN)\nos.execv(sys.argv[1], sys.argv[1:])"
)


@contextmanager
def _serve_process(
    script: Path, ignoring: bool = False, name: str = "demo", extra: tuple[str, ...] = ()
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """`orchestra serve --script` (and ``extra`` options) as a process (optionally started with
    SIGTERM/SIGINT ignored); yields it and its base URL once it says it is serving. Killed if still
    running at the end."""
    cmd = [
        sys.executable,
        "-c",
        SERVE,
        "serve",
        "--script",
        str(script),
        "--port",
        "0",
        "--name",
        name,
        *extra,
    ]
    if ignoring:
        cmd = [sys.executable, "-c", IGNORING, *cmd]
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        ready = select.select([proc.stderr], [], [], 60)[0]
        line = proc.stderr.readline() if ready else "(nothing within 60 s)"
        assert line.startswith(f"serving {name} at http://127.0.0.1:"), line
        yield proc, line.strip().rsplit(" ", 1)[-1]
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
        assert proc.stderr is not None
        proc.stderr.close()


@pytest.fixture()
def serve_process() -> Callable[..., Any]:
    """``serve_process(script_path, ignoring=False, name="demo", extra=())``: `orchestra serve --script`
    as a real process (optionally started with SIGTERM/SIGINT ignored), yielding (process, base URL)."""
    return _serve_process


@pytest.fixture(scope="module")
def seeds(small_world: Path) -> list[Task]:
    return read_tasks_json(small_world / "tasks.json")


@pytest.fixture(scope="module")
def tools(small_world: Path) -> Iterator[ToolRegistry]:
    """The small world's action tools (web_search, page_browser, code_executor)."""
    registry = ToolRegistry(action_tools(page_store(small_world), ToolParams()))
    yield registry
    registry.close()


@pytest.fixture(scope="session")
def built(small_world: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A data root built by the data stages (seed_tasks: a copy of the small world with one image
    truncated) up to decision_samples, once per session; returns it and the broken seed's id."""
    import shutil

    from orchestra.config import Params
    from orchestra.data.anchors import build_anchor_facts
    from orchestra.data.candidates import build_rewrite_candidates
    from orchestra.data.trajectories import build_decision_samples, build_expert_trajectories
    from orchestra.data.verified import build_verified_samples

    root = tmp_path_factory.mktemp("synthesis")
    shutil.copytree(small_world, root / "seed_tasks")
    tasks = read_tasks_json(root / "seed_tasks" / "tasks.json")
    broken = next(t for t in tasks if any(m.type == "image" for m in t.omni_modal_input))
    image = next(m for m in broken.omni_modal_input if m.type == "image")
    path = root / "seed_tasks" / "media" / image.path
    path.write_bytes(path.read_bytes()[:200])
    params = Params()
    build_anchor_facts(params, root)
    build_rewrite_candidates(params, root)
    build_verified_samples(params, root)
    build_expert_trajectories(params, root)
    build_decision_samples(params, root)
    return root, str(broken.id)


@pytest.fixture()
def tiny_train() -> dict[str, Any]:
    """``train`` params of the smallest policy that still trains (seconds per recipe); a fresh copy."""
    import copy

    return copy.deepcopy(TINY_TRAIN)
