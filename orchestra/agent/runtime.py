"""The runtime every system runs on, assembled in one place: tools, experts, agent params, media folder."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

from orchestra.backends.base import BackendRegistry
from orchestra.backends.pool import backend_pool, builtin_backends
from orchestra.config import AgentParams, ProviderSpec, ToolParams
from orchestra.tools.base import ToolRegistry
from orchestra.tools.cache import PerceptionCache, open_perception_cache
from orchestra.tools.registry import default_registry

__all__ = ["Environment", "open_runtime"]


@dataclass
class Environment:
    """What every system runs against: tool pool, backend pool, agent params, the media folder."""

    tools: ToolRegistry
    backends: BackendRegistry
    agent: AgentParams = field(default_factory=AgentParams)
    media_root: Path | None = None
    max_turns: int = 8
    seed: int = 0
    perception: PerceptionCache | None = None  #: the cache serving the tools, when one does


@contextmanager
def open_runtime(
    agent: AgentParams,
    tools: ToolParams,
    *,
    pages: Path | None = None,
    media_root: Path | None = None,
    cache_dir: Path | None = None,
    providers: Mapping[str, ProviderSpec] | None = None,
    backends: BackendRegistry | None = None,
    max_turns: int = 8,
    seed: int = 0,
) -> Iterator[Environment]:
    """The runtime, its tools and perception cache closed when the block ends.

    ``pages``: the folder whose ``kb/pages.jsonl`` search and browse read (a world, seed_tasks, a
    benchmark); ``media_root``: the folder task media paths are relative to; ``cache_dir``: the data
    folder whose perception cache serves the tools (when ``tools.cache`` is on; None: every tool runs
    cold). The experts: ``backends`` when given, else the whole pool on ``providers``, else the
    builtin experts alone."""
    cache = open_perception_cache(cache_dir, tools) if cache_dir is not None else None
    if backends is None:
        backends = builtin_backends(agent) if providers is None else backend_pool(agent, providers)
    with cache or nullcontext(), default_registry(pages, tools, cache=cache) as registry:
        yield Environment(registry, backends, agent, media_root, max_turns, seed, cache)
