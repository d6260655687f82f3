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

    return build_seed_tasks(params.seed, root / "seed_tasks")


def _anchor_facts(params: Params, root: Path) -> dict[str, Any]:
    from orchestra.data.anchors import build_anchor_facts

    return build_anchor_facts(params, root)


def _rewrite_candidates(params: Params, root: Path) -> dict[str, Any]:
    from orchestra.data.rewrite import build_rewrite_candidates

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


def _benchmark_scores(params: Params, root: Path) -> dict[str, Any]:
    from orchestra.evaluation.report import build_benchmark_scores

    return build_benchmark_scores(params, root)


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


def run_stage(name: str, params: Params, root: Path) -> dict[str, Any]:
    """Run stage ``name`` writing under ``root/<name>/``; returns its metadata."""
    try:
        fn = STAGES[name]
    except KeyError:
        raise StageError(f"unknown stage {name!r}; valid stages: {', '.join(STAGES)}") from None
    return fn(params, root)
