"""Dagster code location for the Orchestra pipeline."""
