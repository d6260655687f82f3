"""The Dagster code location: assets and their checks, resources, jobs, the schedule and the sensor."""

from __future__ import annotations

import os

import dagster as dg

from dagster_project.assets import ASSETS, CHECKS, TRAINING
from dagster_project.automation import (
    data_job,
    full_pipeline,
    incoming_seeds,
    train_eval_job,
    weekly_retraining,
)
from dagster_project.resources import project_resources

#: imported once by the multiprocess executor's forkserver, which forks every step from it: a spawned
#: step would import them again (about 4 s for this code location, 4 for torch, 5 for GE), a dozen
#: times on the way from seed_tasks to report
PRELOAD = ["dagster_project.definitions", "torch", "transformers", "great_expectations"]


def _executor() -> dg.ExecutorDefinition:
    """Dagster's multiprocess executor (each step a process forked from a forkserver that has
    :data:`PRELOAD` imported), or with ``ORCHESTRA_EXECUTOR=celery`` dagster-celery's, whose workers on
    other machines run the steps (configs/dagster_celery.yaml)."""
    kind = os.environ.get("ORCHESTRA_EXECUTOR", "multiprocess")
    if kind == "celery":
        from dagster_celery import celery_executor

        return celery_executor
    if kind != "multiprocess":
        raise ValueError(f"ORCHESTRA_EXECUTOR={kind!r}: valid values are multiprocess, celery")
    return dg.multiprocess_executor.configured(
        {
            "start_method": {"forkserver": {"preload_modules": PRELOAD}},
            # torch trains on every core: two training steps side by side only contend
            "tag_concurrency_limits": [{"key": k, "value": v, "limit": 1} for k, v in TRAINING.items()],
        }
    )


defs = dg.Definitions(
    assets=list(ASSETS.values()),
    asset_checks=CHECKS,
    jobs=[data_job, train_eval_job, full_pipeline],
    schedules=[weekly_retraining],
    sensors=[incoming_seeds],
    resources=project_resources(),
    executor=_executor(),
)
