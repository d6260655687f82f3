"""The Dagster code location: assets, resources (and later checks, jobs, schedules, sensors)."""

from __future__ import annotations

import os

import dagster as dg

from dagster_project.assets import seed_tasks
from dagster_project.resources import ParamsResource

defs = dg.Definitions(
    assets=[seed_tasks],
    resources={"params": ParamsResource(path=os.environ.get("ORCHESTRA_PARAMS", "params.yaml"))},
)
