"""The Dagster code location: assets, resources (and later checks, jobs, schedules, sensors)."""

from __future__ import annotations

import os

import dagster as dg

from dagster_project.assets import (
    anchor_facts,
    benchmark_scores,
    decision_samples,
    decision_samples_are_valid,
    expert_trajectories,
    policy_dagrpo,
    policy_grpo,
    policy_sft,
    report,
    rewrite_candidates,
    seed_tasks,
    verified_samples,
    verified_samples_are_clean,
)
from dagster_project.resources import ParamsResource

defs = dg.Definitions(
    assets=[
        seed_tasks,
        anchor_facts,
        rewrite_candidates,
        verified_samples,
        expert_trajectories,
        decision_samples,
        policy_sft,
        policy_dagrpo,
        policy_grpo,
        benchmark_scores,
        report,
    ],
    asset_checks=[verified_samples_are_clean, decision_samples_are_valid],
    resources={"params": ParamsResource(path=os.environ.get("ORCHESTRA_PARAMS", "params.yaml"))},
)
