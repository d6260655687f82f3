"""The code sandbox's worker process: confine itself, then run one Python snippet like a REPL and report.

Started by :mod:`orchestra.tools.sandbox` as ``python -I -S -B sandbox_worker.py CONFIG_JSON``; stdlib only.
The process (the *outer*) enters fresh namespaces where the kernel allows, forks the *inner* process,
which drops to the sandbox user, sets resource limits, Landlock and seccomp, announces ``ready`` on the
control pipe, reads one ``{"code": ...}`` line on stdin, runs it and writes the result. When the inner
process ends, every process it left behind is killed (PID-namespace teardown, or a subreaper sweep).
"""

from __future__ import annotations

import ast
import builtins
import json
import linecache
import os
import resource
import signal
import sys
import time
import traceback
import types
from typing import Any

FILENAME = "<sandbox>"


def _send(fd: int, event: str, **data: Any) -> None:
    line = (json.dumps({"event": event, **data}) + "\n").encode()
    while line:
        line = line[os.write(fd, line) :]


def _unshare_namespaces(confine: types.ModuleType, info: dict[str, Any]) -> None:
    root = os.geteuid() == 0
    flags = confine.CLONE_NEWNS | confine.CLONE_NEWPID | confine.CLONE_NEWNET | confine.CLONE_NEWIPC
    flags |= confine.CLONE_NEWUTS | (0 if root else confine.CLONE_NEWUSER)
    try:
        confine.unshare(flags)
    except OSError as e:
        info["namespaces"] = f"unavailable ({e.strerror})"
        return
    if not root:
        confine.map_current_user(os.getuid(), os.getgid())
    confine.make_mounts_private()
    info.update(namespaces="pid,net,mount,ipc,uts" + ("" if root else ",user"), pidns=True, netns=True)


def _outer(cfg: dict[str, Any], confine: types.ModuleType) -> int:
    ctl = cfg["ctl_fd"]
    info: dict[str, Any] = {"pidns": False, "netns": False, "namespaces": "disabled", "exposed": []}
    try:
        if cfg["namespaces"]:
            _unshare_namespaces(confine, info)
        mount_ns = info["pidns"]
        if mount_ns:
            confine.mount_tmpfs(cfg["workdir"], cfg["disk_mb"], cfg["uid"], cfg["gid"])
        if cfg["drop"]:
            blocked = {p: confine.blocked_ancestor(p, cfg["uid"], cfg["gid"]) for p in cfg["read"]}
            blocked = {p: b for p, b in blocked.items() if b}
            if blocked and not mount_ns:
                path, top = next(iter(blocked.items()))
                raise OSError(
                    f"sandbox user {cfg['uid']} cannot enter {top} to read {path}, and mount "
                    "namespaces are unavailable to expose it; install Python in a world-readable "
                    "place or allow unshare(CLONE_NEWNS)"
                )
            if blocked:
                info["exposed"] = confine.expose_paths(list(blocked), cfg["uid"], cfg["gid"])
        if not info["pidns"]:
            confine.prctl(confine.PR_SET_CHILD_SUBREAPER, 1)
    except OSError as e:
        _send(ctl, "error", message=f"sandbox setup failed: {e}")
        return 70
    outer_pid = os.getpid()
    pid = os.fork()
    if pid == 0:
        os._exit(_inner(cfg, confine, info, outer_pid))
    # SIGTERM from the parent means "stop now": only we may signal the inner process by its PID, because
    # only we reap it (it stays a zombie until the end, so its PID cannot have been reused meanwhile).
    reaped = False

    def stop(signum: int, frame: Any) -> None:
        if not reaped:
            os.kill(pid, signal.SIGKILL)

    signal.signal(signal.SIGTERM, stop)
    _send(ctl, "spawned", pid=pid)
    os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
    leftovers = 0 if info["pidns"] else _sweep_children(pid)
    reaped = True
    _, status, usage = os.wait4(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    _send(ctl, "exit", code=code, leftovers=leftovers, cpu_s=round(usage.ru_utime + usage.ru_stime, 3))
    return 128 - code if code < 0 else code


def _children(pid: int) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as fh:
                    fields = fh.read().rsplit(b")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                out.append(int(name))
    return out


def _sweep_children(inner: int) -> int:
    """Without a PID namespace we are a subreaper: kill and reap every orphan the snippet left behind
    (they are our children, unreaped until we reap them, so their PIDs are safe to signal)."""
    killed, deadline = 0, time.monotonic() + 5.0
    while time.monotonic() < deadline:
        kids = [k for k in _children(os.getpid()) if k != inner]
        if not kids:
            return killed
        for kid in kids:
            os.kill(kid, signal.SIGKILL)
            killed += 1
        for kid in kids:
            try:
                os.waitpid(kid, 0)
            except ChildProcessError:
                pass  # already reaped
    return killed


def _limit(cfg: dict[str, Any]) -> None:
    # soft == hard: the kernel sends SIGKILL at the limit (the inner process is PID 1 of its namespace
    # when there is one, and PID 1 ignores SIGXCPU's default action).
    cpu = max(1, int(-(-cfg["cpu_s"] // 1)))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
    resource.setrlimit(resource.RLIMIT_AS, (cfg["mem_mb"] << 20, cfg["mem_mb"] << 20))
    resource.setrlimit(resource.RLIMIT_NPROC, (cfg["max_procs"], cfg["max_procs"]))
    resource.setrlimit(resource.RLIMIT_FSIZE, (cfg["disk_mb"] << 20, cfg["disk_mb"] << 20))
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


def _inner(cfg: dict[str, Any], confine: types.ModuleType, info: dict[str, Any], outer_pid: int) -> int:
    ctl = cfg["ctl_fd"]
    try:
        _limit(cfg)
        if cfg["drop"]:
            os.setgroups([])
            os.setresgid(cfg["gid"], cfg["gid"], cfg["gid"])
            os.setresuid(cfg["uid"], cfg["uid"], cfg["uid"])
        confine.drop_capabilities()
        confine.prctl(confine.PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != (0 if info["pidns"] else outer_pid):  # 0: our parent is outside the PID ns
            return 71  # the outer process died before the death signal was armed
        os.chdir(cfg["workdir"])
        os.umask(0o022)
        os.environ.clear()
        os.environ.update(cfg["env"])
        confine.prctl(confine.PR_SET_NO_NEW_PRIVS, 1)
        abi = confine.landlock_abi()
        if abi:
            confine.apply_landlock(
                cfg["read"] + [os.path.realpath("/proc/self")] + cfg["read_files"],
                [cfg["workdir"], "/dev/null"],
                abi,
            )
        elif cfg["require_landlock"]:
            raise OSError(
                "Landlock is unavailable in this kernel; filesystem writes cannot be confined "
                "(set tools.sandbox.require_landlock: false to accept that)"
            )
        confine.apply_seccomp()
    except (OSError, ValueError) as e:
        _send(ctl, "error", message=f"sandbox setup failed: {e}")
        return 70
    sys.path[:] = cfg["sys_path"]
    info.update(uid=os.getuid(), landlock_abi=abi, seccomp=True, max_procs=cfg["max_procs"])
    _send(ctl, "ready", containment=info)
    request = json.loads(sys.stdin.buffer.readline() or b"{}")
    devnull = os.open("/dev/null", os.O_RDONLY)
    os.dup2(devnull, 0)
    me_pid = os.getpid()
    result = run_snippet(str(request.get("code", "")), cfg["max_output"], cfg["mem_mb"])
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass  # the parent closed an over-long output stream; it reports the truncation itself
    if os.getpid() == me_pid:
        _send(ctl, "result", **result)
    return 0


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"... [{len(text) - limit} more characters]"


def run_snippet(code: str, max_output: int, mem_mb: int) -> dict[str, Any]:
    """Run ``code`` in a fresh ``__main__`` namespace; the value of a final expression is returned like a
    REPL's. Never raises: errors come back as ``error`` (one line) and ``traceback``."""
    lines = code.splitlines(keepends=True)
    linecache.cache[FILENAME] = (len(code), None, lines, FILENAME)
    namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
    try:
        tree = ast.parse(code, FILENAME, "exec")
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        exec(compile(tree, FILENAME, "exec"), namespace)
        value = eval(compile(ast.Expression(last.value), FILENAME, "eval"), namespace) if last else None
        return {"ok": True, "value": None if value is None else _clip(repr(value), max_output)}
    except SystemExit as e:
        if e.code in (None, 0):
            return {"ok": True, "value": None}
        return {"ok": False, "error": f"SystemExit: {e.code}", "traceback": None}
    except MemoryError:
        return {
            "ok": False,
            "error": f"MemoryError: the memory limit of {mem_mb} MB was exceeded",
            "traceback": None,
        }
    except BaseException as e:  # noqa: BLE001 - the snippet's error *is* the result
        tb = e.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename != FILENAME:
            tb = tb.tb_next
        text = "".join(traceback.format_exception(type(e), e, tb))
        return {
            "ok": False,
            "error": _clip(f"{type(e).__name__}: {e}", max_output),
            "traceback": _clip(text, max_output),
        }


def main(argv: list[str]) -> int:
    cfg = json.loads(argv[1])
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    try:
        import sandbox_confine as confine
    finally:
        sys.path.remove(here)
    return _outer(cfg, confine)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
