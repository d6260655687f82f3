"""Lineage records: what each stage read (params, code, upstream outputs) and wrote, kept beside its output.

Every stage writes ``data/<stage>/lineage.json`` after it succeeds: the params it reads, a digest of its
code, the DVC-style hash of every upstream output it read and of its own output. A stage whose record
matches the present params, code and inputs (and whose output is unchanged since) is up to date and is
not recomputed; `orchestra audit` walks the same records from a score back to the seeds.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Container, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orchestra
from orchestra.config import Params
from orchestra.data.sources import DATASET_SOURCES, dataset_files
from orchestra.io import atomic_write_text, dump_json

__all__ = [
    "DEPS",
    "LINEAGE_FILE",
    "StageDeps",
    "dir_md5",
    "fingerprint",
    "read_record",
    "record",
    "stale",
    "up_to_date",
]

LINEAGE_FILE = "lineage.json"
#: the project folder the ``code`` paths of :data:`DEPS` are relative to (the orchestra package's parent)
CODE_ROOT = Path(orchestra.__file__).resolve().parent.parent


@dataclass(frozen=True)
class StageDeps:
    """What one stage reads: upstream stage outputs, params keys (dotted), code paths."""

    upstream: tuple[str, ...]
    params: tuple[str, ...]
    code: tuple[str, ...]


_EVAL_CODE = ("orchestra/evaluation", "orchestra/agent", "orchestra/backends", "orchestra/tools")
_EVAL_CODE += ("orchestra/lm", "orchestra/answers.py")
#: a recipe that runs a policy end to end (outcome rollouts, the policy's own states relabelled)
_ROLLOUT_CODE = ("orchestra/training", "orchestra/agent", "orchestra/backends", "orchestra/tools")
_ROLLOUT_CODE += ("orchestra/lm", "orchestra/answers.py")
_ROLLOUT_CODE += ("orchestra/data/decisions.py", "orchestra/data/trajectories.py")
#: One entry per stage, in lineage order; dvc.yaml's deps and params say the same (tests/test_dvc.py).
DEPS: dict[str, StageDeps] = {
    "seed_tasks": StageDeps(
        (),
        ("seed",),
        ("orchestra/data/seeds.py", "orchestra/data/sources.py", "orchestra/schemas.py")
        + ("orchestra/resources/omnigaia", "orchestra/world"),
    ),
    "anchor_facts": StageDeps(
        ("seed_tasks",),
        ("anchors", "agent", "tools", "providers"),
        (
            "orchestra/data/anchors.py",
            "orchestra/data/recheck.py",
            "orchestra/data/reference.py",
            "orchestra/data/llm.py",
            "orchestra/agent",
            "orchestra/answers.py",
            "orchestra/backends",
            "orchestra/lm",
            "orchestra/tools",
            "orchestra/resources/registry",
        ),
    ),
    "rewrite_candidates": StageDeps(
        ("seed_tasks", "anchor_facts"),
        (
            "rewrite",
            "verify.similarity_metric",
            "verify.max_lexical_similarity",
            "agent",
            "tools",
            "providers",
        ),
        (
            "orchestra/data/candidates.py",
            "orchestra/data/recheck.py",
            "orchestra/data/rewrite.py",
            "orchestra/data/reference.py",
            "orchestra/data/program.py",
            "orchestra/data/phrases.py",
            "orchestra/data/report.py",
            "orchestra/data/llm.py",
            "orchestra/resources/registry",
        ),
    ),
    "verified_samples": StageDeps(
        ("seed_tasks", "anchor_facts", "rewrite_candidates"),
        ("verify", "decisions.split", "decisions.seed", "tools", "providers"),
        (
            "orchestra/data/verified.py",
            "orchestra/data/reference.py",
            "orchestra/data/verify.py",
            "orchestra/data/verify_bypass.py",
            "orchestra/data/verify_judge.py",
            "orchestra/data/llm.py",
            "orchestra/data/verify_rederive.py",
            "orchestra/data/expectations.py",
        ),
    ),
    "expert_trajectories": StageDeps(
        ("seed_tasks", "verified_samples"),
        ("agent", "tools", "providers"),
        ("orchestra/data/trajectories.py", "orchestra/agent", "orchestra/backends")
        + ("orchestra/lm", "orchestra/resources/registry"),
    ),
    "decision_samples": StageDeps(
        ("verified_samples", "expert_trajectories"),
        ("decisions", "agent"),
        ("orchestra/data/decisions.py", "orchestra/data/trajectories.py"),
    ),
    "policy_sft": StageDeps(  # train.sft.states both: the start policy's rollouts, relabelled
        ("seed_tasks", "verified_samples", "decision_samples"),
        ("train.seed", "train.policy", "train.sft", "agent", "tools", "eval.max_turns", "eval.concurrency")
        + ("tracking",),
        _ROLLOUT_CODE,
    ),
    "policy_dagrpo": StageDeps(  # train.dagrpo.states policy/both: the same; answer_credit: the labels
        ("seed_tasks", "verified_samples", "decision_samples", "policy_sft"),
        ("train.seed", "train.dagrpo", "agent", "providers", "tools", "eval.max_turns", "eval.concurrency")
        + ("tracking",),
        _ROLLOUT_CODE,
    ),
    "policy_grpo": StageDeps(
        ("seed_tasks", "verified_samples", "decision_samples", "policy_sft"),
        ("train.seed", "train.grpo", "agent", "tools", "tracking"),
        _ROLLOUT_CODE,
    ),
    "benchmark_scores": StageDeps(
        ("seed_tasks", "verified_samples", "policy_sft", "policy_dagrpo", "policy_grpo"),
        ("eval", "agent", "tools", "train.seed"),
        _EVAL_CODE,
    ),
    "report": StageDeps(
        ("benchmark_scores", "policy_dagrpo", "policy_grpo"),
        ("tracking",),
        ("orchestra/evaluation",),
    ),
}


def _file_md5(path: Path) -> str:
    h = hashlib.md5(usedforsecurity=False)
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def dir_md5(path: Path, exclude: Container[str] = ()) -> str:
    """The hash DVC gives a folder output (md5 of its sorted ``[{md5, relpath}]`` listing, ``.dir``);
    ``exclude``: relative paths left out. ``"missing"`` when there is no folder."""
    path = Path(path)
    if not path.is_dir():
        return "missing"
    entries = [
        {"md5": _file_md5(f), "relpath": rel}
        for f in path.rglob("*")
        if f.is_file() and (rel := f.relative_to(path).as_posix()) not in exclude
    ]
    entries.sort(key=lambda e: e["relpath"])
    listing = json.dumps(entries, sort_keys=True).encode("utf-8")
    return hashlib.md5(listing, usedforsecurity=False).hexdigest() + ".dir"


def _code_digest(paths: tuple[str, ...]) -> str:
    h = hashlib.sha256()
    for rel in paths:
        base = CODE_ROOT / rel
        files = [base] if base.is_file() else sorted(base.rglob("*")) if base.is_dir() else []
        for f in files:
            if f.is_file() and "__pycache__" not in f.parts and f.suffix != ".pyc":
                h.update(f.relative_to(CODE_ROOT).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
        if not files:
            h.update(f"{rel}: missing\0".encode())
    return h.hexdigest()


def _params_subset(params: Params, keys: tuple[str, ...]) -> dict[str, Any]:
    data = params.model_dump(mode="json")
    out: dict[str, Any] = {}
    for key in keys:
        node: Any = data
        for part in key.split("."):
            node = node.get(part) if isinstance(node, Mapping) else None
        out[key] = node
    return out


def _external(name: str, params: Params, root: Path) -> dict[str, str]:
    """Inputs from outside the data folder's stage outputs: seed files a user points at or drops in."""
    if name != "seed_tasks":
        return {}
    out = {"incoming": dir_md5(root / params.seed.incoming) if params.seed.incoming else "off"}
    if params.seed.source == "omnigaia_file" and params.seed.path:
        src = Path(params.seed.path)
        out["seed.path"] = _file_md5(src) if src.is_file() else "missing"
        out["seed.path media"] = dir_md5(src.parent / "media")
        out["seed.path kb"] = dir_md5(src.parent / "kb")  # the pages beside it, which seed_tasks copies
    if params.seed.source in DATASET_SOURCES:
        out.update(dataset_files(params.seed))
    return out


def fingerprint(name: str, params: Params, root: Path) -> dict[str, Any]:
    """What stage ``name`` would read now; ``digest`` names the whole of it."""
    deps = DEPS[name]
    out: dict[str, Any] = {
        "params": _params_subset(params, deps.params),
        "code": _code_digest(deps.code),
        "inputs": {up: dir_md5(root / up, exclude=(LINEAGE_FILE,)) for up in deps.upstream},
        "external": _external(name, params, root),
    }
    out["digest"] = hashlib.sha256(dump_json(out).encode("utf-8")).hexdigest()
    return out


def read_record(root: Path, name: str) -> dict[str, Any] | None:
    path = Path(root) / name / LINEAGE_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None  # a record cut short is no record: the stage runs again
    return data if isinstance(data, dict) else None


def record(name: str, root: Path, fp: Mapping[str, Any], summary: Mapping[str, Any]) -> dict[str, Any]:
    """Write ``<name>/lineage.json`` for the output just built from ``fp``; returns it."""
    rec = {
        "stage": name,
        **fp,
        "outputs": dir_md5(Path(root) / name, exclude=(LINEAGE_FILE,)),
        "summary": dict(summary),
    }
    atomic_write_text(Path(root) / name / LINEAGE_FILE, dump_json(rec) + "\n")
    return rec


def up_to_date(name: str, params: Params, root: Path) -> dict[str, Any] | None:
    """The record of ``name`` when its output was built from what it would read now and is unchanged
    since; ``None`` when it must run."""
    rec = read_record(root, name)
    if rec is None or rec.get("digest") != fingerprint(name, params, root)["digest"]:
        return None
    if rec.get("outputs") != dir_md5(Path(root) / name, exclude=(LINEAGE_FILE,)):
        return None  # edited or cut short after it was built
    return rec


def stale(params: Params, root: Path) -> list[str]:
    """The stages to run, in lineage order: those not up to date and everything downstream of them."""
    out: list[str] = []
    for name, deps in DEPS.items():
        if any(up in out for up in deps.upstream) or up_to_date(name, params, root) is None:
            out.append(name)
    return out
