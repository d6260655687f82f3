"""Dagster resources: the params file (validated into orchestra.config.Params) and the data root; the
MLflow run of each Dagster run (dagster-mlflow) on the project's store."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import dagster as dg
from dagster_mlflow.resources import CONFIG_SCHEMA, MlFlow

from orchestra.config import Params, data_root, load_params
from orchestra.training.tracking import ensure_experiment, git_commit, tracking_uri

#: the params file of the code location (`make pipeline` and the tests point it elsewhere)
PARAMS_PATH = os.environ.get("ORCHESTRA_PARAMS", "params.yaml")


class ParamsResource(dg.ConfigurableResource):
    """Provides the validated params.yaml and the folder every asset writes ``<asset>/`` under."""

    path: str = "params.yaml"

    def load(self) -> Params:
        return load_params(self.path)

    def root(self, params: Params) -> Path:
        return data_root(self.path, params)


@dg.resource(config_schema=CONFIG_SCHEMA, description="dagster-mlflow's run, on the project's store")
def mlflow_tracking(context: dg.InitResourceContext) -> Any:
    """dagster-mlflow's ``MlFlow``: one MLflow run per Dagster run, found again by its
    ``dagster_run_id`` tag in every step process; the training and report runs nest under it. The
    experiment is made first so a SQLite store keeps its artifacts beside the database; the run is
    no longer active in this process once the resource is torn down (an in-process run leaves none
    behind for the next)."""
    import mlflow

    cfg = context.resource_config
    ensure_experiment(cfg["mlflow_tracking_uri"], cfg["experiment_name"])
    mlf = MlFlow(context)
    yield mlf
    mlf.cleanup_on_error()
    while mlflow.active_run() is not None:  # the next step (or process) finds it again by its tag
        mlflow.end_run()


def project_resources(path: str = PARAMS_PATH) -> dict[str, Any]:
    """``params`` and ``mlflow`` for the params file at ``path``."""
    params = load_params(path)
    root = data_root(path, params)
    mlflow = mlflow_tracking.configured(
        {
            "experiment_name": params.tracking.experiment,
            "mlflow_tracking_uri": tracking_uri(params, root),
            "extra_tags": {
                "git_commit": git_commit(root.parent),
                "orchestra.params": str(Path(path).resolve()),
            },
        }
    )
    return {"params": ParamsResource(path=path), "mlflow": mlflow}
