"""Stage records round-trip through JSONL and Parquet; the OmniGAIA copy round-trips exactly."""

import json
from pathlib import Path

import pytest
from pydantic import TypeAdapter, ValidationError

from orchestra.data.seeds import omnigaia_metadata_path
from orchestra.errors import RecordError
from orchestra.io import atomic_dir, atomic_write_text
from orchestra.schemas import (
    AnchorFact,
    BenchmarkScore,
    CheckOutcome,
    ComputeStep,
    Decision,
    DecisionSample,
    Delegate,
    EvalRecord,
    Finish,
    ModalInput,
    PerceiveStep,
    RewriteCandidate,
    SearchStep,
    SubTask,
    Task,
    Trajectory,
    TrajectoryStep,
    VerificationResult,
    VerifiedSample,
    read_jsonl,
    read_parquet,
    read_tasks_json,
    write_jsonl,
    write_parquet,
    write_tasks_json,
)

TASK = Task(
    id="w7-0001",
    question="How many red circles are in the image, times the number of beeps?",
    omni_modal_input=[ModalInput(type="image", id="image_1", path="a1.png")],
    answer="12",
    Level="Easy",
    task_type="image + audio",
    category="Science & Nature",
    required_external_tools=["code_executor"],
    solution_program=[
        PerceiveStep(out="v1", value=3, input_id="image_1", perception="count_shapes", args={"color": "red"}),
        SearchStep(out="v2", value="https://world.local/wiki/x", query="x"),
        ComputeStep(out="v3", value=12, expression="v1 * 4"),
    ],
)
MESSAGES = [{"role": "user", "content": "q"}]
DELEGATE = Delegate(subtasks=[SubTask(id="E1", goal="count #M1", modalities=["M1"], tools=["image_count"])])
VERIFICATION = VerificationResult(candidate_id="c1", checks={"anchor": CheckOutcome(passed=True, score=1.0)})

RECORDS = [
    TASK,
    AnchorFact(
        task_id="w7-0001",
        fact_id="a1",
        kind="perception",
        modality="image",
        step="v1",
        text="3 red circles",
        value=3,
    ),
    RewriteCandidate(
        candidate_id="c1", seed_id="w7-0001", strategy="numeric_composition", level="Medium", task=TASK
    ),
    VERIFICATION,
    VerifiedSample(candidate_id="c1", seed_id="w7-0001", split="train", task=TASK, verification=VERIFICATION),
    Trajectory(
        task_id="w7-0001",
        system="orchestra",
        policy="oracle",
        answer="12",
        steps=[TrajectoryStep(index=0, state_messages=MESSAGES, decision=DELEGATE)],
    ),
    DecisionSample(
        sample_id="s1",
        task_id="w7-0001",
        split="train",
        step_index=0,
        decision=Finish(answer="12"),
        completion='{"kind":"finish","answer":"12"}',
    ),
    EvalRecord(
        task_id="w7-0001", system="orchestra", policy="oracle", prediction="12", gold="12", correct=True
    ),
    BenchmarkScore(system="orchestra", policy="oracle", n=1, accuracy=1.0, by_level={"Easy": 1.0}),
]


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: type(r).__name__)
@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_round_trip(tmp_path: Path, record, fmt: str) -> None:
    path = tmp_path / f"r.{fmt}"
    write, read = (write_jsonl, read_jsonl) if fmt == "jsonl" else (write_parquet, read_parquet)
    assert write(path, [record, record]) == 2
    back = read(path, type(record))
    assert back == [record, record]


def test_decision_union_discriminates() -> None:
    adapter = TypeAdapter(Decision)
    assert isinstance(adapter.validate_python({"kind": "finish", "answer": "7"}), Finish)
    assert isinstance(adapter.validate_json(DELEGATE.model_dump_json()), Delegate)
    with pytest.raises(ValidationError):
        adapter.validate_python({"kind": "delegate", "subtasks": []})
    with pytest.raises(ValidationError):
        adapter.validate_python({"kind": "finish", "answer": ""})


def test_internal_records_refuse_unknown_keys() -> None:
    with pytest.raises(ValidationError):
        AnchorFact(task_id="t", fact_id="a", modality="image", text="x", colour="red")


def test_bad_jsonl_line_is_named(tmp_path: Path) -> None:
    path = tmp_path / "facts.jsonl"
    write_jsonl(path, [RECORDS[1]])
    with path.open("a") as fh:
        fh.write('{"task_id": 1}\n')
    with pytest.raises(RecordError, match=r"facts.jsonl:2: not a valid AnchorFact"):
        read_jsonl(path, AnchorFact)


def test_omnigaia_copy_round_trips(tmp_path: Path) -> None:
    src = omnigaia_metadata_path()
    tasks = read_tasks_json(src)
    assert len(tasks) == 360
    out = tmp_path / "tasks.json"
    write_tasks_json(out, tasks)
    assert json.loads(out.read_text()) == json.loads(src.read_text())


def test_omnigaia_odd_values_are_kept() -> None:
    tasks = {t.id: t for t in read_tasks_json(omnigaia_metadata_path())}
    types = {t.task_type for t in tasks.values()}
    assert {"video w/ geographic calculation", "image + audio", "video w/ audio"} <= types
    tools = {
        tool
        for t in tasks.values()
        if isinstance(t.required_external_tools, list)
        for tool in t.required_external_tools
    }
    assert "read_video" in tools
    assert isinstance(tasks[281].sources, str)
    assert any(t.task_type is None for t in tasks.values())


def test_license_ships_beside_the_copy() -> None:
    assert "MIT License" in (omnigaia_metadata_path().parent / "LICENSE").read_text()


def test_atomic_dir_keeps_old_output_on_failure(tmp_path: Path) -> None:
    out = tmp_path / "asset"
    with atomic_dir(out) as tmp:
        atomic_write_text(tmp / "a.txt", "first")
    with pytest.raises(RuntimeError), atomic_dir(out) as tmp:
        atomic_write_text(tmp / "a.txt", "second")
        raise RuntimeError("stage crashed")
    assert (out / "a.txt").read_text() == "first"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["asset"]
