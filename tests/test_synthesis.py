"""anchor_facts and rewrite_candidates on a real world: facts the tools recover, grounded rewrites."""

from __future__ import annotations

import json
from pathlib import Path

from orchestra.config import Params
from orchestra.data.anchors import build_anchor_facts
from orchestra.data.candidates import build_rewrite_candidates
from orchestra.data.decisions import seed_splits
from orchestra.data.program import level_of
from orchestra.data.store import run_dir
from orchestra.data.trajectories import (
    build_decision_samples,
    build_expert_trajectories,
    check_decision_samples,
)
from orchestra.data.verified import build_verified_samples, check_verified
from orchestra.io import read_jsonl
from orchestra.schemas import (
    AnchorFact,
    DecisionSample,
    Delegate,
    Finish,
    RewriteCandidate,
    VerifiedSample,
    read_tasks_json,
)
from orchestra.world.perception import perceive
from orchestra.world.replay import load_truth, replay


def test_anchors_are_the_program_steps_the_tools_recover(built: tuple[Path, str]) -> None:
    root, broken = built
    seeds = {str(t.id): t for t in read_tasks_json(root / "seed_tasks" / "tasks.json")}
    anchors = read_jsonl(root / "anchor_facts" / "anchors.jsonl", AnchorFact)
    rejected = [json.loads(x) for x in (root / "anchor_facts" / "rejected.jsonl").read_text().splitlines()]
    # the seed with the truncated image is set aside with its reason; the stage went on
    assert [r["task_id"] for r in rejected] == [broken]
    assert "not recovered" in rejected[0]["reason"] and "image" in rejected[0]["reason"].lower()
    kept = {a.task_id for a in anchors}
    assert kept == set(seeds) - {broken}
    for a in anchors:
        step = next(s for s in seeds[a.task_id].solution_program or [] if s.out == a.step)
        assert a.value == step.value and a.checked_by
        assert (
            a.kind
            == {"perceive": "perception", "search": "kb", "browse": "kb", "compute": "compute"}[step.op]
        )
    for tid in kept:  # every step of a kept seed is an anchor
        assert {a.step for a in anchors if a.task_id == tid} == {
            s.out for s in seeds[tid].solution_program or []
        }
    summary = json.loads((root / "anchor_facts" / "summary.json").read_text())
    assert summary["rejected"] == 1 and summary["kept_seeds"] == len(kept)


def test_material_is_true_and_recovered(built: tuple[Path, str]) -> None:
    root, _ = built
    truth = load_truth(root / "seed_tasks").media
    material = read_jsonl(root / "anchor_facts" / "material.jsonl", AnchorFact)
    assert len(material) >= 10
    for m in material:
        assert m.perception and m.source in truth and m.checked_by
        assert perceive(truth[m.source]["facts"], m.perception, m.args) == m.value


def test_candidates_keep_every_anchor_and_replay_to_their_answer(built: tuple[Path, str]) -> None:
    root, broken = built
    seeds = {str(t.id): t for t in read_tasks_json(root / "seed_tasks" / "tasks.json")}
    cands = read_jsonl(root / "rewrite_candidates" / "candidates.jsonl", RewriteCandidate)
    assert len(cands) >= 3 * (len(seeds) - 1)
    assert broken not in {c.seed_id for c in cands}
    for c in cands:
        seed = seeds[c.seed_id]
        program = c.task.solution_program or []
        kept = {s.out: s for s in program}
        for s in seed.solution_program or []:  # the seed's program is kept, value for value
            assert kept[s.out] == s, (c.candidate_id, s.out)
        assert replay(c.task, root / "seed_tasks") == c.task.answer
        assert c.task.total_steps == len(program) and c.level == c.task.level == level_of(len(program))
        assert c.task.omni_modal_input == seed.omni_modal_input  # the media are unchanged
        assert c.task.question != seed.question
        if not c.task.answer.lstrip("-").isdigit():  # a name answer is never written in the question
            assert c.task.answer not in c.task.question
    assert {c.level for c in cands} == {"Easy", "Medium", "Hard"}
    assert len({c.strategy for c in cands}) == 5
    summary = json.loads((root / "rewrite_candidates" / "summary.json").read_text())
    assert summary["rows"] == len(cands) and 0 < summary["distinct_3gram_share"]["all"] <= 1
    assert summary["parallelism"]["medium_hard_parallel_share"] > 0


def test_same_params_same_bytes(built: tuple[Path, str], tmp_path: Path) -> None:
    """A second build from the same seeds (cold: its own perception cache) writes the same bytes;
    only timings.json (measured) and the trajectories (measured latencies) may differ."""
    root, _ = built
    (tmp_path / "seed_tasks").symlink_to(root / "seed_tasks")
    params = Params()
    for build in (build_anchor_facts, build_rewrite_candidates, build_verified_samples):
        build(params, tmp_path)
    build_expert_trajectories(params, tmp_path)
    build_decision_samples(params, tmp_path)
    same = {
        "anchor_facts": ("anchors.jsonl", "material.jsonl", "rejected.jsonl", "summary.json"),
        "rewrite_candidates": ("candidates.jsonl", "summary.json"),
        "verified_samples": ("verified.jsonl", "rejects.jsonl", "benchmark/tasks.json"),
        "expert_trajectories": ("summary.json",),
        "decision_samples": ("samples.jsonl", "summary.json"),
    }
    for stage, names in same.items():
        for name in names:
            assert (tmp_path / stage / name).read_bytes() == (root / stage / name).read_bytes(), (stage, name)


def test_seed_splits_are_disjoint_deterministic_and_sized() -> None:
    ids = [f"s{i}" for i in range(50)]
    a = seed_splits(ids, {"train": 0.8, "val": 0.1, "test": 0.1}, 13)
    assert a == seed_splits(list(reversed(ids)), {"train": 0.8, "val": 0.1, "test": 0.1}, 13)
    assert sorted(a) == sorted(ids)
    counts = {k: sum(v == k for v in a.values()) for k in ("train", "val", "test")}
    assert counts == {"train": 40, "val": 5, "test": 5}
    assert a != seed_splits(ids, {"train": 0.8, "val": 0.1, "test": 0.1}, 14)
    few = seed_splits(["x", "y", "z"], {"train": 0.8, "val": 0.1, "test": 0.1}, 1)
    assert sorted(few.values()) == ["test", "train", "val"]


def test_verified_samples_funnel_ge_report_and_benchmark(built: tuple[Path, str]) -> None:
    root, _ = built
    out = root / "verified_samples"
    summary = json.loads((out / "summary.json").read_text())
    cands = read_jsonl(root / "rewrite_candidates" / "candidates.jsonl", RewriteCandidate)
    kept = read_jsonl(out / "verified.jsonl", VerifiedSample)
    rejects = [json.loads(x) for x in (out / "rejects.jsonl").read_text().splitlines()]
    assert summary["funnel"]["candidates"] == len(cands) == len(kept) + len(rejects)
    assert all(
        s.verification.passed and set(s.verification.checks) == set(summary["rejected_by_check"])
        for s in kept
    )
    assert all(r["failed_checks"] and r["reasons"] for r in rejects)
    ge = run_dir(out) / "ge"  # GE's run results and Data Docs: the run record's, not the data's
    assert (ge / "validation_result.json").is_file() and list(ge.rglob("index.html"))
    assert "ge_result" not in summary and summary["ge_success"] in (True, False)
    ok, detail = check_verified(root)
    assert ok, detail
    bench = read_tasks_json(out / "benchmark" / "tasks.json")
    assert {str(t.id) for t in bench} == {s.candidate_id for s in kept if s.split == "test"} != set()
    seeds_by_split = {sp: {s.seed_id for s in kept if s.split == sp} for sp in ("train", "val", "test")}
    assert not (seeds_by_split["train"] & seeds_by_split["test"]) and not (
        seeds_by_split["val"] & seeds_by_split["test"]
    )


def test_decision_samples_cover_the_expert_path_and_train_only_off_path_states(
    built: tuple[Path, str],
) -> None:
    root, _ = built
    traj = json.loads((root / "expert_trajectories" / "summary.json").read_text())
    assert traj["success_rate"] >= 0.9, traj
    samples = read_jsonl(root / "decision_samples" / "samples.jsonl", DecisionSample)
    kinds = {d.kind for d in samples if d.split == "train"}
    assert {"expert", "branch_failed", "renumbered", "useless_subtask", "evidence_order"} <= kinds
    assert {d.kind for d in samples if d.split != "train"} <= {"expert"}
    assert "test" not in {d.split for d in samples}  # the test split is the benchmark
    for d in samples:
        if d.kind == "branch_failed":  # the failed reading is delegated again
            assert isinstance(d.decision, Delegate), d.sample_id
        if d.kind == "renumbered" and isinstance(d.decision, Finish):
            ids = {e["id"] for e in (d.state or {})["context"]}
            assert d.decision.answer.lstrip("#") in ids
    ok, detail = check_decision_samples(root)
    assert ok, detail


def test_a_tampered_label_fails_the_decision_check(built: tuple[Path, str], tmp_path: Path) -> None:
    root, _ = built
    (tmp_path / "decision_samples").mkdir()
    lines = (root / "decision_samples" / "samples.jsonl").read_text().splitlines()
    row = json.loads(lines[0])
    row["completion"] = row["completion"].replace('"kind"', '"kinda"', 1)
    (tmp_path / "decision_samples" / "samples.jsonl").write_text(
        "\n".join([json.dumps(row), *lines[1:]]) + "\n"
    )
    ok, detail = check_decision_samples(tmp_path)
    assert not ok and row["sample_id"] in detail


def test_every_off_path_kind_of_params_has_a_builder() -> None:
    from orchestra.config.stages import OFF_PATH_KINDS
    from orchestra.data.decisions import OFF_PATH, RENDERINGS

    assert set(OFF_PATH) | set(RENDERINGS) == set(OFF_PATH_KINDS)


def test_a_stage_that_keeps_nothing_fails_naming_its_reasons(small_world: Path, tmp_path: Path) -> None:
    """No silent empty stage: every seed set aside is a StageError with the reasons counted, and the
    stage's previous output stays as it was."""
    import shutil

    import pytest

    from orchestra.errors import StageError

    shutil.copytree(small_world, tmp_path / "seed_tasks", ignore=shutil.ignore_patterns("media"))
    before = tmp_path / "anchor_facts" / "summary.json"
    before.parent.mkdir()
    before.write_text("{}\n")
    n = len(read_tasks_json(tmp_path / "seed_tasks" / "tasks.json"))
    want = rf"anchor_facts produced no anchor facts .*{n} x media file missing"
    with pytest.raises(StageError, match=want):
        build_anchor_facts(Params(), tmp_path)
    assert before.read_text() == "{}\n" and not (tmp_path / "anchor_facts" / "anchors.jsonl").exists()
