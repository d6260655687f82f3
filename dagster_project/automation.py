"""Jobs, the weekly retraining schedule and the sensor that starts data_job on new seed files."""

from __future__ import annotations

import hashlib
import json

import dagster as dg

from dagster_project.assets import SHARDS
from dagster_project.resources import PARAMS_PATH, ParamsResource
from orchestra.config import load_params
from orchestra.data.seeds import incoming_files

#: run tags that make one run cover every benchmark shard (a single-run backfill of benchmark_scores)
ALL_SHARDS = {
    "dagster/asset_partition_range_start": SHARDS.get_partition_keys()[0],
    "dagster/asset_partition_range_end": SHARDS.get_partition_keys()[-1],
}

data_job = dg.define_asset_job(
    "data_job",
    selection=dg.AssetSelection.groups("data"),
    description="seed_tasks → decision_samples, with the blocking data checks.",
)
train_eval_job = dg.define_asset_job(
    "train_eval_job",
    selection=dg.AssetSelection.groups("training", "evaluation"),
    description="The three policies, the benchmark (every shard with the ALL_SHARDS tags) and the report.",
)
full_pipeline = dg.define_asset_job(
    "full_pipeline", selection=dg.AssetSelection.all(), description="Every asset of the lineage."
)

_SCHEDULE = load_params(PARAMS_PATH).schedule


@dg.schedule(
    name="weekly_retraining",
    job=full_pipeline,
    cron_schedule=_SCHEDULE.cron,
    default_status=dg.DefaultScheduleStatus.RUNNING
    if _SCHEDULE.retrain
    else dg.DefaultScheduleStatus.STOPPED,
    description="Rebuild everything weekly (schedule.retrain in params.yaml; off by default). Stages whose "
    "params, code and inputs did not change are not recomputed.",
)
def weekly_retraining(context: dg.ScheduleEvaluationContext) -> dg.RunRequest:
    return dg.RunRequest(run_key=context.scheduled_execution_time.isoformat(), tags=ALL_SHARDS)


def _digest(path: object) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()[:16]  # noqa: SIM115 - read whole, closed by GC


@dg.sensor(
    job=data_job,
    minimum_interval_seconds=_SCHEDULE.sensor_interval_s,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Starts data_job when a new OmniGAIA-format JSON file appears in data/incoming/ (a file "
    "is picked up once per content: the cursor keeps every name and digest seen).",
)
def incoming_seeds(context: dg.SensorEvaluationContext, params: ParamsResource) -> dg.SensorResult:
    p = params.load()
    if not p.seed.incoming:
        return dg.SensorResult(skip_reason="seed.incoming is off in params.yaml")
    seen = set(json.loads(context.cursor)) if context.cursor else set()
    found = {f"{f.name}:{_digest(f)}" for f in incoming_files(params.root(p) / p.seed.incoming)}
    new = sorted(found - seen)
    if not new:
        return dg.SensorResult(skip_reason="no new seed files")
    return dg.SensorResult(
        run_requests=[dg.RunRequest(run_key=",".join(new), tags={"orchestra/incoming": ",".join(new)})],
        cursor=json.dumps(sorted(seen | found)),
    )
