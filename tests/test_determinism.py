"""Stage outputs are a function of their inputs: the tiny lineage built in two data folders (each with a
cold perception cache) is the same bytes in every stage folder but the run records, and a forced re-run
of anchor_facts on unchanged inputs leaves its folder byte-identical and makes nothing downstream stale
(early cut-off)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import yaml
from conftest import TINY_EVAL, TINY_TRAIN

from orchestra import lineage
from orchestra.config import load_params
from orchestra.data.store import RUN_DIR
from orchestra.pipeline.run import run_stage, stale
from orchestra.stages import STAGES

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def _build(folder: Path) -> Path:
    """The whole tiny lineage in ``folder/data``, each stage through the runner; returns the data root."""
    data = yaml.safe_load((ROOT / "params.yaml").read_text())
    data["seed"]["world"].update(n_seeds=10, n_entities=30)
    data["train"] = TINY_TRAIN
    data["eval"].update(TINY_EVAL)
    folder.mkdir(parents=True)
    (folder / "params.yaml").write_text(yaml.safe_dump(data))
    params, root = load_params(folder / "params.yaml"), folder / "data"
    for name in STAGES:
        assert run_stage(name, params, root)["up_to_date"] is False, name
    return root


def _files(folder: Path) -> dict[str, str]:
    """Each file of a stage folder but its run records, by relative path: its md5."""
    return {
        rel: hashlib.md5(f.read_bytes(), usedforsecurity=False).hexdigest()
        for f in sorted(folder.rglob("*"))
        if f.is_file() and RUN_DIR not in (rel := f.relative_to(folder).as_posix()).split("/")[:-1]
    }


@pytest.fixture(scope="module")
def two_builds(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("determinism")
    return _build(base / "a"), _build(base / "second" / "checkout" / "b")


def test_two_data_folders_hold_the_same_bytes(two_builds: tuple[Path, Path]) -> None:
    a, b = two_builds
    for name in STAGES:
        fa, fb = _files(a / name), _files(b / name)
        assert fa, name
        differ = sorted(k for k in fa.keys() | fb.keys() if fa.get(k) != fb.get(k))
        assert not differ, f"{name}: {differ[:10]}"
        assert lineage.dir_md5(a / name) == lineage.dir_md5(b / name), name  # DVC's hash too
        assert (a / name / RUN_DIR / "run.json").is_file(), name  # what differs is kept, apart
    assert (a / "benchmark_metrics.json").read_bytes() == (b / "benchmark_metrics.json").read_bytes()
    assert str(a) not in (a / "decision_samples" / "samples.jsonl").read_text()  # no machine path


def test_a_forced_rerun_on_unchanged_inputs_changes_nothing_and_stops_there(
    two_builds: tuple[Path, Path],
) -> None:
    a, _ = two_builds
    params = load_params(a.parent / "params.yaml")
    before = _files(a / "anchor_facts")
    run = (a / "anchor_facts" / RUN_DIR / "run.json").read_text()
    assert run_stage("anchor_facts", params, a, force=True)["up_to_date"] is False
    assert _files(a / "anchor_facts") == before  # lineage.json included: the same record
    assert (a / "anchor_facts" / RUN_DIR / "run.json").read_text() != run  # a new run was recorded
    assert stale(params, a) == []  # early cut-off: nothing downstream is out of date
    assert run_stage("rewrite_candidates", params, a)["up_to_date"] is True
