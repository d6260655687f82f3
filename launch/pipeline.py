"""`make pipeline`: materialize, through Dagster, every asset that is not up to date, then print each
stage's time. A stage is up to date when its lineage record (orchestra.lineage) matches its params,
code and inputs; a stale stage runs with everything downstream of it (each of those is skipped again
at run time when its inputs came out the same). Nothing stale: no run at all. Either way the stages that
are up to date are then recorded in DVC's ``dvc.lock`` (orchestra.pipeline.dvc), so ``dvc status`` agrees."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from launch.cluster import load_state
from launch.cluster_services import CELERY_CONFIG, ClusterError, check_reachable
from orchestra.config import Params, data_root, load_params
from orchestra.errors import OrchestraError
from orchestra.evaluation.ladder import shard_keys
from orchestra.pipeline.dvc import record_in_dvc
from orchestra.pipeline.run import stale
from orchestra.stages import STAGES


def _stage_seconds(names: list[str]) -> dict[str, float]:
    """Each asset's latest ``stage_seconds`` as the Dagster instance recorded it."""
    import dagster as dg

    out: dict[str, float] = {}
    with dg.DagsterInstance.get() as instance:
        for name in names:
            event = instance.get_latest_materialization_event(dg.AssetKey(name))
            meta = event.asset_materialization.metadata if event and event.asset_materialization else {}
            if "stage_seconds" in meta:
                out[name] = float(meta["stage_seconds"].value)  # type: ignore[arg-type]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", default=os.environ.get("ORCHESTRA_PARAMS", "params.yaml"))
    ap.add_argument(
        "--all", action="store_true", help="materialize every asset (each still skips when up to date)"
    )
    ap.add_argument(
        "--cluster", type=Path, help="the folder of a cluster (launch.cluster) to run the steps on"
    )
    args = ap.parse_args(argv)
    try:
        params = load_params(args.params)
        root = data_root(args.params, params)
        todo = list(STAGES) if args.all else stale(params, root)
        if args.cluster:
            _join_cluster(args.cluster, Path(args.params))
    except OrchestraError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for name in STAGES:
        print(f"  {name:<20} {'to run' if name in todo else 'up to date'}")
    if not todo:
        print(f"every asset is up to date ({len(STAGES)} of {len(STAGES)}): nothing recomputed")
        return _record_in_dvc(args.params, params, root)
    os.environ["ORCHESTRA_PARAMS"] = str(Path(args.params).resolve())
    t0 = time.perf_counter()
    rc = _on_cluster(todo, params) if args.cluster else _materialize(todo, shard_keys(params))
    wall = time.perf_counter() - t0
    seconds = _stage_seconds(todo)
    print("stage times (s):")
    for name in todo:
        print(f"  {name:<20} {seconds.get(name, float('nan')):8.1f}")
    print(f"  {'dagster run, wall':<20} {wall:8.1f}")
    recorded = _record_in_dvc(args.params, params, root)  # a failed run's finished stages too
    return rc or recorded


def _command(select: list[str], shards: list[str]) -> list[str]:
    cmd = [
        str(Path(sys.executable).parent / "dagster"),
        "asset",
        "materialize",
        "-m",
        "dagster_project.definitions",
    ]
    cmd += ["--select", ",".join(select)]
    if any(STAGES[n].sharded for n in select):
        cmd += (
            ["--partition", shards[0]]
            if len(shards) == 1
            else ["--partition-range", f"{shards[0]}...{shards[-1]}"]
        )
    if os.environ.get("ORCHESTRA_EXECUTOR") == "celery":
        cmd += ["-c", str(CELERY_CONFIG)]
    return cmd


def _materialize(select: list[str], shards: list[str]) -> int:
    """One Dagster run of ``select`` (benchmark_scores: the ``shards`` in that same run)."""
    return subprocess.run(_command(select, shards), stdin=subprocess.DEVNULL, check=False).returncode


def _join_cluster(state_dir: Path, params_path: Path) -> None:
    """Take the cluster's environment (its instance, broker, MLflow server), after checking that its
    workers run these params and that every service answers."""
    env = load_state(state_dir)["env"]
    if Path(env["ORCHESTRA_PARAMS"]) != params_path.resolve():
        raise ClusterError(
            f"the cluster's workers run {env['ORCHESTRA_PARAMS']}, not {params_path.resolve()}"
        )
    check_reachable(env)
    os.environ.update(env)


def _on_cluster(todo: list[str], params: Params) -> int:
    """The stages before the sharded one (the benchmark) as one run, then the sharded stage as a backfill
    of one run per shard (side by side: their steps spread over the workers), then what follows it."""
    sharded = [n for n in todo if STAGES[n].sharded]
    after = [n for n in todo if n not in sharded and any(up in sharded for up in STAGES[n].upstream)]
    first = [n for n in todo if n not in sharded and n not in after]
    if first and (rc := _materialize(first, [])):
        return rc
    for name in sharded:
        runs = [
            subprocess.Popen(_command([name], [key]), stdin=subprocess.DEVNULL) for key in shard_keys(params)
        ]
        if rc := max(run.wait() for run in runs):
            return rc
    return _materialize(after, []) if after else 0


def _record_in_dvc(params_path: str, params: Params, root: Path) -> int:
    try:
        names = record_in_dvc(params_path, params, root)
    except OrchestraError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if names:
        print(f"dvc.lock records {len(names)} of {len(STAGES)} stages as built (dvc status, dvc push)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
