"""The cluster profile (launch.cluster): Redis, PostgreSQL, an MLflow server and two dagster-celery
workers on this machine run the lineage of a small world as the multiprocess executor does; a step whose
process is killed fails the run at once and a re-execution from failure finishes it; a broker or database
that does not answer is an error naming its URL, not a hang."""

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import TINY_EVAL

from launch.pipeline import _command
from orchestra import lineage
from orchestra.data.store import RUN_DIR
from orchestra.stages import STAGES

ROOT = Path(__file__).resolve().parents[1]
DATA = ["seed_tasks", "anchor_facts", "rewrite_candidates", "verified_samples", "expert_trajectories"]
DATA += ["decision_samples"]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        shutil.which("redis-server") is None or not list(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl")),
        reason="the cluster needs the Debian packages redis-server and postgresql (make cluster-deps)",
    ),
]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from conftest import TINY_TRAIN

    from launch import cluster as profile

    base = tmp_path_factory.mktemp("cluster")
    data = yaml.safe_load((ROOT / "params.yaml").read_text())
    data["seed"]["world"].update(n_seeds=10, n_entities=30)
    data["train"] = TINY_TRAIN
    data["eval"].update(TINY_EVAL)
    params = base / "params.yaml"
    params.write_text(yaml.safe_dump(data))
    state = profile.up(base / ".cluster", 2, params)
    try:
        yield base, params, state
    finally:
        stopped = profile.down(base / ".cluster", purge=True)
        assert set(stopped) == {"w1", "w2", "mlflow", "postgres", "redis"}, stopped


def _driver(params: Path, env: dict[str, str], *extra: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "launch.pipeline", "--params", str(params), *extra]
    return subprocess.Popen(
        cmd,
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _outputs(root: Path) -> dict[str, str]:
    """Each data stage's files, hashed, but the run records (``_run/``: timings, GE run results)."""
    out = {}
    for name in DATA:
        for f in sorted((root / name).rglob("*")):
            rel = f.relative_to(root).as_posix()
            if f.is_file() and RUN_DIR not in rel.split("/")[:-1]:
                out[rel] = hashlib.md5(f.read_bytes(), usedforsecurity=False).hexdigest()
    return out


def _steps(env: dict[str, str]) -> dict[str, list[tuple[str, int]]]:
    """Each run of the cluster's instance: the (step, pid) of its STEP_START events."""
    import dagster as dg

    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        with dg.DagsterInstance.get() as instance:
            assert type(instance.event_log_storage).__name__ == "PostgresEventLogStorage"
            out = {}
            for run in instance.get_runs():
                events = instance.all_logs(run.run_id, of_type=dg.DagsterEventType.STEP_START)
                out[run.run_id] = [(e.step_key, e.dagster_event.pid) for e in events]  # type: ignore[union-attr]
            return out


def test_the_lineage_runs_on_two_workers_as_on_one_machine(cluster: Any) -> None:
    import mlflow

    base, params, state = cluster
    env = {**os.environ, **state["env"]}
    home = base / "local_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    local = {k: v for k, v in os.environ.items() if not k.startswith("ORCHESTRA_")} | {
        "DAGSTER_HOME": str(home)
    }
    res = subprocess.run(
        _command(DATA, []),  # the multiprocess executor: this process has no ORCHESTRA_EXECUTOR
        cwd=ROOT, env={**local, "ORCHESTRA_PARAMS": str(params)}, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    expected = _outputs(base / "data")
    shutil.rmtree(base / "data")

    run = _driver(params, env, "--cluster", str(base / ".cluster"))
    out, _ = run.communicate(timeout=1200)
    assert run.returncode == 0, out[-4000:]
    assert _outputs(base / "data") == expected  # what the multiprocess executor wrote
    workers = {w["pid"] for w in state["workers"].values()}
    steps = [step for run_steps in _steps(state["env"]).values() for step in run_steps]
    assert {name for name, _ in steps} >= set(STAGES)
    assert {os.getpgid(pid) for _, pid in steps} <= workers  # each in a worker's process group
    assert len({pid for _, pid in steps}) == 2 and run.pid not in {pid for _, pid in steps}
    client = mlflow.MlflowClient(state["env"]["ORCHESTRA_MLFLOW_URI"])
    exp = client.get_experiment_by_name("orchestra").experiment_id
    names = {r.info.run_name for r in client.search_runs([exp])}
    assert {"sft", "dagrpo", "grpo", "report"} <= names, names
    audit = subprocess.run(
        [str(Path(sys.executable).parent / "orchestra"), "audit", "--params", str(params)],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert audit.returncode == 0 and "0 broken" in audit.stdout, audit.stdout[-3000:]


def test_a_killed_step_fails_the_run_and_a_reexecution_finishes_it(cluster: Any) -> None:
    base, params, state = cluster
    env = {**os.environ, **state["env"]}
    if not (base / "data" / "report").is_dir():
        pytest.skip("needs the lineage the test before it built")
    seeds, kept = lineage.dir_md5(base / "data" / "seed_tasks"), _outputs(base / "data")
    shutil.rmtree(base / "data" / "anchor_facts")  # stale: anchor_facts and what is downstream run again
    # cold perception, so that the step is still reading when it is killed (warm, it can finish in the
    # 0.3 s the poll takes and leave its output whole: then there is no killed step to test)
    shutil.rmtree(base / "data" / "cache", ignore_errors=True)
    before = set(_steps(state["env"]))
    run = _driver(params, env, "--cluster", str(base / ".cluster"))
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        started = [
            (rid, pid) for rid, steps in _steps(state["env"]).items() if rid not in before
            for name, pid in steps if name == "anchor_facts"
        ]  # fmt: skip
        if started:
            break
        time.sleep(0.3)
    (run_id, pid), *_ = started
    os.kill(pid, signal.SIGKILL)
    out, _ = run.communicate(timeout=120)  # the worker that survived its step's process reports it
    assert run.returncode != 0 and "WorkerLostError" in out, out[-4000:]
    assert (base / "data" / "seed_tasks" / "lineage.json").is_file() and not (
        base / "data" / "anchor_facts"
    ).exists()

    again = subprocess.run(
        [sys.executable, "-m", "launch.cluster", "reexecute", run_id, "--state", f"{base}/.cluster"],
        cwd=ROOT, capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert again.returncode == 0 and "success" in again.stdout, again.stdout[-2000:] + again.stderr[-3000:]
    rerun = {rid: steps for rid, steps in _steps(state["env"]).items() if rid not in before and rid != run_id}
    ((rid, steps),) = rerun.items()
    assert "anchor_facts" in {name for name, _ in steps} and "seed_tasks" not in {name for name, _ in steps}
    assert lineage.dir_md5(base / "data" / "seed_tasks") == seeds  # not recomputed (its record too), not lost
    assert _outputs(base / "data") == kept  # anchor_facts and what follows came out the same again


def test_an_unreachable_broker_or_database_is_an_error_naming_it(cluster: Any, tmp_path: Path) -> None:
    base, params, state = cluster
    broken = json.loads((base / ".cluster" / "cluster.json").read_text())
    for key in ("ORCHESTRA_CELERY_BROKER", "ORCHESTRA_CELERY_BACKEND"):
        broken["env"][key] = "redis://127.0.0.1:9/0"  # the discard port: nothing listens
    broken["env"]["ORCHESTRA_DAGSTER_PG"] = "postgresql+psycopg2://orchestra@127.0.0.1:9/dagster"
    (tmp_path / "cluster.json").write_text(json.dumps(broken))
    t0 = time.monotonic()
    run = _driver(params, {**os.environ}, "--cluster", str(tmp_path))
    out, _ = run.communicate(timeout=120)
    assert run.returncode == 2 and time.monotonic() - t0 < 60, out[-3000:]
    assert "the Celery broker redis://127.0.0.1:9/0 is unreachable" in out, out[-3000:]
    assert "PostgreSQL postgresql+psycopg2://orchestra@127.0.0.1:9/dagster" in out, out[-3000:]
