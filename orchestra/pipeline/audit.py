"""`orchestra audit`: walk a benchmark score back to its seeds and flag every link that no longer holds.

The chain of a row of ``benchmark_scores``: the score → the policy checkpoint it evaluated (the model
digest each shard's ``run.json`` recorded) → the checkpoint's MLflow run (present, not deleted,
finished) and its registered model version (the alias ``<recipe>`` of ``tracking.registered_model``:
that run's, and made from this model folder) → the decision_samples it trained on (the run's data
tag) → and then, stage by stage, the
lineage records (``<stage>/lineage.json``): each input hash a stage recorded against that input's
output now, and each output against what its stage wrote, down to seed_tasks; the Great Expectations
result and the blocking check of verified_samples on the way.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestra.config import Params
from orchestra.data.store import (
    SAMPLES_FILE,
    SCORES_FILE,
    model_dir,
    policy_stage,
    read_run_record,
    run_dir,
    stage_dir,
)
from orchestra.errors import OrchestraError
from orchestra.io import dir_digest
from orchestra.lineage import LINEAGE_FILE, dir_md5, read_record
from orchestra.stages import BENCHMARK_SCORES, DECISION_SAMPLES, STAGES, VERIFIED_SAMPLES

__all__ = ["AuditError", "Link", "audit"]


class AuditError(OrchestraError):
    """There is no score to audit."""


@dataclass(frozen=True)
class Link:
    """One link of the chain: ``ok`` False when what was recorded no longer matches what is there."""

    chain: str
    link: str
    ok: bool
    detail: str


def _json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
    except json.JSONDecodeError:
        return None


def _file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "missing"


def _stage_links(chain: str, root: Path, start: str) -> list[Link]:
    """The lineage records of ``start`` and everything upstream of it."""
    out: list[Link] = []
    todo, seen = [start], set()
    while todo:
        name = todo.pop(0)
        if name in seen:
            continue
        seen.add(name)
        rec = read_record(root, name)
        if rec is None:
            out.append(Link(chain, f"{name} record", False, f"{root / name / LINEAGE_FILE} is missing"))
            continue
        now = dir_md5(root / name, exclude=(LINEAGE_FILE,))
        ok = now == rec.get("outputs")
        out.append(
            Link(
                chain,
                f"{name} output",
                ok,
                now if ok else f"changed after it was built: {rec.get('outputs')} → {now}",
            )
        )
        for up in STAGES[name].upstream:
            want, have = rec.get("inputs", {}).get(up), dir_md5(root / up, exclude=(LINEAGE_FILE,))
            ok = want == have
            detail = have if ok else f"{up} changed after {name} read it: {want} → {have}"
            out.append(Link(chain, f"{name} ← {up}", ok, detail))
            todo.append(up)
        if name == VERIFIED_SAMPLES:
            out.append(_ge_link(chain, root))
    return out


def _ge_link(chain: str, root: Path) -> Link:
    from orchestra.data.verified import check_verified

    ge = _json(run_dir(stage_dir(root, VERIFIED_SAMPLES)) / "ge" / "validation_result.json")
    if ge is None:
        return Link(chain, "verified_samples GE result", False, "no Great Expectations result")
    ok, detail = check_verified(root)
    stats = ge.get("statistics", {})
    held = f"{stats.get('successful_expectations')}/{stats.get('evaluated_expectations')}"
    what = f"suite {ge.get('suite_name')}: {held} expectations held on every candidate (failures are rejects)"
    return Link(chain, "verified_samples GE result", ok, f"{what}; kept samples: {detail}")


def _registry_link(chain: str, client: Any, name: str, recipe: str, run_id: str, model: str) -> Link:
    """The version the alias ``recipe`` of registered model ``name`` points at: made by run ``run_id``
    from a model folder whose digest is ``model`` (the checkpoint's now)."""
    from mlflow.exceptions import MlflowException

    from orchestra.training.tracking import MODEL_DIGEST_TAG

    what = "checkpoint → registered model version"
    try:
        version = client.get_model_version_by_alias(name, recipe)
    except MlflowException as e:
        return Link(chain, what, False, f"no version {name}@{recipe}: {e.message}")
    at = f"{name}@{recipe} = version {version.version}"
    if version.run_id != run_id:
        return Link(chain, what, False, f"{at} of run {version.run_id}, not the checkpoint's run {run_id}")
    want = version.tags.get(MODEL_DIGEST_TAG)
    if want != model:
        return Link(chain, what, False, f"the checkpoint changed after {at} was registered: {want} → {model}")
    return Link(chain, what, True, f"{at}, model {model[:16]}")


def _mlflow_links(chain: str, params: Params, root: Path, recipe: str, model: str) -> list[Link]:
    """The checkpoint of ``recipe`` (its model folder's digest ``model``) → its MLflow run → its
    registered model version, and the run → the decision samples it read."""
    import mlflow
    from mlflow.exceptions import MlflowException

    from orchestra.training.tracking import tracking_uri

    policy_dir = stage_dir(root, policy_stage(recipe))
    run_id = read_run_record(root, policy_dir.name).get("mlflow_run_id")
    if not run_id:
        return [Link(chain, "checkpoint → MLflow run", False, f"{policy_dir}: a checkpoint without a run")]
    client = mlflow.MlflowClient(tracking_uri(params, root))
    try:
        run = client.get_run(run_id)
    except MlflowException as e:
        return [Link(chain, "checkpoint → MLflow run", False, f"run {run_id} is missing: {e.error_code}")]
    if run.info.lifecycle_stage != "active":
        return [Link(chain, "checkpoint → MLflow run", False, f"run {run_id} was deleted")]
    out = [
        Link(
            chain,
            "checkpoint → MLflow run",
            run.info.status == "FINISHED",
            f"run {run_id} {run.info.status}, commit {run.data.tags.get('git_commit', '?')[:12]}",
        ),
        _registry_link(chain, client, params.tracking.registered_model, recipe, run_id, model),
    ]
    want = run.data.tags.get("orchestra.decision_samples_sha256")
    have = _file_sha256(stage_dir(root, DECISION_SAMPLES) / SAMPLES_FILE)
    ok = want == have
    detail = f"samples.jsonl {have[:16]}" if ok else f"data changed after training: {want} → {have}"
    out.append(Link(chain, "MLflow run → decision_samples", ok, detail))
    return out


def _row_links(params: Params, root: Path, row: str, policy: str) -> list[Link]:
    from orchestra.evaluation.ladder import shard_dir

    chain = row
    out: list[Link] = []
    model = dir_digest(model_dir(root, policy))
    for k in range(params.eval.shards):
        run = _json(shard_dir(root, k) / row / "run.json")
        if run is None:
            out.append(Link(chain, f"score shard-{k} → checkpoint", False, "no run.json: not evaluated"))
            continue
        ok = run.get("model_sha256") == model
        detail = f"model {model[:16]}" if ok else "the checkpoint changed after it was scored"
        out.append(Link(chain, f"score shard-{k} → checkpoint", ok, detail))
    out += _mlflow_links(chain, params, root, policy, model)
    out += _stage_links(chain, root, policy_stage(policy))
    return out


def audit(params: Params, root: Path, rows: list[str] | None = None) -> list[Link]:
    """Every link of the chains of ``rows`` (default: each row of scores.json a trained policy drives)."""
    root = Path(root)
    path = stage_dir(root, BENCHMARK_SCORES) / SCORES_FILE
    scores = _json(path)
    if scores is None:
        raise AuditError(f"{path}: no scores; materialize {BENCHMARK_SCORES}")
    trained = {k: s["policy"] for k, s in scores.items() if s["policy"] not in ("oracle", "untrained")}
    unknown = sorted(set(rows or ()) - set(trained))
    if unknown:
        raise AuditError(
            f"rows {unknown} are not trained-policy rows of the scores; valid: {sorted(trained)}"
        )
    links = _stage_links(BENCHMARK_SCORES, root, BENCHMARK_SCORES)
    for row in rows or sorted(trained):
        links += _row_links(params, root, row, trained[row])
    return links
