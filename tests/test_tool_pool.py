"""Perception tools in worker processes: the same observations as in-thread, failures kept apart."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, ClassVar

import pytest

from orchestra.config import ToolParams
from orchestra.errors import ToolError
from orchestra.schemas import read_tasks_json
from orchestra.tools.base import Observation, Tool
from orchestra.tools.cache import PerceptionCache
from orchestra.tools.pool import PooledTool, worker_count
from orchestra.tools.registry import default_registry


class Dies(Tool):
    """Ends its worker process the way a crash in native code would."""

    name = "dies"
    description = "test tool"
    input_schema: ClassVar[dict[str, Any]] = {"type": "object", "properties": {"path": {"type": "string"}}}

    def run(self, path: str = "") -> Observation:
        if path == "crash":
            os._exit(3)
        if path == "bug":
            raise ZeroDivisionError("a bug in our own code")
        if path == "bad":
            raise ToolError("bad input")
        return Observation(tool=self.name, text=f"pid {os.getpid()}")


def _media(world: Path) -> list[tuple[str, dict[str, Any]]]:
    tasks = read_tasks_json(world / "tasks.json")
    tool = {"image": "image_count_objects", "audio": "audio_tones", "video": "video_events"}
    seen: dict[str, tuple[str, dict[str, Any]]] = {}
    for t in tasks:
        for m in t.omni_modal_input:
            seen.setdefault(m.type, (tool[m.type], {"path": str(world / "media" / m.path), "mode": "fast"}))
    return sorted(seen.values())


def test_pooled_tools_observe_what_in_thread_tools_do(small_world: Path) -> None:
    calls = _media(small_world)
    assert len(calls) == 3
    with (
        default_registry(small_world, ToolParams(workers=0)) as plain,
        default_registry(small_world, ToolParams(workers=2)) as pooled,
    ):
        for name, args in calls:
            assert isinstance(pooled.get(name), PooledTool) and not isinstance(plain.get(name), PooledTool)
            a, b = plain.get(name)(**args), pooled.get(name)(**args)
            assert a.ok and b.ok, (a.text, b.text)
            assert (a.text, a.data) == (b.text, b.data)
            assert b.latency_s > 0
        # a bad argument is reported as the tool reports it, a missing file as a failed observation
        name, args = calls[0]
        assert pooled.get(name)(path=1).text == plain.get(name)(path=1).text
        gone = pooled.get(name)(**{**args, "path": str(small_world / "media" / "missing.png")})
        assert not gone.ok and "not found" in gone.text
        # the action tools never go to the pool
        assert not isinstance(pooled.get("code_executor"), PooledTool)


def test_a_pooled_tool_keeps_its_cache_key(small_world: Path, tmp_path: Path) -> None:
    name, args = _media(small_world)[0]
    with PerceptionCache.open(tmp_path / "c.sqlite") as cache:
        with default_registry(small_world, ToolParams(workers=0), cache=cache) as plain:
            first = plain.get(name)(**args)
        with default_registry(small_world, ToolParams(workers=1), cache=cache) as pooled:
            again = pooled.get(name)(**args)
        assert cache.stats.hits == 1 and cache.stats.misses == 1
        assert (again.text, again.latency_s) == (first.text, first.latency_s)


def test_a_dead_worker_is_a_failed_call_and_a_bug_is_raised() -> None:
    tool = PooledTool.wrap(Dies(), 1)
    ok = tool(path="x")
    assert ok.ok and ok.text.startswith("pid ") and ok.text != f"pid {os.getpid()}"
    died = tool(path="crash")
    assert not died.ok and "worker running it died" in died.text
    assert tool(path="x").ok  # the pool was rebuilt
    failed = tool(path="bad")
    assert not failed.ok and "ToolError: bad input" in failed.text
    with pytest.raises(ZeroDivisionError, match="a bug in our own code"):
        tool(path="bug")


def test_worker_count_and_params() -> None:
    assert worker_count(0) == 0 and worker_count(3) == 3 and worker_count(None) >= 1
    with pytest.raises(ValueError, match="at least one worker"):
        PooledTool.wrap(Dies(), 0)
    with pytest.raises(ValueError):
        ToolParams(workers=-1)
