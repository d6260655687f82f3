"""The code sandbox's worker processes: start one confined worker per call, keep a warm pool of them."""

from __future__ import annotations

import json
import os
import selectors
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestra.errors import ToolError

WORKER = Path(__file__).with_name("sandbox_worker.py")
SYSTEM_READ = ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/etc", "/sys/devices/system/cpu")
READ_FILES = ("/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/proc/cpuinfo", "/proc/meminfo")
SETUP_TIMEOUT_S = 15.0
REAP_AFTER_S = 10.0  # a retired worker still running after this long is killed
EVENTS = ("spawned", "ready", "error", "result", "exit")


@dataclass(frozen=True)
class SandboxLimits:
    """Per-call limits. Memory and process counts are per process / per sandbox user respectively."""

    cpu_s: float = 5.0
    wall_s: float = 10.0
    mem_mb: int = 512
    max_output: int = 20_000
    max_procs: int = 32
    disk_mb: int = 64


def python_roots() -> tuple[list[str], list[str]]:
    """(folders the sandbox may read, its sys.path): the interpreter's prefixes and their import folders,
    never the caller's working tree."""
    prefixes = {
        os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)
    }
    inside = [os.path.realpath(p) for p in sys.path if p]
    sys_path = [p for p in dict.fromkeys(inside) if any(p == q or p.startswith(q + "/") for q in prefixes)]
    read = sorted(prefixes | {p for p in SYSTEM_READ if os.path.exists(p)})
    return read, sys_path


class Worker:
    """One pre-started worker process; serves exactly one snippet, then is gone."""

    def __init__(self, limits: SandboxLimits, options: dict[str, Any]) -> None:
        self.limits = limits
        self.workdir = Path(tempfile.mkdtemp(prefix="orchestra-sbx-", dir=options["tmp_root"]))
        drop = os.geteuid() == 0
        if drop:
            os.chown(self.workdir, options["uid"], options["gid"])
        read, sys_path = python_roots()
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "HOME": str(self.workdir),
            "TMPDIR": str(self.workdir),
            "PYTHONDONTWRITEBYTECODE": "1",
            "OMP_NUM_THREADS": "1",
            "OPENBLAS_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
        }
        ctl_r, ctl_w = os.pipe()
        cfg = {
            "ctl_fd": ctl_w,
            "workdir": str(self.workdir),
            "drop": drop,
            "uid": options["uid"],
            "gid": options["gid"],
            "namespaces": options["namespaces"],
            "require_landlock": options["require_landlock"],
            "read": read,
            "sys_path": sys_path,
            "read_files": [p for p in READ_FILES if os.path.exists(p)],
            "env": env,
            "cpu_s": limits.cpu_s,
            "mem_mb": limits.mem_mb,
            "max_procs": limits.max_procs,
            "disk_mb": limits.disk_mb,
            "max_output": limits.max_output,
        }
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-I", "-S", "-B", str(WORKER), json.dumps(cfg)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=(ctl_w,),
                env={"PATH": env["PATH"], "LANG": "C.UTF-8"},
                cwd=self.workdir,
                start_new_session=True,
            )
        except OSError as e:
            os.close(ctl_r)
            shutil.rmtree(self.workdir, ignore_errors=True)
            raise ToolError(f"cannot start the sandbox worker: {e}") from e
        finally:
            os.close(ctl_w)
        self.ctl = ctl_r
        self.inner_pid: int | None = None
        self.containment: dict[str, Any] | None = None
        self.ready = False
        self.retired_at = 0.0
        self.broken: str | None = None
        self.events: list[dict[str, Any]] = []
        self.out = {"stdout": bytearray(), "stderr": bytearray()}
        self.truncated: set[str] = set()
        self._ctl_buf = b""
        # a result line holds value, error and traceback, each clipped to max_output, JSON-escaped
        self._control_limit = 18 * limits.max_output + 65536
        self._sel = selectors.DefaultSelector()
        self._sel.register(self.ctl, selectors.EVENT_READ, "ctl")
        self._sel.register(self.proc.stdout, selectors.EVENT_READ, "stdout")  # type: ignore[arg-type]
        self._sel.register(self.proc.stderr, selectors.EVENT_READ, "stderr")  # type: ignore[arg-type]

    def _pump(self, until: str, deadline: float) -> dict[str, Any] | None:
        """Read all three pipes until a control event named ``until`` (or ``exit``) arrives; None on
        timeout or when the control pipe closes first."""
        while True:
            for ev in self.events:
                if ev["event"] in (until, "exit", "error"):
                    return ev
            left = deadline - time.monotonic()
            if left <= 0 or not self._sel.get_map():
                return None
            for key, _ in self._sel.select(timeout=left):
                fd = key.fd
                chunk = os.read(fd, 65536)
                if not chunk:
                    self._sel.unregister(key.fileobj)
                    if key.data == "ctl":
                        return None
                    continue
                if key.data == "ctl":
                    self._ctl_buf += chunk
                    *lines, self._ctl_buf = self._ctl_buf.split(b"\n")
                    for line in lines:
                        self._control(line)
                    if len(self._ctl_buf) > self._control_limit:
                        self.broken = "the snippet flooded the sandbox's control pipe; the sandbox was killed"
                        self._sel.unregister(key.fileobj)
                        return None
                else:
                    buf = self.out[key.data]
                    buf += chunk
                    if len(buf) > self.limits.max_output:
                        del buf[self.limits.max_output :]
                        self.truncated.add(key.data)
                        self._sel.unregister(key.fileobj)
                        key.fileobj.close()  # type: ignore[union-attr]

    def _control(self, line: bytes) -> None:
        """Record one control event; anything else (a snippet writing to the pipe) is dropped."""
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            return
        if not isinstance(event, dict) or event.get("event") not in EVENTS or len(self.events) > 16:
            return
        if event["event"] == "spawned":
            self.inner_pid = int(event["pid"])
        elif event["event"] == "ready":
            self.containment = event.get("containment")
        self.events.append(event)

    def wait_ready(self) -> dict[str, Any]:
        if self.ready:
            return self.containment  # type: ignore[return-value]
        ev = self._pump("ready", time.monotonic() + SETUP_TIMEOUT_S)
        if ev is not None and ev["event"] == "ready" and self.inner_pid is None:
            ev = self._pump("spawned", time.monotonic() + SETUP_TIMEOUT_S)
        if ev is None or ev["event"] not in ("ready", "spawned") or self.containment is None:
            detail = ev.get("message") if ev else None
            err = bytes(self.out["stderr"]).decode("utf-8", "replace").strip()[-2000:]
            self.kill()
            raise ToolError(f"the sandbox worker did not start: {detail or err or 'no message'}")
        self.events.clear()
        for buf in self.out.values():
            buf.clear()  # start-up chatter is not the snippet's output
        self.ready = True
        return self.containment

    def execute(self, code: str) -> dict[str, Any]:
        """Send ``code``; wait for its result within the wall-clock limit; always ends the worker."""
        start = time.monotonic()
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps({"code": code}).encode() + b"\n")
            self.proc.stdin.close()
        except BrokenPipeError:
            pass  # the worker died before reading; its exit event below says why
        ev = self._pump("result", start + self.limits.wall_s)
        timed_out = ev is None and self.proc.poll() is None and time.monotonic() - start >= self.limits.wall_s
        if timed_out or self.broken:
            self.proc.send_signal(signal.SIGTERM)  # the outer process kills the snippet and its leftovers
        exit_ev = None if self.broken else self._pump("exit", time.monotonic() + 5.0)
        if exit_ev is not None and exit_ev["event"] == "exit":
            # The snippet and everything it started are gone; the outer process is exiting by itself
            # (namespace teardown takes a few ms): the pool reaps it later instead of this call waiting.
            self._close_pipes()
            self.retired_at = time.monotonic()
        else:
            self.kill()
        result = ev if ev is not None and ev["event"] == "result" else None
        return {
            "result": result,
            "timed_out": timed_out,
            "broken": self.broken,
            "exit": exit_ev if exit_ev and exit_ev["event"] == "exit" else None,
            "stdout": bytes(self.out["stdout"]).decode("utf-8", "replace"),
            "stderr": bytes(self.out["stderr"]).decode("utf-8", "replace"),
            "truncated": sorted(self.truncated),
            "elapsed_s": time.monotonic() - start,
        }

    def kill(self) -> None:
        """End the worker: close our pipe ends (so no writer blocks), ask the outer process (which alone
        may signal the snippet's PID) to stop, then force."""
        self._close_pipes()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=3.0)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)  # the outer is unreaped, so its group id is ours
        self.proc.wait()
        _remove_tree(self.workdir)

    def _close_pipes(self) -> None:
        self._sel.close()
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None and not stream.closed:
                stream.close()
        if self.ctl >= 0:
            os.close(self.ctl)
            self.ctl = -1

    def reap(self) -> bool:
        """True once a retired worker's process has exited and its folder is removed."""
        if self.proc.poll() is None:
            if time.monotonic() - self.retired_at < REAP_AFTER_S:
                return False
            self.kill()
            return True
        _remove_tree(self.workdir)
        return True


def _remove_tree(path: Path) -> None:
    """Remove a worker folder, opening up folders a snippet left without permissions."""

    def reopen(func: Any, p: str, exc_info: Any) -> None:
        os.chmod(os.path.dirname(p), stat.S_IRWXU)
        if os.path.isdir(p) and not os.path.islink(p):
            os.chmod(p, stat.S_IRWXU)
            shutil.rmtree(p, onerror=reopen)
        else:
            os.unlink(p)

    if path.exists():
        shutil.rmtree(path, onerror=reopen)


class Pool:
    """Keeps ``size`` workers starting in the background so a call rarely waits for one."""

    def __init__(self, make: Any, size: int) -> None:
        self._make, self._size = make, size
        self._idle: list[Worker] = []
        self._retired: list[Worker] = []
        self._lock = threading.Lock()
        self.closed = False

    def take(self) -> Worker:
        with self._lock:
            if self.closed:
                raise ToolError("the code executor was closed")
            self._retired = [w for w in self._retired if not w.reap()]
            worker = self._idle.pop(0) if self._idle else self._make()
            while len(self._idle) < self._size:
                self._idle.append(self._make())
        return worker

    def put_back(self, worker: Worker) -> None:
        with self._lock:
            self._idle.insert(0, worker)

    def retire(self, worker: Worker) -> None:
        """A worker that served its call: reaped on a later take() or at close()."""
        with self._lock:
            self._retired.append(worker)

    def close(self) -> None:
        with self._lock:
            self.closed = True
            workers, self._idle, self._retired = self._idle + self._retired, [], []
        for worker in workers:
            worker.kill()
