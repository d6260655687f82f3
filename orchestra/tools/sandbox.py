"""The code executor tool: Python snippets in a confined, resource-limited worker process from a warm pool."""

from __future__ import annotations

import signal
import sys
import tempfile
import weakref
from typing import Any, ClassVar

from orchestra.errors import ToolError
from orchestra.tools.base import Observation, Tool
from orchestra.tools.sandbox_pool import Pool, SandboxLimits, Worker

__all__ = ["CodeExecutor", "SandboxLimits"]


class CodeExecutor(Tool):
    """Run Python in a sandbox: separate process, resource limits, no network, private temp folder."""

    name: ClassVar[str] = "code_executor"
    description: ClassVar[str] = (
        "Run a Python 3 snippet in an isolated sandbox (fresh process and temp folder, no network, CPU/"
        "memory/time/output limits, standard library plus installed packages such as numpy). Returns "
        "stdout, stderr and, like a REPL, the value of the last expression; or the error and traceback."
    )
    input_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"code": {"type": "string", "description": "Python source to run"}},
        "required": ["code"],
    }

    def __init__(
        self,
        cpu_s: float = 5.0,
        mem_mb: int = 512,
        wall_s: float = 10.0,
        max_output: int = 20_000,
        max_procs: int = 32,
        disk_mb: int = 64,
        pool_size: int = 2,
        uid: int = 65534,
        gid: int = 65534,
        namespaces: bool = True,
        require_landlock: bool = True,
        tmp_root: str | None = None,
    ) -> None:
        if min(cpu_s, wall_s) <= 0 or min(mem_mb, max_output, max_procs, disk_mb) < 1 or pool_size < 0:
            raise ToolError("code executor limits must be positive (pool_size may be 0)")
        self.limits = SandboxLimits(
            cpu_s=cpu_s,
            wall_s=wall_s,
            mem_mb=mem_mb,
            max_output=max_output,
            max_procs=max_procs,
            disk_mb=disk_mb,
        )
        options = {
            "uid": uid,
            "gid": gid,
            "namespaces": namespaces,
            "require_landlock": require_landlock,
            "tmp_root": tmp_root or tempfile.gettempdir(),
        }
        limits = self.limits  # the pool must not reference self, or the finalizer would never run
        self._pool = Pool(lambda: Worker(limits, options), pool_size)
        self._finalizer = weakref.finalize(self, self._pool.close)

    def close(self) -> None:
        """Stop the idle workers and remove their folders."""
        self._finalizer()

    def containment(self) -> dict[str, Any]:
        """How the sandbox is confined on this machine (starts a worker, keeps it for the next call)."""
        worker = self._pool.take()
        info = worker.wait_ready()
        self._pool.put_back(worker)
        return info

    def run(self, code: str) -> Observation:
        if not isinstance(code, str):
            raise ToolError(f"code must be a string, got {type(code).__name__}")
        if not sys.platform.startswith("linux"):
            raise ToolError("the code executor needs Linux (namespaces, Landlock, seccomp)")
        worker = self._pool.take()
        containment = worker.wait_ready()
        try:
            out = worker.execute(code)
        finally:
            self._pool.retire(worker)
        data: dict[str, Any] = {
            "stdout": out["stdout"],
            "stderr": out["stderr"],
            "value": None,
            "truncated": out["truncated"],
            "containment": containment,
            "elapsed_s": round(out["elapsed_s"], 4),
        }
        result = out["result"]
        if result is not None and result.get("ok"):
            data["value"] = result.get("value")
            return Observation(tool=self.name, text=self._render(data, None), data=data)
        error = result.get("error") if result is not None else self._death(out)
        data["error"] = error
        data["traceback"] = result.get("traceback") if result is not None else None
        return Observation(tool=self.name, ok=False, text=self._render(data, error), data=data, error=error)

    def _death(self, out: dict[str, Any]) -> str:
        lim = self.limits
        if out["broken"]:
            return str(out["broken"])
        if out["timed_out"]:
            return (
                f"TimeoutError: the wall-clock limit of {lim.wall_s:g} s was exceeded; the sandbox was killed"
            )
        code = out["exit"]["code"] if out["exit"] else None
        if code is None:
            return "the sandbox worker vanished without reporting (killed from outside?)"
        cpu = float(out["exit"].get("cpu_s", 0.0))
        # the kernel kills at the whole-second limit on its precise clock; rusage's tick-sampled
        # utime + stime can read 50 ms or more below it on a loaded machine (0.95 s of a 1 s limit)
        if code in (-signal.SIGXCPU, -signal.SIGKILL) and cpu >= 0.9 * int(-(-lim.cpu_s // 1)):
            return f"the CPU-time limit of {lim.cpu_s:g} s was exceeded ({cpu:.2f} s used), killed"
        if code < 0:
            return f"the sandbox process was killed by {signal.Signals(-code).name} ({cpu:.2f} s CPU used)"
        return f"the snippet ended the sandbox process (exit code {code}) before returning a result"

    @staticmethod
    def _render(data: dict[str, Any], error: str | None) -> str:
        parts = []
        for stream in ("stdout", "stderr"):
            if data[stream]:
                cut = " [truncated]" if stream in data["truncated"] else ""
                parts.append(f"{stream}{cut}:\n{data[stream].rstrip()}")
        if error is not None:
            parts.append(data.get("traceback") or f"error: {error}")
        elif data["value"] is not None:
            parts.append(f"value: {data['value']}")
        return "\n".join(parts) if parts else "(no output)"
