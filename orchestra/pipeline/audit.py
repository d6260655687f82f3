"""`orchestra audit`: walk a benchmark score back to its seeds and flag every link that no longer holds.

The chain of a row of ``benchmark_scores``: the score → the policy checkpoint it evaluated (the model
digest each shard's ``run.json`` recorded) → the checkpoint's MLflow run (the run of the newest
registered version of ``tracking.registered_model`` made from that model folder: present, not deleted,
finished), the alias ``<recipe>`` pointing at this model → the decision_samples the run trained on (its
data tag) → and then, stage by stage, the lineage records (``<stage>/lineage.json``): each input hash
a stage recorded against that input's output now, and each output against what its stage wrote, down
to seed_tasks; the Great Expectations suite, run again on the kept samples, and the blocking check of
verified_samples on the way. Only versioned data and the MLflow store are read: a clone that pulled the
data audits as the machine that built it (the run records in ``_run/`` stay on that machine).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from orchestra.config import Params
from orchestra.data.store import (
    SAMPLES_FILE,
    SCORES_FILE,
    model_dir,
    policy_stage,
    stage_dir,
)
from orchestra.errors import OrchestraError
from orchestra.io import dir_digest
from orchestra.lineage import LINEAGE_FILE, output_md5, read_record
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


@dataclass
class _Now:
    """What the data folder holds now, read once for every chain: each stage output's hash, the GE link."""

    root: Path
    ge: Link
    hashes: dict[str, str] = field(default_factory=dict)

    def md5(self, name: str) -> str:
        if name not in self.hashes:
            self.hashes[name] = output_md5(self.root, name)
        return self.hashes[name]


def _stage_links(chain: str, start: str, now: _Now) -> list[Link]:
    """The lineage records of ``start`` and everything upstream of it."""
    root = now.root
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
        built = now.md5(name)
        ok = built == rec.get("outputs")
        detail = built if ok else f"changed after it was built: {rec.get('outputs')} → {built}"
        out.append(Link(chain, f"{name} output", ok, detail))
        for up in STAGES[name].upstream:
            want, have = rec.get("inputs", {}).get(up), now.md5(up)
            ok = want == have
            detail = have if ok else f"{up} changed after {name} read it: {want} → {have}"
            out.append(Link(chain, f"{name} ← {up}", ok, detail))
            todo.append(up)
        if name == VERIFIED_SAMPLES:
            out.append(replace(now.ge, chain=chain))
    return out


def _ge_link(chain: str, params: Params, root: Path) -> Link:
    """The Great Expectations suite run again on the kept samples, and what may reach training held
    (from the versioned data: the stage's own GE result and Data Docs stay in its run record)."""
    from orchestra.data.verified import check_kept_with_suite, check_verified

    on_all = (_json(stage_dir(root, VERIFIED_SAMPLES) / "summary.json") or {}).get("ge_expectations", {})
    suite_ok, suite = check_kept_with_suite(root, params)
    kept_ok, kept = check_verified(root)
    held = f"{on_all.get('successful', '?')}/{on_all.get('evaluated', '?')}"
    what = f"{suite}; {held} on all candidates (failures are rejects)"
    return Link(chain, "verified_samples GE suite", suite_ok and kept_ok, f"{what}; kept samples: {kept}")


def _registry_link(chain: str, client: Any, name: str, recipe: str, model: str) -> Link:
    """The version the alias ``recipe`` of registered model ``name`` points at was made from a model
    folder whose digest is ``model`` (the checkpoint's now)."""
    from mlflow.exceptions import MlflowException

    from orchestra.training.tracking import MODEL_DIGEST_TAG

    what = "checkpoint → registered model version"
    try:
        version = client.get_model_version_by_alias(name, recipe)
    except MlflowException as e:
        return Link(chain, what, False, f"no version {name}@{recipe}: {e.message}")
    at = f"{name}@{recipe} = version {version.version}"
    want = version.tags.get(MODEL_DIGEST_TAG)
    if want != model:
        made = f"model {want[:16]}" if want else "no recorded model"
        return Link(chain, what, False, f"{at} was made from {made}, not this checkpoint's {model[:16]}")
    return Link(chain, what, True, f"{at}, model {model[:16]}")


def _mlflow_links(chain: str, params: Params, root: Path, recipe: str, model: str) -> list[Link]:
    """The checkpoint of ``recipe`` (its model folder's digest ``model``) → its MLflow run (the run
    of the newest registered version made from that model) and the alias ``recipe`` → this model,
    and the run → the decision samples it read."""
    import mlflow
    from mlflow.exceptions import MlflowException

    from orchestra.training.tracking import checkpoint_versions, tracking_uri

    name, what = params.tracking.registered_model, "checkpoint → MLflow run"
    client = mlflow.MlflowClient(tracking_uri(params, root))
    out = [_registry_link(chain, client, name, recipe, model)]
    versions = checkpoint_versions(client, name, model)
    if not versions:
        return [*out, Link(chain, what, False, f"no version of {name} was made from model {model[:16]}")]
    run_id = versions[0].run_id
    try:
        run = client.get_run(run_id)
    except MlflowException as e:
        return [*out, Link(chain, what, False, f"run {run_id} is missing: {e.error_code}")]
    if run.info.lifecycle_stage != "active":
        return [*out, Link(chain, what, False, f"run {run_id} was deleted")]
    status = f"run {run_id} {run.info.status}, commit {run.data.tags.get('git_commit', '?')[:12]}"
    out.append(Link(chain, what, run.info.status == "FINISHED", status))
    want = run.data.tags.get("orchestra.decision_samples_sha256")
    have = _file_sha256(stage_dir(root, DECISION_SAMPLES) / SAMPLES_FILE)
    ok = want == have
    detail = f"samples.jsonl {have[:16]}" if ok else f"data changed after training: {want} → {have}"
    out.append(Link(chain, "MLflow run → decision_samples", ok, detail))
    return out


def _row_links(params: Params, row: str, policy: str, now: _Now) -> list[Link]:
    from orchestra.evaluation.ladder import shard_dir

    chain, root = row, now.root
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
    out += _stage_links(chain, policy_stage(policy), now)
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
    now = _Now(root, _ge_link(BENCHMARK_SCORES, params, root))
    links = _stage_links(BENCHMARK_SCORES, BENCHMARK_SCORES, now)
    for row in rows or sorted(trained):
        links += _row_links(params, row, trained[row], now)
    return links
