"""The one stage table: every row's function and checks exist, rows come after what they read, and a
stage reads only the params its row declares (an undeclared read fails at the read, naming the key)."""

import pickle
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestra.config import load_params
from orchestra.data.store import read_seed_tasks, stage_dir
from orchestra.io import atomic_dir, atomic_write_text, dump_json
from orchestra.pipeline.run import load_function, run_stage
from orchestra.pipeline.scope import UndeclaredParams, scoped
from orchestra.stages import STAGES, Stage, code_paths

ROOT = Path(__file__).resolve().parents[1]


def test_every_row_names_functions_that_exist_and_reads_only_earlier_rows() -> None:
    seen: set[str] = set()
    for name, stage in STAGES.items():
        assert stage.name == name and set(stage.upstream) <= seen, name
        assert callable(load_function(stage.fn)), stage.fn
        for check in stage.checks:
            assert callable(load_function(check.fn)), check.fn
        assert stage.group in ("data", "training", "evaluation"), name
        seen.add(name)


def test_a_stage_s_code_is_what_its_function_imports() -> None:
    """Read from the import graph, not declared: decision samples render states (agent/state.py), the
    judge (evaluation/scoring.py) is not anchor_facts' code, and a stage building the expert pool reads
    the registry file."""
    code = {name: set(code_paths(stage)) for name, stage in STAGES.items()}
    assert "orchestra/agent/state.py" in code["decision_samples"]
    assert "orchestra/evaluation/scoring.py" not in code["anchor_facts"] | code["expert_trajectories"]
    assert "orchestra/evaluation/scoring.py" in code["benchmark_scores"]
    assert (
        "orchestra/answers.py" in code["anchor_facts"] and "orchestra/data/anchors.py" in code["anchor_facts"]
    )
    assert (
        "orchestra/resources/registry" in code["anchor_facts"]
        and "orchestra/resources/omnigaia" in code["seed_tasks"]
    )
    assert not any(
        p.startswith(("orchestra/config", "orchestra/stages.py")) for c in code.values() for p in c
    )
    for paths in code.values():
        assert all((ROOT / p).exists() for p in paths)


def test_scoped_params_give_what_is_declared_and_refuse_the_rest() -> None:
    params = load_params(ROOT / "params.yaml")
    view = scoped(params, ("seed", "train.sft", "eval.max_turns"), "some_stage")
    assert view.seed is params.seed and view.train.sft is params.train.sft
    assert view.eval.max_turns == params.eval.max_turns
    with pytest.raises(UndeclaredParams, match=r"some_stage read params train\.dagrpo.*declares: eval"):
        view.train.dagrpo  # noqa: B018 - the read is what fails
    with pytest.raises(UndeclaredParams, match=r"read params eval\.tasks"):
        view.eval.tasks  # noqa: B018
    with pytest.raises(UndeclaredParams, match="read params agent"):
        view.agent  # noqa: B018
    assert view.model_dump(mode="json") == {
        "seed": params.seed.model_dump(mode="json"),
        "train": {"sft": params.train.sft.model_dump(mode="json")},
        "eval": {"max_turns": params.eval.max_turns},
    }
    again = pickle.loads(pickle.dumps(view))  # a stage's worker processes get the same view
    assert again.train.sft == params.train.sft
    with pytest.raises(UndeclaredParams):
        again.tools  # noqa: B018
    copy = view.model_copy(update={"seed": params.seed.model_copy(update={"limit": 3})})
    assert copy.seed.limit == 3 and view.seed.limit == params.seed.limit
    with pytest.raises(UndeclaredParams):
        view.model_copy(update={"tools": params.tools})


def test_a_stage_that_reads_an_undeclared_key_fails_and_keeps_its_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = yaml.safe_load((ROOT / "params.yaml").read_text())
    data["seed"].update(source="omnigaia", limit=5)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(data))
    params, root = load_params(tmp_path / "params.yaml"), tmp_path / "data"
    run_stage("seed_tasks", params, root)
    before = (root / "seed_tasks" / "tasks.json").read_bytes()
    row = STAGES["seed_tasks"]
    monkeypatch.setitem(STAGES, "seed_tasks", Stage(**{**row.__dict__, "params": ("tools",)}))
    with pytest.raises(UndeclaredParams, match="stage seed_tasks read params seed,"):
        run_stage("seed_tasks", params, root, force=True)
    assert (root / "seed_tasks" / "tasks.json").read_bytes() == before


def count_questions(params: Any, root: Path) -> dict[str, Any]:
    """A stage added in a test: the seed tasks' questions by word count."""
    counts = Counter(len(t.question.split()) for t in read_seed_tasks(root))
    with atomic_dir(stage_dir(root, "question_lengths")) as tmp:
        atomic_write_text(tmp / "lengths.json", dump_json(dict(sorted(counts.items()))) + "\n")
    return {"rows": len(counts)}


def test_a_new_stage_is_one_row_plus_its_function(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The row alone makes the stage runnable (lineage included), a DVC stage and a Dagster asset."""
    import dagster as dg

    from dagster_project.assets import _stage_asset
    from dagster_project.resources import ParamsResource
    from orchestra.pipeline.dvc import dvc_yaml

    row = Stage(
        "question_lengths", "test_stage_table:count_questions", upstream=("seed_tasks",), params=(),
        code=("tests/test_stage_table.py",), rows="lengths", description="Questions by word count.",
    )  # fmt: skip
    monkeypatch.setitem(STAGES, row.name, row)
    data = yaml.safe_load((ROOT / "params.yaml").read_text())
    data["seed"].update(source="omnigaia", limit=5)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(data))
    params, root = load_params(tmp_path / "params.yaml"), tmp_path / "data"
    run_stage("seed_tasks", params, root)
    assert run_stage("question_lengths", params, root)["up_to_date"] is False
    assert (root / "question_lengths" / "lengths.json").is_file()
    assert run_stage("question_lengths", params, root)["up_to_date"] is True
    assert "  question_lengths:\n    cmd: .venv/bin/orchestra stage question_lengths" in dvc_yaml()
    asset = _stage_asset(row)
    result = dg.materialize([asset], resources={"params": ParamsResource(path=str(tmp_path / "params.yaml"))})
    assert result.success and {k.to_user_string() for k in asset.dependency_keys} == {"seed_tasks"}
