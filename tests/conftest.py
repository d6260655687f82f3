"""Shared fixtures: a small generated world every test module may reuse (read-only)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from orchestra.config import AgentParams, WorldParams

if TYPE_CHECKING:
    from orchestra.agent.systems import Environment

SMALL_WORLD = WorldParams(n_seeds=24, n_entities=60)


@pytest.fixture(scope="session")
def small_world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 24-seed, 60-entity world (seed 7) generated once per session; do not modify its files."""
    from orchestra.world import generate_world

    out = tmp_path_factory.mktemp("small_world")
    generate_world(SMALL_WORLD, out)
    return out


@pytest.fixture(scope="module")
def world_env(small_world: Path) -> Iterator[Environment]:
    """The embedded-default runtime over ``small_world``: its tools and the builtin expert pool."""
    from orchestra.agent.systems import Environment, builtin_backends
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
