"""Launching the pipeline: the `make pipeline` driver and the one-machine cluster (Redis, PostgreSQL,
MLflow, dagster-celery workers). Outside the Dagster code location, which it runs."""
