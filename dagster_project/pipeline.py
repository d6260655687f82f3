"""`make pipeline`: materialize, through Dagster, every asset that is not up to date, then print each
stage's time. A stage is up to date when its lineage record (orchestra.lineage) matches its params,
code and inputs; a stale stage runs with everything downstream of it (each of those is skipped again
at run time when its inputs came out the same). Nothing stale: no run at all."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from orchestra.config import data_root, load_params
from orchestra.errors import OrchestraError
from orchestra.evaluation.ladder import shard_keys
from orchestra.lineage import DEPS, stale


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
    args = ap.parse_args(argv)
    try:
        params = load_params(args.params)
        todo = list(DEPS) if args.all else stale(params, data_root(args.params, params))
    except OrchestraError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for name in DEPS:
        print(f"  {name:<20} {'to run' if name in todo else 'up to date'}")
    if not todo:
        print(f"every asset is up to date ({len(DEPS)} of {len(DEPS)}): nothing recomputed")
        return 0
    cmd = [
        str(Path(sys.executable).parent / "dagster"),
        "asset",
        "materialize",
        "-m",
        "dagster_project.definitions",
    ]
    cmd += ["--select", ",".join(todo)]
    if "benchmark_scores" in todo:
        keys = shard_keys(params)
        cmd += ["--partition-range", f"{keys[0]}...{keys[-1]}"]
    env = {**os.environ, "ORCHESTRA_PARAMS": str(Path(args.params).resolve())}
    t0 = time.perf_counter()
    rc = subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL, check=False).returncode
    wall = time.perf_counter() - t0
    seconds = _stage_seconds(todo)
    print("stage times (s):")
    for name in todo:
        print(f"  {name:<20} {seconds.get(name, float('nan')):8.1f}")
    print(f"  {'dagster run, wall':<20} {wall:8.1f}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
