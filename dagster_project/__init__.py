"""Orchestra's Dagster code location (definitions.py); the only package that imports Dagster."""

import warnings

from dagster import BetaWarning

warnings.filterwarnings("ignore", category=BetaWarning)  # dagster-mlflow and backfill_policy are beta APIs
