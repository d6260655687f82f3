"""The records that flow between stages, with the OmniGAIA-compatible task record at their root."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

from orchestra.errors import RecordError
from orchestra.io import (
    atomic_write_text,
    media_path_problem,
    read_jsonl,
    read_parquet,
    record_dict,
    write_jsonl,
    write_parquet,
)

__all__ = [
    "AnchorFact",
    "BenchmarkScore",
    "BrowseStep",
    "CheckOutcome",
    "ComputeStep",
    "Decision",
    "DecisionSample",
    "Delegate",
    "EvalRecord",
    "Finish",
    "MaestroSearch",
    "ModalInput",
    "PerceiveStep",
    "ReferenceSolution",
    "RewriteCandidate",
    "SearchStep",
    "SolutionStep",
    "Source",
    "SubTask",
    "SubtaskStep",
    "Task",
    "Trajectory",
    "TrajectoryStep",
    "VerificationResult",
    "VerifiedSample",
    "distribution",
    "read_jsonl",
    "read_parquet",
    "read_tasks_json",
    "write_jsonl",
    "write_parquet",
    "write_tasks_json",
]


class _Record(BaseModel):
    """Internal records: unknown keys are an error. Tag fields (a one-value Literal, e.g. ``kind``)
    always count as set, so writers that drop unset fields still keep the union discriminator."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    def model_post_init(self, context: Any, /) -> None:
        for name, field in type(self).model_fields.items():
            if get_origin(field.annotation) is Literal and len(get_args(field.annotation)) == 1:
                self.model_fields_set.add(name)


class _Open(BaseModel):
    """External-format records: unknown keys are kept and written back."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)


# --- OmniGAIA task format -------------------------------------------------------------------------


class ModalInput(_Open):
    type: str = Field(description="image | audio | video")
    id: str
    path: str = Field(description="relative to the task file's media root, in normal form, never '..'")

    @field_validator("path")
    @classmethod
    def _confined(cls, v: str) -> str:
        problem = media_path_problem(v)
        if problem:
            raise ValueError(f"media path {v!r}: {problem}")
        return v


class Source(_Open):
    """One piece of evidence behind an answer; OmniGAIA sources vary, so every key is optional."""

    type: str | None = None
    url: str | None = None
    key_information: Any = None


# Reference solutions: a DAG of sub-tasks, each with its goal, inputs and expected value. A world
# program (the steps a world seed was built from) is one producer; an expert's answer-verified
# trajectory on a seed without one is the other (orchestra.data.reference).
class _Step(_Record):
    out: str = Field(description="variable name that holds this step's value, e.g. 'v1'")
    value: Any = Field(description="the value the step produced when the world was generated")


class PerceiveStep(_Step):
    op: Literal["perceive"] = "perceive"
    input_id: str = Field(description="id of the modal input it reads")
    perception: str = Field(description="what is read, e.g. 'ocr_text', 'count_shapes', 'dtmf'")
    args: dict[str, Any] = Field(default_factory=dict)


class SearchStep(_Step):
    op: Literal["search"] = "search"
    query: str = Field(description="search text, or '$var' naming an earlier step's value")


class BrowseStep(_Step):
    op: Literal["browse"] = "browse"
    url: str = Field(description="a URL, or '$var' naming an earlier step's value")
    field: str


class ComputeStep(_Step):
    op: Literal["compute"] = "compute"
    expression: str = Field(description="Python expression over earlier step variables")


class SubtaskStep(_Step):
    """A sub-task outside the builtin goal grammar (a model backend's goal), as an expert ran it."""

    op: Literal["subtask"] = "subtask"
    goal: str = Field(
        description="the goal; '$v1' names an earlier step's value, '#M1' the first modal input"
    )
    skill: str = Field(description="the skill it asks of a backend")
    tools: list[str] = Field(default_factory=list, description="the tools it was given")
    backend: str | None = Field(None, description="the backend whose result is the recorded value")


SolutionStep = Annotated[
    PerceiveStep | SearchStep | BrowseStep | ComputeStep | SubtaskStep, Field(discriminator="op")
]


class Task(_Open):
    """A task in the OmniGAIA metadata format. Odd values in the public file are kept as they are."""

    id: int | str
    question: str
    omni_modal_input: list[ModalInput] = Field(default_factory=list)
    annotated_solution: list[str | dict[str, Any]] | str | None = None
    sources: list[Source | str] | str | None = None
    answer: str
    total_steps: int | str | None = None
    level: str | None = Field(None, alias="Level")
    required_external_tools: list[str] | str | None = None
    task_type: str | None = None
    category: str | None = None
    # Orchestra's own additions (absent from OmniGAIA files, written only when set):
    solution_program: list[SolutionStep] | None = None


_TASKS = TypeAdapter(list[Task])


def brief(e: ValidationError, limit: int = 5) -> str:
    """A validation error in a few lines: ``loc: message`` for the first ``limit`` problems."""
    errs = e.errors()
    lines = [f"{'.'.join(str(p) for p in x['loc'])}: {x['msg']}" for x in errs[:limit]]
    more = f" (+{len(errs) - limit} more)" if len(errs) > limit else ""
    return "; ".join(lines) + more


def _tools(task: Task) -> list[str]:
    t = task.required_external_tools
    return [t] if isinstance(t, str) else list(t or [])


def distribution(tasks: list[Task]) -> dict[str, dict[str, int]]:
    """Counts by category, Level, task_type and required tool (sorted, for stable metadata)."""

    def count(values: list[str | None]) -> dict[str, int]:
        return dict(sorted(Counter(str(v) for v in values).items()))

    return {
        "category": count([t.category for t in tasks]),
        "Level": count([t.level for t in tasks]),
        "task_type": count([t.task_type for t in tasks]),
        "tool": count([tool for t in tasks for tool in _tools(t)]),
    }


def _which_task(raw: bytes, e: ValidationError) -> str:
    """``task <id>: `` for the task of ``e``'s first problem where the file parses and it has an id."""
    loc = e.errors()[0]["loc"] if e.errors() else ()
    try:
        task = json.loads(raw)[loc[0]] if loc and isinstance(loc[0], int) else None
    except (ValueError, RecursionError, IndexError, TypeError, KeyError):
        return ""
    return f"task {str(task['id'])[:80]!r}: " if isinstance(task, dict) and "id" in task else ""


def read_tasks_json(path: Path) -> list[Task]:
    """Read an OmniGAIA-format JSON array of tasks; RecordError naming the file (and the task, where it
    has an id) when it cannot be read or does not match the schema."""
    path = Path(path)
    try:
        raw = path.read_bytes()
        return _TASKS.validate_json(raw)
    except OSError as e:
        raise RecordError(f"{path}: cannot read task file: {e.strerror or e}") from e
    except ValidationError as e:
        raise RecordError(f"{path}: not an OmniGAIA task list: {_which_task(raw, e)}{brief(e)}") from e


def write_tasks_json(path: Path, tasks: list[Task]) -> None:
    """Write tasks as an OmniGAIA-format JSON array (indented like the public file), atomically."""
    data = [record_dict(t) for t in tasks]
    atomic_write_text(Path(path), json.dumps(data, ensure_ascii=False, indent=4) + "\n")


# --- data synthesis ---------------------------------------------------------------------------------


class AnchorFact(_Record):
    """An atomic, checkable fact a seed's answer rests on, tied to its modality and solution step."""

    task_id: str
    fact_id: str
    kind: Literal["perception", "kb", "compute"] = Field(description="perceived, looked up, or computed")
    modality: Literal["image", "audio", "video", "text", "web", "compute"]
    step: str = Field(description="the solution-program variable that holds it, e.g. 'v1'")
    text: str = Field(description="the fact as a sentence")
    value: Any = None
    source: str | None = Field(None, description="modal input id or URL it comes from")
    perception: str | None = Field(None, description="perception facts: what is read (world perception name)")
    args: dict[str, Any] = Field(default_factory=dict, description="perception facts: its arguments")
    goal: str | None = Field(
        None,
        description="a fact a model backend read: its goal ('#M1' names the modal input), no perception name",
    )
    skill: str | None = Field(None, description="with goal: the skill it asks of its backend")
    field: str | None = Field(None, description="kb facts: the page field read")
    checked_by: str | None = Field(None, description="the expert whose tools recovered it")
    stated_by: str | None = Field(None, description="the provider that wrote ``text`` (unset: builtin)")


class ReferenceSolution(_Record):
    """The reference solution an expert policy found for a seed without a program: the program its
    cheapest answer-verified trajectory amounts to, and what that run cost."""

    task_id: str
    program: list[SolutionStep] = Field(min_length=1)
    expert: str = Field(description="the anchors.expert that solved it")
    attempt: int = Field(ge=1, description="which of its runs (1: greedy; later ones sampled)")
    attempts: int = Field(ge=1, description="runs made")
    solved: int = Field(ge=1, description="runs that reached the seed's answer")
    answer: str
    cost: float = 0.0
    tokens: int = 0
    subtasks: int = Field(
        0, description="sub-tasks the kept run delegated (the program keeps those it needs)"
    )


class RewriteCandidate(_Record):
    candidate_id: str
    seed_id: str
    strategy: str
    level: Literal["Easy", "Medium", "Hard"]
    task: Task = Field(description="the rewritten task (OmniGAIA fields + its own solution_program)")
    anchor_ids: list[str] = Field(default_factory=list, description="the seed's anchor facts it keeps")
    template: str = Field("", description="the surface template it was written from (builtin rewriter)")


class CheckOutcome(_Record):
    passed: bool
    score: float | None = None
    detail: str = ""


class VerificationResult(_Record):
    candidate_id: str
    checks: dict[str, CheckOutcome]

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks.values())


class VerifiedSample(_Record):
    candidate_id: str
    seed_id: str
    split: Literal["train", "val", "test"] | None = None
    task: Task
    verification: VerificationResult


# --- orchestration ----------------------------------------------------------------------------------


class SubTask(_Record):
    id: str = Field(description="node id in the dependency graph, e.g. 'E1'")
    goal: str
    modalities: list[str] = Field(default_factory=list, description="modal input ids this node may read")
    tools: list[str] = Field(default_factory=list)
    backend: str | None = None
    skill: str | None = Field(None, description="skill asked of the backend (Maestro's Model@@Skill)")
    depends_on: list[str] = Field(default_factory=list)


class Delegate(_Record):
    kind: Literal["delegate"] = "delegate"
    subtasks: list[SubTask] = Field(min_length=1)


class Finish(_Record):
    kind: Literal["finish"] = "finish"
    answer: str = Field(min_length=1)


class MaestroSearch(_Record):
    """Maestro's ``<search> Model@@Skill: Query </search>`` action."""

    kind: Literal["search"] = "search"
    model: str = Field(min_length=1)
    skill: str = Field(min_length=1)
    query: str = Field(min_length=1)


Decision = Annotated[Delegate | Finish | MaestroSearch, Field(discriminator="kind")]


class TrajectoryStep(_Record):
    index: int = Field(ge=0)
    state_messages: list[dict[str, str]] = Field(description="the exact rendered state before the decision")
    state: dict[str, Any] | None = Field(
        None,
        description="the structured state (orchestra.agent.state.OrchestraState) the decision was made in, "
        "so a sample can be re-rendered for another reader or budget without re-running tools",
    )
    decision: Decision | None = None
    raw_output: str | None = None
    error: str | None = None
    results: list[dict[str, Any]] = Field(default_factory=list, description="evidence returned per sub-task")
    latency_s: float = 0.0
    start_s: float | None = Field(None, description="when the policy was asked, seconds after the run began")
    policy_s: float | None = Field(
        None, description="the policy call's own seconds (latency_s adds the batch)"
    )
    input_tokens: int = Field(0, ge=0, description="the decision's policy call: tokens read")
    output_tokens: int = Field(0, ge=0, description="the decision's policy call: tokens written")
    cost: float = Field(0.0, ge=0, description="the decision's policy call, priced as the ledger prices it")


class Trajectory(_Record):
    task_id: str
    system: str
    policy: str
    steps: list[TrajectoryStep] = Field(default_factory=list)
    answer: str | None = None
    tokens: int = 0
    cost: float = 0.0
    latency_s: float = 0.0
    started_at: float | None = Field(None, description="when the run began, seconds since the epoch")
    accounting: dict[str, Any] = Field(
        default_factory=dict, description="per-policy/backend/tool usage and timing figures of the run"
    )
    error: str | None = None


class DecisionSample(_Record):
    """A state just before an expert decision, and that decision. No rendering is stored: each reader
    renders the state for itself (a trained policy in its own view, training/examples.py)."""

    sample_id: str
    task_id: str
    seed_id: str = ""
    split: Literal["train", "val", "test"]
    step_index: int = Field(ge=0)
    kind: str = Field("expert", description="expert (on its path) or the off-path / re-rendering kind")
    state: dict[str, Any] | None = Field(
        None, description="the structured state (OrchestraState), which every reader renders for itself"
    )
    decision: Decision
    completion: str = Field(description="the expert decision as JSON, in the expert's ids")


# --- evaluation -------------------------------------------------------------------------------------


class EvalRecord(_Record):
    task_id: str
    system: str
    policy: str
    prediction: str | None
    gold: str
    correct: bool
    level: str | None = None
    category: str | None = None
    task_type: str | None = None
    latency_s: float = 0.0
    cost: float = 0.0
    tokens: int = 0
    error: str | None = None


class BenchmarkScore(_Record):
    system: str
    policy: str
    n: int = Field(ge=0)
    accuracy: float = Field(ge=0, le=1)
    by_level: dict[str, float] = Field(default_factory=dict)
    by_category: dict[str, float] = Field(default_factory=dict)
    by_task_type: dict[str, float] = Field(default_factory=dict)
