"""Thin Dagster assets: read params from the resource, call one orchestra stage, report metadata."""

import dagster as dg

from dagster_project.resources import ParamsResource
from orchestra.stages import run_stage


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


@dg.asset(
    group_name="data",
    description="Seed tasks in OmniGAIA format (+ media, + the world's pages) under data/seed_tasks/.",
    kinds={"python", "json"},
)
def seed_tasks(context: dg.AssetExecutionContext, params: ParamsResource) -> dg.MaterializeResult:
    p = params.load()
    root = params.root(p)
    meta = run_stage("seed_tasks", p, root)
    context.log.info(f"seed_tasks: {meta['rows']} rows from {meta['source']} -> {root / 'seed_tasks'}")
    return dg.MaterializeResult(
        metadata={
            "path": dg.MetadataValue.path(str(root / "seed_tasks")),
            "dagster/row_count": dg.MetadataValue.int(meta["rows"]),
            **_metadata(meta),
        }
    )
