"""A cluster on one machine, made of what a multi-machine deployment runs: Redis as the Celery broker,
PostgreSQL holding the Dagster instance (dagster-postgres) and the MLflow server's store, an MLflow
tracking server, and N dagster-celery workers.

    python -m launch.cluster up [--workers 2] [--params params.yaml]
    python -m launch.cluster env          # what a launcher, a worker or `orchestra audit` needs
    python -m launch.cluster pipeline     # up, the lineage through it (pipeline.py --cluster), down
    python -m launch.cluster reexecute RUN_ID   # a failed run again from its failed steps
    python -m launch.cluster down [--purge]

State lives in ``.cluster/`` (``cluster.json``: ports, pids, the environment; logs). Each worker is its own
process group started with nothing but that environment, the checkout as working directory and the
shared data folder, as on another machine. ``down`` stops everything ``up`` started; ``up`` stops what it
started when it fails, and ``pipeline`` brings the cluster down however the run ends.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from launch.cluster_services import (
    CELERY_CONFIG,
    ClusterError,
    create_databases,
    start_mlflow,
    start_postgres,
    start_redis,
    start_worker,
    stop_group,
    stop_postgres,
    stop_redis,
)
from orchestra.io import atomic_write_text

__all__ = ["STATE_FILE", "cluster_env", "down", "load_state", "main", "up"]

PROJECT = Path(__file__).resolve().parent.parent
STATE_FILE = "cluster.json"
#: what every process of the cluster sees besides its own variables (as `make` exports them)
_BASE_ENV = {"HF_HUB_OFFLINE": "1", "MLFLOW_ENABLE_TELEMETRY": "false", "DO_NOT_TRACK": "1"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cluster_env(ports: dict[str, int], state_dir: Path, params: Path) -> dict[str, str]:
    """The variables the launcher, each worker and `orchestra audit` run with (nothing else is shared)."""
    redis = f"redis://127.0.0.1:{ports['redis']}"
    return {
        **_BASE_ENV,
        "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
        "HOME": os.environ.get("HOME", str(state_dir)),
        "LANG": "C.UTF-8",
        "PYTHONPATH": str(PROJECT),
        "DAGSTER_HOME": str(state_dir / "dagster"),
        "ORCHESTRA_EXECUTOR": "celery",
        "ORCHESTRA_PARAMS": str(params),
        "ORCHESTRA_CELERY_BROKER": f"{redis}/0",
        "ORCHESTRA_CELERY_BACKEND": f"{redis}/1",
        "ORCHESTRA_DAGSTER_PG": f"postgresql+psycopg2://orchestra@127.0.0.1:{ports['postgres']}/dagster",
        "ORCHESTRA_MLFLOW_URI": f"http://127.0.0.1:{ports['mlflow']}",
    }


def load_state(state_dir: Path) -> dict[str, Any]:
    path = Path(state_dir) / STATE_FILE
    if not path.is_file():
        raise ClusterError(f"no cluster at {state_dir}: start one with `make cluster-up`")
    return json.loads(path.read_text(encoding="utf-8"))


def _save(state_dir: Path, state: dict[str, Any]) -> None:
    atomic_write_text(state_dir / STATE_FILE, json.dumps(state, indent=1) + "\n")


def up(state_dir: Path, workers: int = 2, params: Path = PROJECT / "params.yaml") -> dict[str, Any]:
    """Start the services and ``workers`` workers; on any failure stop what was started and raise."""
    state_dir = Path(state_dir).resolve()
    if (state_dir / STATE_FILE).is_file():
        raise ClusterError(f"a cluster is already up at {state_dir} (`make cluster-down` first)")
    for sub in ("logs", "dagster", "mlartifacts"):
        (state_dir / sub).mkdir(parents=True, exist_ok=True)
    (state_dir / "dagster" / "dagster.yaml").write_text(
        (PROJECT / "configs" / "dagster_postgres.yaml").read_text()
    )
    ports = {name: _free_port() for name in ("redis", "postgres", "mlflow")}
    env = cluster_env(ports, state_dir, Path(params).resolve())
    state: dict[str, Any] = {"ports": ports, "env": env, "workers": {}, "started": {}}
    t0 = time.perf_counter()
    try:
        state["started"]["redis"] = start_redis(state_dir, ports["redis"])
        _save(state_dir, state)
        state["started"]["postgres"] = start_postgres(state_dir, ports["postgres"])
        _save(state_dir, state)
        create_databases(ports["postgres"])
        state["started"]["mlflow"] = start_mlflow(state_dir, ports["mlflow"], env)
        _save(state_dir, state)
        for i in range(1, workers + 1):
            state["workers"][f"w{i}"] = start_worker(state_dir, f"w{i}", env, PROJECT)
            _save(state_dir, state)
    except BaseException:
        down(state_dir)
        raise
    state["up_seconds"] = round(time.perf_counter() - t0, 1)
    _save(state_dir, state)
    return state


def down(state_dir: Path, purge: bool = False) -> list[str]:
    """Stop every worker and service the state file names (in reverse order); returns what was stopped."""
    state_dir = Path(state_dir).resolve()
    try:
        state = load_state(state_dir)
    except ClusterError:
        return []
    stopped = []
    for name, worker in state.get("workers", {}).items():
        stopped += [name] if stop_group(worker["pid"]) else []
    started = state.get("started", {})
    if "mlflow" in started:
        stopped += ["mlflow"] if stop_group(started["mlflow"]["pid"]) else []
    if "postgres" in started:
        stopped += ["postgres"] if stop_postgres(started["postgres"], purge) else []
    if "redis" in started:
        stopped += ["redis"] if stop_redis(started["redis"]) else []
    (state_dir / STATE_FILE).unlink()
    return stopped


def reexecute(state_dir: Path, run_id: str) -> bool:
    """Run ``run_id`` again from its failed steps through the cluster's executor (steps that succeeded
    are not run again); True when the new run succeeds."""
    import yaml
    from dagster import DagsterInstance, ReexecutionOptions, execute_job
    from dagster._core.definitions.reconstruct import ReconstructableRepository

    os.environ.update(load_state(state_dir)["env"])
    config = yaml.safe_load(CELERY_CONFIG.read_text())
    with DagsterInstance.get() as instance:
        parent = instance.get_run_by_id(run_id)
        if parent is None:
            raise ClusterError(f"no run {run_id} in the cluster's Dagster instance")
        repo = ReconstructableRepository.for_module("dagster_project.definitions", "defs", str(PROJECT))
        result = execute_job(
            repo.get_reconstructable_job(parent.job_name),
            instance=instance,
            run_config=config,
            tags={k: v for k, v in parent.tags.items() if k.startswith("dagster/partition")},
            reexecution_options=ReexecutionOptions.from_failure(run_id, instance),
        )
        print(f"run {result.run_id} (from failure of {run_id}): {'success' if result.success else 'failure'}")
        return result.success


def _pipeline(state_dir: Path, workers: int, params: Path) -> int:
    """`make pipeline-cluster`: up, the lineage through the cluster, down (whatever happened)."""
    up(state_dir, workers, params)
    try:
        env = {**os.environ, **load_state(state_dir)["env"]}
        cmd = [
            sys.executable,
            "-m",
            "launch.pipeline",
            "--params",
            str(params),
            "--cluster",
            str(state_dir),
        ]
        return subprocess.run(cmd, cwd=PROJECT, env=env, stdin=subprocess.DEVNULL, check=False).returncode
    finally:
        down(state_dir)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("command", choices=["up", "down", "env", "pipeline", "reexecute"])
    ap.add_argument("run_id", nargs="?", help="reexecute: the failed run")
    ap.add_argument("--state", type=Path, default=PROJECT / ".cluster", help="the cluster's folder")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--params", type=Path, default=Path(os.environ.get("ORCHESTRA_PARAMS", "params.yaml")))
    ap.add_argument("--purge", action="store_true", help="down: delete the Postgres data as well")
    args = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # `finally` blocks run: the cluster comes down
    try:
        if args.command == "up":
            state = up(args.state, args.workers, args.params.resolve())
            names = ", ".join(state["workers"])
            print(f"cluster up in {state['up_seconds']} s: workers {names}; ports {state['ports']}")
        elif args.command == "down":
            print(f"stopped: {', '.join(down(args.state, args.purge)) or 'nothing was running'}")
        elif args.command == "env":
            print("\n".join(f"export {k}={v}" for k, v in load_state(args.state)["env"].items()))
        elif args.command == "pipeline":
            return _pipeline(args.state, args.workers, args.params.resolve())
        else:
            if not args.run_id:
                ap.error("reexecute needs RUN_ID")
            return 0 if reexecute(args.state, args.run_id) else 1
    except ClusterError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
