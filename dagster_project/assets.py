"""Thin Dagster assets, one per row of the stage table (orchestra/stages.py), and its blocking checks."""

import time

import dagster as dg

from dagster_project.resources import PARAMS_PATH, ParamsResource
from orchestra.config import load_params
from orchestra.evaluation.ladder import shard_keys
from orchestra.pipeline.run import folder_md5, run_check, run_stage
from orchestra.stages import STAGES, Check, Stage

#: benchmark_scores' partitions: one per benchmark shard (eval.shards of the code location's params)
SHARDS = dg.StaticPartitionsDefinition(shard_keys(load_params(PARAMS_PATH)))
#: a run of many shards is one run (a local run covers them all; k8s/Celery: a run per shard works too)
ONE_RUN = dg.BackfillPolicy.single_run()
#: the op tag of the torch training assets, which the multiprocess executor runs one at a time
#: (definitions.py): outcome GRPO and DA-GRPO side by side on 2 cores took 211 and 233 s, one after
#: the other about 74 and 69 s
TRAINING = {"orchestra/cores": "torch"}


def _metadata(meta: dict) -> dict[str, dg.MetadataValue]:
    out: dict[str, dg.MetadataValue] = {}
    for key, value in meta.items():
        if isinstance(value, bool | str):
            out[key] = dg.MetadataValue.text(str(value))
        elif isinstance(value, int):
            out[key] = dg.MetadataValue.int(value)
        elif isinstance(value, float):
            out[key] = dg.MetadataValue.float(value)
        else:
            out[key] = dg.MetadataValue.json(value)
    return out


def _mlflow_link(context: dg.AssetExecutionContext, params: ParamsResource, run_id: str) -> dg.MetadataValue:
    exp = context.resources.mlflow.experiment.experiment_id
    return dg.MetadataValue.url(f"{params.load().tracking.ui_url}/#/experiments/{exp}/runs/{run_id}")


def _materialize(
    context: dg.AssetExecutionContext, params: ParamsResource, stage: Stage
) -> dg.MaterializeResult:
    """Run ``stage`` (not recomputed when its lineage record matches) and report its summary, its run's
    record, wall time, DVC hash and MLflow run link as the materialization's metadata."""
    p = params.load()
    root, name = params.root(p), stage.name
    shards = [int(k.rsplit("-", 1)[1]) for k in context.partition_keys] if stage.sharded else None
    t0 = time.perf_counter()
    meta = run_stage(name, p, root, shards)
    took = round(time.perf_counter() - t0, 1)
    state = "up to date, not recomputed" if meta["up_to_date"] else f"{meta['rows']} {stage.rows}"
    context.log.info(f"{name}: {state} in {took} s -> {root / name}")
    md5 = folder_md5(stage, root, meta)
    run = meta.pop("run")  # what this run measured: shown beside the summary, kept out of the lineage
    if run.get("ge_data_docs"):
        context.log.info(f"Great Expectations Data Docs: {run['ge_data_docs']}")
    extra = (
        {"mlflow_run": _mlflow_link(context, params, run["mlflow_run_id"])}
        if run.get("mlflow_run_id")
        else {}
    )
    return dg.MaterializeResult(
        metadata={
            "path": dg.MetadataValue.path(str(root / name)),
            "dagster/row_count": dg.MetadataValue.int(meta["rows"]),
            "stage_seconds": dg.MetadataValue.float(took),
            **({"dvc_md5": dg.MetadataValue.text(md5)} if md5 else {}),
            **extra,
            **_metadata({**meta, **run}),
        }
    )


def _stage_asset(stage: Stage) -> dg.AssetsDefinition:
    """The asset of ``stage``, downstream of what it reads; training and evaluation assets open the Dagster
    run's MLflow run (their recipes nest under it)."""

    @dg.asset(
        name=stage.name,
        group_name=stage.group,
        deps=list(stage.upstream) or None,
        description=stage.description,
        kinds=set(stage.kinds),
        partitions_def=SHARDS if stage.sharded else None,
        backfill_policy=ONE_RUN,
        op_tags=TRAINING if stage.all_cores else None,
        required_resource_keys={"params", "mlflow"} if stage.group != "data" else {"params"},
    )
    def asset(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        return _materialize(context, context.resources.params, stage)

    return asset


def _blocking_check(asset: dg.AssetsDefinition, stage: Stage, check: Check) -> dg.AssetChecksDefinition:
    """A blocking check of ``asset`` (the runner imports the check's function when it runs, so the code
    location loads without the data libraries)."""

    @dg.asset_check(asset=asset, name=check.name, blocking=True, description=check.description)
    def _check(params: ParamsResource) -> dg.AssetCheckResult:
        p = params.load()
        ok, detail = run_check(stage, check.name, p, params.root(p))
        return dg.AssetCheckResult(passed=ok, metadata={"detail": dg.MetadataValue.text(detail)})

    return _check


#: one asset per row of the stage table, in lineage order
ASSETS: dict[str, dg.AssetsDefinition] = {name: _stage_asset(stage) for name, stage in STAGES.items()}
#: the stages' blocking data checks
CHECKS: list[dg.AssetChecksDefinition] = [
    _blocking_check(ASSETS[name], stage, check) for name, stage in STAGES.items() for check in stage.checks
]
