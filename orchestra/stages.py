"""Pipeline stages as plain functions (params, data root) -> metadata; Dagster and DVC both call them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchestra.config import Params
from orchestra.errors import StageError

StageFn = Callable[[Params, Path], dict[str, Any]]


def _seed_tasks(params: Params, root: Path) -> dict[str, Any]:
    from orchestra.data.seeds import build_seed_tasks

    incoming = root / params.seed.incoming if params.seed.incoming else None
    return build_seed_tasks(params.seed, root / "seed_tasks", incoming)


def _anchor_facts(params: Params, root: Path) -> dict[str, Any]:
    from orchestra.data.anchors import build_anchor_facts

    return build_anchor_facts(params, root)


def _rewrite_candidates(params: Params, root: Path) -> dict[str, Any]:
    from orchestra.data.candidates import build_rewrite_candidates

    return build_rewrite_candidates(params, root)


def _verified_samples(params: Params, root: Path) -> dict[str, Any]:
    from orchestra.data.verified import build_verified_samples

    return build_verified_samples(params, root)


def _expert_trajectories(params: Params, root: Path) -> dict[str, Any]:
    from orchestra.data.trajectories import build_expert_trajectories

    return build_expert_trajectories(params, root)


def _decision_samples(params: Params, root: Path) -> dict[str, Any]:
    from orchestra.data.trajectories import build_decision_samples

    return build_decision_samples(params, root)


def _policy(recipe: str) -> StageFn:
    def train(params: Params, root: Path) -> dict[str, Any]:
        from orchestra.training.run import train_recipe

        return train_recipe(recipe, params, root).summary()

    return train


def _benchmark_scores(
    params: Params, root: Path, shards: list[int] | None = None, key: str = ""
) -> dict[str, Any]:
    from orchestra.evaluation.ladder import build_benchmark_scores

    return build_benchmark_scores(params, root, shards, key)


def _report(params: Params, root: Path) -> dict[str, Any]:
    from orchestra.evaluation.report import build_report

    return build_report(params, root)


STAGES: dict[str, StageFn] = {
    "seed_tasks": _seed_tasks,
    "anchor_facts": _anchor_facts,
    "rewrite_candidates": _rewrite_candidates,
    "verified_samples": _verified_samples,
    "expert_trajectories": _expert_trajectories,
    "decision_samples": _decision_samples,
    "policy_sft": _policy("sft"),
    "policy_dagrpo": _policy("dagrpo"),
    "policy_grpo": _policy("grpo"),
    "benchmark_scores": _benchmark_scores,
    "report": _report,
}


def run_stage(
    name: str, params: Params, root: Path, shards: list[int] | None = None, force: bool = False
) -> dict[str, Any]:
    """Run stage ``name`` writing under ``root/<name>/``, then record its lineage; returns its metadata
    (``up_to_date``: True when its lineage record matched and nothing ran). ``shards``: the benchmark
    shards to evaluate (benchmark_scores only; default all); ``force``: run even when up to date."""
    from orchestra import lineage

    try:
        fn = STAGES[name]
    except KeyError:
        raise StageError(f"unknown stage {name!r}; valid stages: {', '.join(STAGES)}") from None
    if shards is not None and name != "benchmark_scores":
        raise StageError(f"{name} has no shards; only benchmark_scores is partitioned")
    rec = None if force else lineage.up_to_date(name, params, root)
    if rec is not None:
        return {**rec["summary"], "up_to_date": True}
    fp = lineage.fingerprint(name, params, root)
    meta = fn(params, root, shards, fp["digest"]) if name == "benchmark_scores" else fn(params, root)
    if meta.get("complete", True):  # a benchmark run of some shards records nothing until all are in
        lineage.record(name, root, fp, meta)
    return {**meta, "up_to_date": False}
