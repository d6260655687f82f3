"""Perception tools in worker processes, so sub-agents that run at once use every core.

The perception tools are CPU-bound Python and numpy: in the caller's threads they take turns on
the GIL, and two sub-agents reading two videos at once barely overlap. With ``tools.workers`` > 0 a
registry's perception tools run each call in a pool of that many spawned worker processes (the
default is the cores this process may use; 0 runs them in the calling thread). There is one pool per size
per process, shared by every registry, started on the first call: a worker builds each tool from its
class and its ``config()`` (the speech tool's names; the others take none) once and keeps it.

A call's observation is the worker's, with the latency of the whole round trip measured in the
caller (what the sub-agent waited, queueing included). A worker that dies (native code crashing on a
hostile file) fails that call with a recorded failure and the pool is rebuilt for the next one;
an exception that is not a tool failure (a bug) is re-raised in the caller.
"""

from __future__ import annotations

import json
import multiprocessing
import multiprocessing.util
import os
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from orchestra.errors import OrchestraError
from orchestra.tools.base import Observation, Tool, ToolWrapper, stand_in
from orchestra.tools.loader import load_tool_class

__all__ = ["PooledTool", "usable_cores", "worker_count"]


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def worker_count(workers: int | None) -> int:
    """``tools.workers`` resolved: None = :func:`usable_cores`, 0 = in the calling thread."""
    return usable_cores() if workers is None else workers


# -- the worker side ------------------------------------------------------------------------------

_TOOLS: dict[str, Tool] = {}


def _init_worker() -> None:
    import importlib

    import cv2
    from threadpoolctl import threadpool_limits

    cv2.setNumThreads(1)  # one worker per core: OpenCV's own threads would only contend with the others
    threadpool_limits(1)  # and numpy's BLAS threads (two reads at once went 0.5 s -> 0.75-0.9 s each)
    for module in ("image", "audio", "video"):  # the tools, loaded before the first call waits on them
        importlib.import_module(f"orchestra.tools.{module}")
    from orchestra.tools.speech_match import warm

    warm()  # the speech tool's compiled matcher (about 0.5 s the first time a process uses it)


def _work(spec: str, config: dict[str, Any], args: dict[str, Any]) -> Observation:
    key = spec + json.dumps(config, sort_keys=True)
    tool = _TOOLS.get(key)
    if tool is None:
        tool = _TOOLS[key] = load_tool_class(spec)(**config)
    return tool(**args)


# -- the caller side ------------------------------------------------------------------------------

_POOLS: dict[int, ProcessPoolExecutor] = {}
_LOCK = threading.Lock()
_FINALIZED_IN: int | None = None  # the process whose exit shuts the pools down


def _pool(size: int) -> ProcessPoolExecutor:
    with _LOCK:
        pool = _POOLS.get(size)
        if pool is None:
            # spawn: fresh interpreters, whatever threads the caller runs (fork is unsafe with threads).
            # As with any start method but fork, a worker imports the caller's main script (guarded by
            # ``if __name__ == "__main__"``, as every entry point of the project is).
            ctx = multiprocessing.get_context("spawn")
            pool = _POOLS[size] = ProcessPoolExecutor(size, mp_context=ctx, initializer=_init_worker)
            _shut_down_at_exit()
        return pool


def _shut_down_at_exit() -> None:
    """A multiprocessing finalizer, not an atexit hook: a process that is itself a multiprocessing
    child (a Dagster step) ends with os._exit after joining its children, without atexit or the
    executor's own exit hook, and would wait forever on idle workers; finalizers of priority >= 0 run
    before that join. Registered by the process that starts a pool, not at import: a child forked from
    a process that imported this module (Dagster's forkserver) starts with the finalizers cleared."""
    global _FINALIZED_IN
    if _FINALIZED_IN != os.getpid():
        multiprocessing.util.Finalize(None, _shutdown, exitpriority=100)
        _FINALIZED_IN = os.getpid()


def _drop(size: int, pool: ProcessPoolExecutor) -> None:
    with _LOCK:
        if _POOLS.get(size) is pool:
            del _POOLS[size]
    pool.shutdown(wait=False, cancel_futures=True)


def _shutdown() -> None:
    with _LOCK:
        pools = list(_POOLS.values())
        _POOLS.clear()
    for pool in pools:
        pool.shutdown(wait=True, cancel_futures=True)


class PooledTool(ToolWrapper):
    """A perception tool whose calls run in the worker pool of ``size`` processes.

    It has the wrapped tool's name, description, input schema, price, failure kinds and version, so
    a perception cache keys it as the tool itself; argument checking and ``spec`` are the wrapped
    tool's (a bad argument is reported without a round trip). Build one with :meth:`wrap`."""

    def __init__(self, inner: Tool, size: int) -> None:
        super().__init__(inner)
        self.size = size
        cls = type(inner)
        self.spec_name = f"{cls.__module__}:{cls.__qualname__}"

    @staticmethod
    def wrap(tool: Tool, size: int) -> PooledTool:
        if size < 1:
            raise ValueError(f"a worker pool needs at least one worker, got {size}")
        return stand_in(PooledTool, type(tool))(tool, size)

    def __call__(self, **kwargs: Any) -> Observation:
        try:
            args = self.inner.check_args(kwargs)
        except (OrchestraError, *self.inner.failure_kinds):
            return self.inner(**kwargs)  # reports the bad argument exactly as the tool does
        start = time.perf_counter()
        pool = _pool(self.size)
        try:
            obs = pool.submit(_work, self.spec_name, self.inner.config(), args).result()
        except BrokenProcessPool as e:
            _drop(self.size, pool)
            obs = self.inner.failure(f"the perception worker running it died ({e}); the pool is restarted")
        obs.latency_s = time.perf_counter() - start
        return obs
