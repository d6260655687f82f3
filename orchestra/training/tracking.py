"""MLflow for the training runs: one pipeline run, a nested run per recipe, and what TRL does not log."""

from __future__ import annotations

import os
import subprocess
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from orchestra.config import Params
from orchestra.errors import OrchestraError
from orchestra.io import dir_digest
from orchestra.schemas import DecisionSample
from orchestra.stages import DECISION_SAMPLES

__all__ = [
    "MODEL_DIGEST_TAG",
    "TrackingError",
    "checkpoint_versions",
    "ensure_experiment",
    "git_commit",
    "log_metrics",
    "log_samples_input",
    "recipe_run",
    "register_policy",
    "step_callback",
    "tracking_uri",
]

#: the tag of a registered model version that holds the digest of the model folder it was made from
MODEL_DIGEST_TAG = "orchestra.model_sha256"


class TrackingError(OrchestraError):
    """The MLflow store cannot be reached or written."""


#: a tracking store for this process that overrides ``tracking.mlflow_uri`` without changing the lineage
#: (the cluster profile's MLflow server; a colleague's clone pointed at the team's server)
MLFLOW_URI_ENV = "ORCHESTRA_MLFLOW_URI"


def tracking_uri(params: Params, root: Path) -> str:
    """``tracking.mlflow_uri`` (or :data:`MLFLOW_URI_ENV` where set); a relative ``sqlite:///`` path is
    taken from the project folder (the data root's parent), not from wherever the process happens to run."""
    uri = os.environ.get(MLFLOW_URI_ENV) or params.tracking.mlflow_uri
    if "://" not in uri or uri.startswith("file:"):
        raise TrackingError(f"{MLFLOW_URI_ENV}={uri!r}: use a database or server URI (http://host:port)")
    prefix = "sqlite:///"
    if uri.startswith(prefix) and not uri[len(prefix) :].startswith("/"):
        return prefix + str((root.parent / uri[len(prefix) :]).resolve())
    return uri


def _artifacts(uri: str) -> str | None:
    """Artifacts of a SQLite store go beside its database (``mlartifacts/``), not into the working
    directory of whichever process creates the experiment; a server keeps its own default."""
    prefix = "sqlite:///"
    return (Path(uri[len(prefix) :]).parent / "mlartifacts").as_uri() if uri.startswith(prefix) else None


def ensure_experiment(uri: str, name: str) -> str:
    """The id of experiment ``name`` in the store at ``uri``, made when absent (artifacts of a SQLite
    store beside its database)."""
    import mlflow

    client = mlflow.MlflowClient(uri)
    exp = client.get_experiment_by_name(name)
    return str(exp.experiment_id if exp else client.create_experiment(name, _artifacts(uri)))


def git_commit(cwd: Path) -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() if out.returncode == 0 else "unknown"


def _flat(obj: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in obj.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(_flat(v, key + "."))
        else:
            out[key] = str(v)[:500]
    return out


def _parent(client: Any, experiment_id: str, key: str, tags: Mapping[str, str]) -> str:
    """The pipeline run tagged ``orchestra.pipeline = key``, made when absent."""
    found = client.search_runs([experiment_id], f"tags.`orchestra.pipeline` = '{key}'", max_results=1)
    if found:
        return str(found[0].info.run_id)
    run = client.create_run(
        experiment_id, run_name=f"pipeline {key[:24]}", tags={"orchestra.pipeline": key, **tags}
    )
    return str(run.info.run_id)


@contextmanager
def recipe_run(
    params: Params, root: Path, recipe: str, tags: Mapping[str, str], resume_id: str | None = None
) -> Iterator[str | None]:
    """An active MLflow run for ``recipe`` (TRL's ``report_to="mlflow"`` logs into it), nested under
    the pipeline run: the run already active in this process (Dagster's, opened by dagster-mlflow's
    resource), else one per git commit and data digest (its status is that of the latest recipe to
    end in it). Tagged with ``tags``, the git commit, the Dagster run id (``orchestra.dagster_run_id``)
    and the DVC hash of each stage output the recipe read (``dvc.<stage>``); the ``train`` params its
    stage reads logged with an ``orchestra.`` prefix.
    ``resume_id``: a run of an interrupted attempt to continue rather than start a new one.
    The run ends FAILED if the body raises. Only the main training process has a run (the others
    get None: TRL reports from the main process only)."""
    import mlflow
    from mlflow.exceptions import MlflowException

    from orchestra.data.store import policy_stage
    from orchestra.lineage import output_md5
    from orchestra.stages import REPORT, STAGES
    from orchestra.training.dist import is_main

    if not is_main():
        yield None
        return

    uri = tracking_uri(params, root)
    commit = git_commit(root.parent)
    stage = REPORT if recipe == REPORT else policy_stage(recipe)  # the stage whose run this is
    hashes = {f"dvc.{up}": output_md5(root, up) for up in STAGES[stage].upstream}
    try:
        mlflow.set_tracking_uri(uri)
        client = mlflow.MlflowClient(uri)
        active = mlflow.active_run()
        if active is not None:  # the Dagster run's (dagster-mlflow)
            parent, exp_id = active.info.run_id, active.info.experiment_id
            try:
                found = client.get_run(parent)
            except MlflowException as e:
                raise TrackingError(f"run {parent} is active in this process but not in {uri}") from e
            # not dagster_run_id itself: dagster-mlflow finds its run again by that tag in every step
            inherited = {"orchestra.dagster_run_id": found.data.tags.get("dagster_run_id", "")}
        else:
            exp_id = ensure_experiment(uri, params.tracking.experiment)
            mlflow.set_experiment(experiment_id=exp_id)
            key = f"{commit[:12]}-{tags.get('orchestra.decision_samples_sha256', '')[:12]}"
            parent, inherited = _parent(client, exp_id, key, {"git_commit": commit}), {}
        all_tags = {
            "git_commit": commit,
            "orchestra.recipe": recipe,
            "mlflow.parentRunId": parent,
            **inherited,
            **hashes,
            **tags,
        }
        run = mlflow.start_run(
            run_id=resume_id,
            run_name=None if resume_id else recipe,
            experiment_id=exp_id,
            tags=all_tags,
            nested=active is not None,
        )
        if not resume_id:
            train = params.model_dump(mode="json").get("train", {})  # the train keys its stage reads
            mlflow.log_params(_flat(train, "orchestra.train."))
    except MlflowException as e:
        raise TrackingError(f"MLflow at {uri}: {e}") from e
    try:
        yield str(run.info.run_id)
    except BaseException:
        mlflow.end_run("FAILED")
        client.set_terminated(parent, "FAILED")
        raise
    mlflow.end_run("FINISHED")
    client.set_terminated(parent, "FINISHED")  # as of its latest recipe; a later one adds a child


def log_metrics(values: Mapping[str, float]) -> None:
    """``values`` into the active run (none on a training process other than the main one)."""
    import mlflow

    if values and mlflow.active_run() is not None:
        mlflow.log_metrics(dict(values))


def log_samples_input(path: Path, digest: str, samples: Sequence[DecisionSample], context: str) -> None:
    """Log the decision samples file ``path`` as a dataset input of the active run, in ``context``
    (``training``, or ``validation`` for a recipe that reads only their val split): named
    ``decision_samples``, its source the file, its digest ``digest`` (the file's SHA-256, the run's
    ``orchestra.decision_samples_sha256``) cut to MLflow's 36 characters; its schema and row count
    those of a light projection (id, task, split, step, kind, action), not the states."""
    import mlflow
    import pandas as pd
    from mlflow.exceptions import MlflowException

    if mlflow.active_run() is None:  # a training process other than the main one
        return

    rows = [
        {
            "sample_id": s.sample_id,
            "task_id": s.task_id,
            "split": s.split,
            "step_index": s.step_index,
            "kind": s.kind,
            "action": s.decision.kind,
        }
        for s in samples
    ]
    with warnings.catch_warnings():  # a local path resolves to one of two same-named local sources
        warnings.filterwarnings("ignore", "The specified dataset source can be interpreted in multiple ways")
        dataset = mlflow.data.from_pandas(
            pd.DataFrame(rows), source=str(path.resolve()), name=DECISION_SAMPLES, digest=digest[:36]
        )
    try:
        mlflow.log_input(dataset, context=context)
    except MlflowException as e:
        raise TrackingError(f"logging {path} as a dataset input ({context}): {e}") from e


def register_policy(name: str, recipe: str, run_id: str, model_dir: Path) -> int:
    """Make the ``model`` artifact of run ``run_id`` a new version of the registered model ``name``
    (created when absent), tagged with the recipe and the digest of ``model_dir``
    (:data:`MODEL_DIGEST_TAG`), and point the alias ``recipe`` at it; returns the version number.
    The store is the current tracking URI (:func:`recipe_run` sets it)."""
    import mlflow
    from mlflow.exceptions import MlflowException

    client = mlflow.MlflowClient()
    tags = {MODEL_DIGEST_TAG: dir_digest(model_dir), "orchestra.recipe": recipe}
    try:
        try:
            client.create_registered_model(name, description="the published orchestration policies")
        except MlflowException as e:
            if e.error_code != "RESOURCE_ALREADY_EXISTS":  # another recipe registered it first
                raise
        source = f"{client.get_run(run_id).info.artifact_uri}/model"
        version = client.create_model_version(name, source, run_id, tags=tags)
        client.set_registered_model_alias(name, recipe, version.version)
    except MlflowException as e:
        raise TrackingError(f"registering run {run_id}'s model as {name}@{recipe}: {e}") from e
    return int(version.version)


def checkpoint_versions(client: Any, name: str, model_digest: str) -> list[Any]:
    """The versions of registered model ``name`` made from a model folder whose digest is
    ``model_digest``, newest first (each names its run). How a checkpoint finds its MLflow run from
    versioned data alone: the run record that also names it stays on the machine that trained."""
    from mlflow.exceptions import MlflowException

    query = f"name = '{name}' and tags.`{MODEL_DIGEST_TAG}` = '{model_digest}'"
    try:
        found = client.search_model_versions(query)
    except MlflowException as e:
        raise TrackingError(f"searching {name}'s versions of model {model_digest[:16]}: {e}") from e
    return sorted(found, key=lambda v: int(v.version), reverse=True)


def step_callback() -> Any:
    """A transformers callback logging into the active run what TRL's MLflow callback lacks: the
    wall seconds of each optimizer step (``step_wall_s``). Loss, reward components, KL and entropy
    come from TRL's own reporting (``report_to="mlflow"``), which logs into the same active run."""
    import mlflow
    from transformers import TrainerCallback

    class StepMetrics(TrainerCallback):  # type: ignore[misc]
        def __init__(self) -> None:
            self._t = time.perf_counter()

        def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self._t = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if state.is_world_process_zero:
                mlflow.log_metric("step_wall_s", time.perf_counter() - self._t, step=state.global_step)

    return StepMetrics()
