"""The code executor: REPL semantics, limits, and containment of hostile snippets (proved as root here)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import orchestra
from orchestra.tools.sandbox import CodeExecutor
from orchestra.tools.sandbox_confine import landlock_abi, seccomp_program

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = Path(orchestra.__file__).resolve().parent  # the code under test, wherever the checkout lies
IS_ROOT = os.geteuid() == 0


@pytest.fixture(scope="module")
def sandbox() -> Iterator[CodeExecutor]:
    ex = CodeExecutor(cpu_s=1, wall_s=15, mem_mb=256, max_procs=16, max_output=4000, pool_size=1)
    yield ex
    ex.close()


def processes_mentioning(marker: str) -> list[int]:
    """PIDs whose command line contains ``marker`` (every sandbox process carries its workdir there),
    except the worker's outer process, our own child, which may still be finishing its exit."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if marker.encode() not in Path(f"/proc/{name}/cmdline").read_bytes():
                    continue
                ppid = int(Path(f"/proc/{name}/stat").read_bytes().rsplit(b")", 1)[1].split()[1])
            except OSError:
                continue
            if ppid != os.getpid():
                found.append(int(name))
    return found


# Write megabytes without a newline into every inherited pipe, the control pipe included.
FLOOD_PIPES = (
    "import os\nfds = [int(f) for f in os.listdir('/proc/self/fd') if int(f) > 2]\nfor _ in range(40):\n"
    "    for fd in fds:\n        try:\n            os.write(fd, b'y' * 1000000)\n"
    "        except OSError:\n            pass"
)


def still_works(ex: CodeExecutor) -> None:
    obs = ex(code="6 * 7")
    assert obs.ok and obs.data["value"] == "42", obs.text


def test_value_of_last_expression_stdout_and_errors(sandbox: CodeExecutor) -> None:
    obs = sandbox(code="x = 5\nprint('hello', x)\nx * 2")
    assert obs.ok and obs.data["value"] == "10" and obs.data["stdout"] == "hello 5\n"
    assert "value: 10" in obs.text and "hello 5" in obs.text
    assert sandbox(code="y = 3").data["value"] is None
    assert sandbox(code="print('only')").data["value"] is None
    err = sandbox(code="a = 1\nb = 0\na / b")
    assert not err.ok and err.error == "ZeroDivisionError: division by zero"
    assert (
        'File "<sandbox>", line 3' in err.data["traceback"] and "sandbox_worker" not in err.data["traceback"]
    )
    syntax = sandbox(code="def f(:\n  pass")
    assert not syntax.ok and syntax.error.startswith("SyntaxError")


def test_each_call_gets_a_fresh_process_and_folder() -> None:
    ex = CodeExecutor(pool_size=1)
    try:
        first = ex(code="import os\nopen('mark.txt', 'w').write('x')\n(os.getcwd(), sorted(os.listdir('.')))")
        second = ex(code="import os\n(os.getcwd(), sorted(os.listdir('.')), 'x' in globals())")
    finally:
        ex.close()
    cwd1, files1 = eval(first.data["value"])
    cwd2, files2, leaked = eval(second.data["value"])
    assert files1 == ["mark.txt"] and files2 == [] and not leaked and cwd1 != cwd2
    assert not Path(cwd1).exists() and not Path(cwd2).exists(), "per-call folders are removed"


@pytest.mark.skipif(not IS_ROOT, reason="the uid drop is the root path")
def test_as_root_the_snippet_runs_as_an_unprivileged_user(sandbox: CodeExecutor) -> None:
    obs = sandbox(code="import os\n(os.getuid(), os.geteuid(), os.getgid(), os.getgroups())")
    assert eval(obs.data["value"]) == (65534, 65534, 65534, [])
    info = sandbox.containment()
    assert info["uid"] == 65534 and info["seccomp"] is True and info["max_procs"] == 16


def test_infinite_loop_is_killed_at_the_cpu_limit(sandbox: CodeExecutor) -> None:
    obs = sandbox(code="while True:\n    pass")
    assert not obs.ok and "CPU-time limit of 1 s was exceeded" in obs.error, obs.error
    still_works(sandbox)


def test_sleeping_snippet_is_killed_at_the_wall_clock_limit(sandbox: CodeExecutor) -> None:
    short = CodeExecutor(cpu_s=5, wall_s=1.5, pool_size=0)
    try:
        start = time.monotonic()
        obs = short(code="import time\ntime.sleep(60)")
        assert not obs.ok and "wall-clock limit of 1.5 s" in obs.error
        assert 1.4 < time.monotonic() - start < 8
    finally:
        short.close()
    still_works(sandbox)


def test_memory_bomb_is_stopped(sandbox: CodeExecutor) -> None:
    for code in (
        "x = bytearray(8 * 1024**3)",
        "chunks = []\nwhile True:\n    chunks.append(bytearray(2**24))",
    ):
        obs = sandbox(code=code)
        assert not obs.ok and "memory limit of 256 MB" in obs.error, obs.text
    still_works(sandbox)


def test_fork_bomb_is_contained_and_cleaned_up(sandbox: CodeExecutor) -> None:
    bomb = "import os\nprint(os.getcwd(), flush=True)\nwhile True:\n    os.fork()"
    obs = sandbox(code=bomb)
    assert not obs.ok and "BlockingIOError" in obs.error
    workdir = obs.data["stdout"].split()[0]
    assert processes_mentioning(workdir) == []
    # Children that survive their parent's call: counted against the limit, killed when the call ends.
    sleepers = (
        "import os, time\nprint(os.getcwd(), flush=True)\nn = 0\ntry:\n    while True:\n"
        "        if os.fork() == 0:\n            os.setsid()\n            time.sleep(300)\n"
        "        n += 1\nexcept OSError:\n    pass\nn"
    )
    obs = sandbox(code=sleepers)
    assert obs.ok and 1 <= int(obs.data["value"]) < 16
    assert processes_mentioning(obs.data["stdout"].split()[0]) == []
    still_works(sandbox)


def refusals(path: str, exposed: list[str]) -> set[str]:
    """How the sandbox refuses ``path``: Landlock (or file modes) answer PermissionError; under a folder it
    covers with a tmpfs holding only the interpreter (``exposed``: a checkout in a private /tmp folder,
    say) the path may not exist at all, and FileNotFoundError is the refusal."""
    hidden = any(path == top or path.startswith(top.rstrip("/") + "/") for top in exposed)
    return {"PermissionError", "FileNotFoundError"} if hidden else {"PermissionError"}


def test_writing_outside_its_folder_fails(sandbox: CodeExecutor, tmp_path: Path) -> None:
    os.chmod(tmp_path, 0o777)
    targets = [
        "/tmp/orchestra-escape.txt",
        str(tmp_path / "escape.txt"),
        str(ROOT / "escape.txt"),
        "/etc/escape",
    ]
    code = (
        "import json\nres = {}\nfor p in %r:\n    try:\n        open(p, 'w').write('x')\n"
        "        res[p] = 'written'\n    except OSError as e:\n        res[p] = type(e).__name__\n"
        "open('inside.txt', 'w').write('ok')\nres['inside'] = open('inside.txt').read()\njson.dumps(res)"
    )
    exposed = sandbox.containment()["exposed"]
    obs = sandbox(code=code % targets)
    res = json.loads(eval(obs.data["value"]))
    assert res.pop("inside") == "ok"
    assert all(res[p] in refusals(p, exposed) for p in targets), (res, exposed)
    assert not any(Path(p).exists() for p in targets)
    # Nor can it read the caller's tree: the file is there and readable for us, never for the snippet.
    secret = ROOT / "pyproject.toml"
    assert "[project]" in secret.read_text()
    stolen = sandbox(code=f"open({str(secret)!r}).read()")
    assert not stolen.ok and "[project]" not in stolen.text, stolen.text
    assert stolen.error.split(":")[0] in refusals(str(secret), exposed), (stolen.error, exposed)
    assert sandbox(code="import os\nopen(os.__file__).read()[:3]").ok  # the same read of a permitted file


def test_opening_a_socket_fails(sandbox: CodeExecutor) -> None:
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    try:
        code = (
            "import socket\nres = []\nfor make in (lambda: socket.socket(),\n"
            "             lambda: socket.socket(socket.AF_UNIX),\n"
            f"             lambda: socket.create_connection(('127.0.0.1', {port}), timeout=1)):\n"
            "    try:\n        make()\n        res.append('opened')\n"
            "    except OSError as e:\n        res.append(type(e).__name__)\nres"
        )
        obs = sandbox(code=code)
        assert eval(obs.data["value"]) == ["PermissionError"] * 3
    finally:
        server.close()
    still_works(sandbox)


def test_parent_environment_is_not_visible(sandbox: CodeExecutor, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCHESTRA_TEST_SECRET", "s3cret-value")
    ex = CodeExecutor(pool_size=0)
    try:
        code = (
            f"import os\nleak = [k for k, v in os.environ.items() if 's3cret' in v]\ntry:\n"
            f"    leak.append(open('/proc/{os.getpid()}/environ', 'rb').read().decode(errors='ignore'))\n"
            "except OSError as e:\n    pass\n(sorted(os.environ), leak)"
        )
        names, leak = eval(ex(code=code).data["value"])
        assert leak == [] and "ORCHESTRA_TEST_SECRET" not in names
        assert set(names) <= {
            "PATH",
            "LANG",
            "HOME",
            "TMPDIR",
            "PYTHONDONTWRITEBYTECODE",
            "OMP_NUM_THREADS",
            "OPENBLAS_NUM_THREADS",
            "MKL_NUM_THREADS",
        }
    finally:
        ex.close()


def test_hostile_snippets_cannot_hurt_the_parent(sandbox: CodeExecutor) -> None:
    hostile = [
        f"import os, signal\nos.kill({os.getpid()}, signal.SIGKILL)",
        "import os\nos.kill(os.getppid(), 9)",
        "import os\nos._exit(3)",
        "raise SystemExit(4)",
        "import ctypes\nctypes.CDLL(None).unshare(0x40000000)",  # namespaces refused by seccomp: returns -1
        "print('x' * 100000)",
        FLOOD_PIPES,
    ]
    for code in hostile:
        sandbox(code=code)
        still_works(sandbox)
    assert "exit code 3" in sandbox(code="import os\nos._exit(3)").error
    out = sandbox(code="print('y' * 100000)")
    assert out.data["truncated"] == ["stdout"] and len(out.data["stdout"]) == 4000
    assert sandbox(code="import ctypes\nctypes.CDLL(None).unshare(0x40000000)").data["value"] == "-1"
    assert "flooded the sandbox's control pipe" in sandbox(code=FLOOD_PIPES).error


def test_bad_input_is_an_error_observation(sandbox: CodeExecutor) -> None:
    assert not sandbox().ok and "missing required argument" in sandbox().error
    obs = sandbox(code=123)
    assert not obs.ok and "must be a string" in obs.error


def test_seccomp_filter_shape() -> None:
    prog = seccomp_program("x86_64")
    assert len(prog) % 8 == 0 and len(prog) // 8 < 256
    assert len(seccomp_program("aarch64")) % 8 == 0
    with pytest.raises(OSError):
        seccomp_program("mips")


@pytest.mark.skipif(not IS_ROOT or not landlock_abi(), reason="needs root to become another user")
def test_without_root_rlimit_nproc_and_landlock_alone_contain_it(tmp_path: Path) -> None:
    """The laptop path: started by an unprivileged user with namespaces off, RLIMIT_NPROC bounds a fork
    bomb, Landlock confines writes, seccomp blocks sockets, and the environment is stripped."""
    script = tmp_path / "nonroot.py"
    script.write_text(
        "import json, os, sys\n"
        f"sys.path.insert(0, {str(PACKAGE / 'tools')!r})\n"
        "import sandbox_confine as c\n"
        "from orchestra.tools.sandbox import CodeExecutor\n"
        "from orchestra.tools.sandbox_pool import python_roots\n"
        "c.unshare(c.CLONE_NEWNS)\nc.make_mounts_private()\n"
        # The package, not the checkout: a checkout in a 0700 folder (mkdtemp) bound back stays shut.
        f"c.expose_paths(python_roots()[0] + [{str(PACKAGE)!r}], 65534, 65534)\n"
        "os.setgroups([]); os.setresgid(65534, 65534, 65534); os.setresuid(65534, 65534, 65534)\n"
        "os.environ['ORCHESTRA_TEST_SECRET'] = 's3cret'\n"
        "ex = CodeExecutor(namespaces=False, cpu_s=1, wall_s=3, max_procs=24, pool_size=1)\n"
        "out = {'info': ex.containment()}\n"
        "out['bomb'] = ex(code='import os\\nwhile True:\\n    os.fork()').error\n"
        "out['after'] = ex(code='6*7').data['value']\n"
        "out['write'] = ex(code='open(\"/tmp/nonroot-escape\", \"w\")').error\n"
        "out['socket'] = ex(code='import socket\\nsocket.socket()').error\n"
        "out['env'] = ex(code='import os\\n\"ORCHESTRA_TEST_SECRET\" in os.environ').data['value']\n"
        "out['parent'] = ex(code='import os\\nos.kill(os.getppid(), 9)').error\n"
        "out['alive'] = ex(code='1+1').data['value']\n"
        "ex.close()\nprint(json.dumps(out))\n"
    )
    run = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert out["info"]["uid"] == 65534 and out["info"]["pidns"] is False
    assert "BlockingIOError" in out["bomb"] and out["after"] == "42"
    assert "PermissionError" in out["write"] and "PermissionError" in out["socket"]
    assert out["env"] == "False" and out["alive"] == "2"
    assert out["parent"] is None or "PermissionError" in out["parent"]
