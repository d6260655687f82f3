"""Thin Dagster assets: read params from the resource, call one orchestra stage, report metadata."""

import time

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


def _materialize(
    context: dg.AssetExecutionContext, params: ParamsResource, name: str, what: str
) -> dg.MaterializeResult:
    """Run stage ``name`` and report its summary (and wall time) as the materialization's metadata."""
    p = params.load()
    root = params.root(p)
    t0 = time.perf_counter()
    meta = run_stage(name, p, root)
    took = round(time.perf_counter() - t0, 1)
    context.log.info(f"{name}: {meta['rows']} {what} in {took} s -> {root / name}")
    return dg.MaterializeResult(
        metadata={
            "path": dg.MetadataValue.path(str(root / name)),
            "dagster/row_count": dg.MetadataValue.int(meta["rows"]),
            "stage_seconds": dg.MetadataValue.float(took),
            **_metadata(meta),
        }
    )


@dg.asset(
    group_name="data",
    deps=[seed_tasks],
    description="Per seed, the facts its answer rests on (perceived, looked up, computed), each recovered by "
    "the real tools; material (other values its media hold); seeds set aside with reasons.",
    kinds={"python", "jsonl"},
)
def anchor_facts(context: dg.AssetExecutionContext, params: ParamsResource) -> dg.MaterializeResult:
    return _materialize(context, params, "anchor_facts", "anchor facts")


@dg.asset(
    group_name="data",
    deps=[anchor_facts],
    description="Rewrite candidates: five strategies x three levels over each seed's anchors and material, "
    "each with its own replayable solution program.",
    kinds={"python", "jsonl"},
)
def rewrite_candidates(context: dg.AssetExecutionContext, params: ParamsResource) -> dg.MaterializeResult:
    return _materialize(context, params, "rewrite_candidates", "candidates")


@dg.asset(
    group_name="data",
    deps=[rewrite_candidates],
    description="Candidates that pass the five checks (anchor coverage, lexical similarity, modality bypass, "
    "numeric re-derivation, judge), validated by a Great Expectations suite; rejects with reasons; the "
    "split by seed; the test split as the embedded benchmark (OmniGAIA format + media).",
    kinds={"python", "jsonl", "great_expectations"},
)
def verified_samples(context: dg.AssetExecutionContext, params: ParamsResource) -> dg.MaterializeResult:
    result = _materialize(context, params, "verified_samples", "verified samples")
    docs = result.metadata["ge_data_docs"] if result.metadata else None
    if docs is not None:
        context.log.info(f"Great Expectations Data Docs: {docs.value}")
    return result


@dg.asset_check(asset=verified_samples, blocking=True, description="Only fully verified, seed-split data.")
def verified_samples_are_clean(params: ParamsResource) -> dg.AssetCheckResult:
    from orchestra.data.verified import check_verified

    ok, detail = check_verified(params.root(params.load()))
    return dg.AssetCheckResult(passed=ok, metadata={"detail": dg.MetadataValue.text(detail)})


@dg.asset(
    group_name="data",
    deps=[verified_samples],
    description="The expert's successful runs of the orchestra system on the train and val samples.",
    kinds={"python", "jsonl"},
)
def expert_trajectories(context: dg.AssetExecutionContext, params: ParamsResource) -> dg.MaterializeResult:
    return _materialize(context, params, "expert_trajectories", "trajectories")


@dg.asset(
    group_name="data",
    deps=[expert_trajectories],
    description="Decision-level samples: the state before each expert decision, its compact rendering and "
    "the decision; on train also off-path states and re-renderings labelled by the stateless expert.",
    kinds={"python", "jsonl"},
)
def decision_samples(context: dg.AssetExecutionContext, params: ParamsResource) -> dg.MaterializeResult:
    return _materialize(context, params, "decision_samples", "decision samples")


@dg.asset_check(
    asset=decision_samples, blocking=True, description="Every label parses and is valid in its state."
)
def decision_samples_are_valid(params: ParamsResource) -> dg.AssetCheckResult:
    from orchestra.data.trajectories import check_decision_samples

    ok, detail = check_decision_samples(params.root(params.load()))
    return dg.AssetCheckResult(passed=ok, metadata={"detail": dg.MetadataValue.text(detail)})
