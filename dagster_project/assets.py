"""Thin Dagster assets: read params from the resource, call one orchestra stage, report metadata."""

import importlib
import time
from collections.abc import Mapping

import dagster as dg

from dagster_project.resources import PARAMS_PATH, ParamsResource
from orchestra.config import load_params
from orchestra.evaluation.ladder import shard_keys
from orchestra.lineage import dir_md5
from orchestra.stages import run_stage

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
    context: dg.AssetExecutionContext, params: ParamsResource, name: str, what: str
) -> dg.MaterializeResult:
    """Run stage ``name`` (not recomputed when its lineage record matches) and report its summary, wall
    time, DVC hash and MLflow run link as the materialization's metadata."""
    p = params.load()
    root = params.root(p)
    partitioned = context.assets_def.partitions_def is not None
    shards = [int(k.rsplit("-", 1)[1]) for k in context.partition_keys] if partitioned else None
    t0 = time.perf_counter()
    meta = run_stage(name, p, root, shards)
    took = round(time.perf_counter() - t0, 1)
    state = "up to date, not recomputed" if meta["up_to_date"] else f"{meta['rows']} {what}"
    context.log.info(f"{name}: {state} in {took} s -> {root / name}")
    if meta.get("ge_data_docs"):
        context.log.info(f"Great Expectations Data Docs: {meta['ge_data_docs']}")
    extra = (
        {"mlflow_run": _mlflow_link(context, params, meta["mlflow_run_id"])}
        if meta.get("mlflow_run_id")
        else {}
    )
    return dg.MaterializeResult(
        metadata={
            "path": dg.MetadataValue.path(str(root / name)),
            "dagster/row_count": dg.MetadataValue.int(meta["rows"]),
            "stage_seconds": dg.MetadataValue.float(took),
            "dvc_md5": dg.MetadataValue.text(dir_md5(root / name)),
            **extra,
            **_metadata(meta),
        }
    )


def _stage_asset(
    name: str,
    what: str,
    dep: dg.AssetsDefinition | list[dg.AssetsDefinition] | None,
    description: str,
    kinds: set[str],
    group: str = "data",
    partitions: dg.PartitionsDefinition | None = None,
    op_tags: Mapping[str, str] | None = None,
) -> dg.AssetsDefinition:
    """The asset of orchestra stage ``name`` (``what``: its rows, for the log), downstream of ``dep``;
    training and evaluation assets open the Dagster run's MLflow run (their recipes nest under it)."""
    deps = dep if isinstance(dep, list) else [dep] if dep else None

    @dg.asset(
        name=name,
        group_name=group,
        deps=deps,
        description=description,
        kinds=kinds,
        partitions_def=partitions,
        backfill_policy=ONE_RUN,
        op_tags=op_tags,
        required_resource_keys={"params", "mlflow"} if group != "data" else {"params"},
    )
    def stage(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        return _materialize(context, context.resources.params, name, what)

    return stage


def _blocking_check(
    asset: dg.AssetsDefinition, name: str, check: str, description: str, with_params: bool = False
) -> dg.AssetChecksDefinition:
    """A blocking check of ``asset``: ``check`` (``module:function`` of the data root, and the params
    when ``with_params``, returning (passed, detail)); imported when it runs, so the code location
    loads without the data libraries."""
    module, _, function = check.partition(":")

    @dg.asset_check(asset=asset, name=name, blocking=True, description=description)
    def _check(params: ParamsResource) -> dg.AssetCheckResult:
        p = params.load()
        fn = getattr(importlib.import_module(module), function)
        ok, detail = fn(params.root(p), p) if with_params else fn(params.root(p))
        return dg.AssetCheckResult(passed=ok, metadata={"detail": dg.MetadataValue.text(detail)})

    return _check


seed_tasks = _stage_asset(
    "seed_tasks",
    "seed tasks",
    None,
    "Seed tasks in OmniGAIA format (+ media, + the world's pages) under data/seed_tasks/.",
    {"python", "json"},
)
anchor_facts = _stage_asset(
    "anchor_facts",
    "anchor facts",
    seed_tasks,
    "Per seed, the facts its answer rests on (perceived, looked up, computed), each recovered by the real "
    "tools; material (other values its media hold); seeds set aside with reasons.",
    {"python", "jsonl"},
)
rewrite_candidates = _stage_asset(
    "rewrite_candidates",
    "candidates",
    anchor_facts,
    "Rewrite candidates: five strategies x three levels over each seed's anchors and material, each with "
    "its own replayable solution program.",
    {"python", "jsonl"},
)
verified_samples = _stage_asset(
    "verified_samples",
    "verified samples",
    rewrite_candidates,
    "Candidates that pass the five checks (anchor coverage, lexical similarity, modality bypass, numeric "
    "re-derivation, judge), validated by a Great Expectations suite; rejects with reasons; the split by "
    "seed; the test split as the embedded benchmark (OmniGAIA format + media).",
    {"python", "jsonl", "great_expectations"},
)
verified_samples_are_clean = _blocking_check(
    verified_samples,
    "verified_samples_are_clean",
    "orchestra.data.verified:check_verified",
    "Only fully verified, seed-split data.",
)
verified_samples_pass_the_suite = _blocking_check(
    verified_samples,
    "verified_samples_pass_the_suite",
    "orchestra.data.verified:check_kept_with_suite",
    "The Great Expectations suite of the five checks holds on every kept sample.",
    with_params=True,
)
expert_trajectories = _stage_asset(
    "expert_trajectories",
    "trajectories",
    verified_samples,
    "The expert's successful runs of the orchestra system on the train and val samples.",
    {"python", "jsonl"},
)
decision_samples = _stage_asset(
    "decision_samples",
    "decision samples",
    expert_trajectories,
    "Decision-level samples: the state before each expert decision, its compact rendering and the "
    "decision; on train also off-path states and re-renderings labelled by the stateless expert.",
    {"python", "jsonl"},
)
decision_samples_are_valid = _blocking_check(
    decision_samples,
    "decision_samples_are_valid",
    "orchestra.data.trajectories:check_decision_samples",
    "Every label parses and is valid in its state.",
)
policy_sft = _stage_asset(
    "policy_sft",
    "training samples",
    [decision_samples, verified_samples],
    "The SFT policy: a Qwen3 trained from scratch (TRL SFTTrainer) on the decision samples (or continued "
    "from train.sft.init, with its own states relabelled: DAgger); exact, structural, parse and validity "
    "rates on the val split; the MLflow run.",
    {"pytorch", "mlflow"},
    group="training",
    op_tags=TRAINING,
)
policy_dagrpo = _stage_asset(
    "policy_dagrpo",
    "decision prompts",
    [policy_sft, verified_samples],
    "DA-GRPO from the SFT policy: groups of decisions per state (the expert's, the policy's own "
    "relabelled by the expert, or both: train.dagrpo.states) scored by the rubric reward against the "
    "expert's decision; no sub-agent runs in training.",
    {"pytorch", "mlflow"},
    group="training",
    op_tags=TRAINING,
)
policy_grpo = _stage_asset(
    "policy_grpo",
    "rollout prompts",
    [policy_sft, verified_samples],
    "Outcome GRPO (Maestro's recipe) from the SFT policy: full orchestrator rollouts with real tools on "
    "the train tasks, reward = answer correctness + format.",
    {"pytorch", "mlflow"},
    group="training",
    op_tags=TRAINING,
)
benchmark_scores = _stage_asset(
    "benchmark_scores",
    "rows",
    [policy_sft, policy_dagrpo, policy_grpo],
    "The papers' ablation ladder on the embedded benchmark (the test split), partitioned by benchmark "
    "shard (merged once every shard is in): react, orchestra with the "
    "untrained, SFT, outcome-GRPO and DA-GRPO policies, linear at equal policy, the Maestro system and the "
    "oracle upper bound; per row OmniGAIA-format items, results.json and summary.json (EM with bootstrap "
    "intervals, by Level, category, task type; tool calls, latency, tokens, cost).",
    {"python", "json"},
    group="evaluation",
    partitions=SHARDS,
)
report = _stage_asset(
    "report",
    "rows",
    benchmark_scores,
    "The tables as Markdown (overall, by Level, by category, linear vs orchestra), accuracy-by-Level and "
    "reward-curve plots (read back from MLflow), logged to an MLflow run.",
    {"python", "mlflow"},
    group="evaluation",
)
