"""The services of the one-machine cluster (launch.cluster): start each, wait until it answers,
stop it. Every long-running process gets its own process group, so stopping it stops its children too."""

from __future__ import annotations

import glob
import hashlib
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

from orchestra.errors import OrchestraError

__all__ = [
    "CELERY_CONFIG",
    "ClusterError",
    "check_reachable",
    "create_databases",
    "create_databases",
    "start_mlflow",
    "start_postgres",
    "start_redis",
    "start_worker",
    "stop_group",
    "stop_postgres",
    "stop_redis",
]

#: the executor's run config and the workers' config (URLs from the environment)
CELERY_CONFIG = Path(__file__).resolve().parent.parent / "configs" / "dagster_celery.yaml"
#: the Debian package's servers (pg_ctl is not on PATH there)
_PG_BIN = "/usr/lib/postgresql/*/bin"


class ClusterError(OrchestraError):
    """A cluster service is missing, will not start, or cannot be reached."""


def _wait(
    what: str, ready: Any, log: Path, proc: subprocess.Popen | None = None, limit_s: float = 90
) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if ready():
            return
        if proc is not None and proc.poll() is not None:
            break
        time.sleep(0.2)
    tail = log.read_text(errors="replace")[-1500:] if log.is_file() else ""
    raise ClusterError(f"{what} did not come up within {limit_s:.0f} s (log {log}):\n{tail}")


def _spawn(cmd: list[str], log: Path, env: dict[str, str], cwd: Path) -> subprocess.Popen:
    with log.open("ab") as out:
        return subprocess.Popen(
            cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: stop_group reaches its children
        )  # fmt: skip


def _binary(name: str, pattern: str | None = None) -> str:
    found = shutil.which(name) or next(iter(sorted(glob.glob(f"{pattern}/{name}"), reverse=True)), None)
    if not found:
        raise ClusterError(
            f"{name} not found: install the Debian packages redis-server and postgresql (make cluster-deps)"
        )
    return found


def start_redis(state_dir: Path, port: int) -> dict[str, Any]:
    import redis

    log = state_dir / "logs" / "redis.log"
    cmd = [
        _binary("redis-server"),
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
    ]
    proc = _spawn(cmd, log, {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}, state_dir)
    client = redis.Redis(port=port, socket_connect_timeout=1)

    def ready() -> bool:
        try:
            return bool(client.ping())
        except redis.RedisError:
            return False

    _wait(f"redis-server on port {port}", ready, log, proc, 30)
    return {"pid": proc.pid, "port": port}


def _pg_data(state_dir: Path) -> Path:
    """Where the database files go (its log beside them): under the state folder, or where the postgres
    user can reach them when we are root (the server will not run as root, and the state folder may sit
    under a 0700 home)."""
    if os.geteuid() != 0:
        return state_dir / "pg"
    key = hashlib.sha256(str(state_dir).encode()).hexdigest()[:12]
    return Path("/var/lib/postgresql") / f"orchestra-{key}"


def _as_postgres(cmd: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


def start_postgres(state_dir: Path, port: int) -> dict[str, Any]:
    """initdb on first use (trust on 127.0.0.1: a cluster on this machine), then start."""
    data = _pg_data(state_dir)
    log = data.parent / f"{data.name}.log"  # the server writes it, as the postgres user when we are root
    initdb, pg_ctl = _binary("initdb", _PG_BIN), _binary("pg_ctl", _PG_BIN)
    if not (data / "PG_VERSION").is_file():
        data.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(data, "postgres", "postgres")
        cmd = [initdb, "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C.UTF-8"]
        _run(_as_postgres(cmd), "initdb")
    opts = f"-p {port} -c listen_addresses=127.0.0.1 -c unix_socket_directories=''"
    _run(
        _as_postgres([pg_ctl, "-D", str(data), "-l", str(log), "-w", "-t", "60", "-o", opts, "start"]),
        "pg_ctl start",
    )
    return {"data": str(data), "port": port, "pg_ctl": pg_ctl, "log": str(log)}


def create_databases(port: int) -> None:
    """The role ``orchestra`` and its databases ``dagster`` and ``mlflow``, where missing."""
    import psycopg2

    conn = psycopg2.connect(
        host="127.0.0.1", port=port, user="postgres", dbname="postgres", connect_timeout=5
    )
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute("SELECT 1 FROM pg_roles WHERE rolname = 'orchestra'")
        if not cur.fetchone():
            cur.execute("CREATE ROLE orchestra LOGIN")
        for db in ("dagster", "mlflow"):
            cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (db,))
            if not cur.fetchone():
                cur.execute(f"CREATE DATABASE {db} OWNER orchestra")
    conn.close()


def _run(cmd: list[str], what: str) -> None:
    res = subprocess.run(
        cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL, check=False, timeout=120
    )
    if res.returncode != 0:
        raise ClusterError(f"{what} failed: {(res.stderr or res.stdout).strip()[-1500:]}")


def start_mlflow(state_dir: Path, port: int, env: dict[str, str]) -> dict[str, Any]:
    """The tracking server on the ``mlflow`` database, artifacts served from the state folder."""
    pg = env["ORCHESTRA_DAGSTER_PG"].rsplit("/", 1)[0] + "/mlflow"
    log = state_dir / "logs" / "mlflow.log"
    cmd = [str(Path(env["PATH"].split(":")[0]) / "mlflow"), "server", "--backend-store-uri", pg]
    cmd += ["--artifacts-destination", str(state_dir / "mlartifacts"), "--host", "127.0.0.1"]
    cmd += ["--port", str(port), "--workers", "1"]
    proc = _spawn(cmd, log, {**env, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}, state_dir)

    def ready() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    _wait(f"mlflow server on port {port}", ready, log, proc)
    return {"pid": proc.pid, "port": port}


def start_worker(state_dir: Path, name: str, env: dict[str, str], project: Path) -> dict[str, Any]:
    """One dagster-celery worker (one step at a time) that sees only ``env`` and the checkout."""
    log = state_dir / "logs" / f"worker-{name}.log"
    log.write_text("")
    cmd = [
        str(Path(env["PATH"].split(":")[0]) / "dagster-celery"),
        "worker",
        "start",
        "-A",
        "dagster_celery.app",
    ]
    cmd += ["-y", str(CELERY_CONFIG), "-n", name, "-i", "dagster_project.celery_worker"]
    cmd += ["--", "--concurrency", "1", "--without-gossip", "--without-mingle"]
    proc = _spawn(cmd, log, env, project)
    _wait(f"celery worker {name}", lambda: " ready." in log.read_text(errors="replace"), log, proc, 180)
    return {"pid": proc.pid, "log": str(log)}


def _group_alive(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs (zombies, which an init may leave unreaped, do not)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def stop_group(pid: int, grace_s: float = 30) -> bool:
    """TERM the process group ``pid`` leads (a worker finishes its step first), KILL it after ``grace_s``;
    False when nothing of it was running."""
    if not _group_alive(pid):
        return False
    os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while _group_alive(pid):
        try:
            os.waitpid(pid, os.WNOHANG)  # reap it when it is our child
        except ChildProcessError:
            pass
        if time.monotonic() > deadline:
            os.killpg(pid, signal.SIGKILL)
            break
        time.sleep(0.2)
    return True


def check_reachable(env: dict[str, str], workers: bool = True) -> None:
    """Every service a cluster run needs answers (and, with ``workers``, at least one worker), within a few
    seconds each; else one error naming each URL that did not."""
    import psycopg2
    import redis
    from sqlalchemy.engine import make_url

    failed: list[str] = []
    for what in ("ORCHESTRA_CELERY_BROKER", "ORCHESTRA_CELERY_BACKEND"):
        try:
            redis.Redis.from_url(env[what], socket_connect_timeout=3, socket_timeout=3).ping()
        except redis.RedisError as e:
            failed.append(f"the Celery {what.rsplit('_', 1)[1].lower()} {env[what]} is unreachable: {e}")
    url = make_url(env["ORCHESTRA_DAGSTER_PG"])
    try:
        psycopg2.connect(
            host=url.host, port=url.port or 5432, user=url.username, password=url.password,
            dbname=url.database, connect_timeout=3,
        ).close()  # fmt: skip
    except psycopg2.Error as e:
        failed.append(
            f"the Dagster instance's PostgreSQL {url.render_as_string(hide_password=True)}: {e}".strip()
        )
    try:
        urllib.request.urlopen(f"{env['ORCHESTRA_MLFLOW_URI']}/health", timeout=3).close()
    except OSError as e:
        failed.append(f"the MLflow server {env['ORCHESTRA_MLFLOW_URI']} is unreachable: {e}")
    if workers and not failed and not _worker_names(env):
        failed.append(
            f"no Celery worker answers on {env['ORCHESTRA_CELERY_BROKER']}: the steps would wait forever"
        )
    if failed:
        raise ClusterError("; ".join(failed))


def _worker_names(env: dict[str, str]) -> list[str]:
    from celery import Celery

    app = Celery(
        "orchestra-check", broker=env["ORCHESTRA_CELERY_BROKER"], backend=env["ORCHESTRA_CELERY_BACKEND"]
    )
    return sorted(name for reply in app.control.ping(timeout=3.0) for name in reply)


def stop_redis(started: dict[str, Any]) -> bool:
    return stop_group(started["pid"], 10)


def stop_postgres(started: dict[str, Any], purge: bool = False) -> bool:
    data = Path(started["data"])
    res = subprocess.run(
        _as_postgres([started["pg_ctl"], "-D", str(data), "-m", "fast", "-w", "stop"]),
        capture_output=True, text=True, stdin=subprocess.DEVNULL, check=False, timeout=120,
    )  # fmt: skip
    if purge:
        shutil.rmtree(data, ignore_errors=True)
        Path(started["log"]).unlink(missing_ok=True)
    return res.returncode == 0
