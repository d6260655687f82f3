"""Lineage records: a stage whose params, code and inputs are unchanged is not recomputed; incoming seeds;
the record table says what dvc.yaml says; the Dagster sensor, schedule and jobs."""

import json
from pathlib import Path

import dagster as dg
import pytest
import yaml

from orchestra import lineage
from orchestra.config import load_params
from orchestra.errors import StageError
from orchestra.pipeline.run import run_stage, stale
from orchestra.stages import STAGES, code_paths

ROOT = Path(__file__).resolve().parents[1]


def _params(tmp_path: Path, **seed: object) -> Path:
    data = yaml.safe_load((ROOT / "params.yaml").read_text())
    data["seed"].update({"source": "omnigaia", "limit": 20, **seed})
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _task(tid: str, media: str) -> dict:
    return {
        "id": tid,
        "question": "What number is shown?",
        "omni_modal_input": [{"type": "image", "id": "img1", "path": media}],
        "annotated_solution": "read it",
        "sources": [],
        "answer": "7",
        "total_steps": 1,
        "Level": "Easy",
        "required_external_tools": [],
        "task_type": "image",
        "category": "Science & Technology",
    }


def test_a_stage_is_not_recomputed_until_its_params_inputs_or_output_change(tmp_path: Path) -> None:
    path = _params(tmp_path)
    params, root = load_params(path), tmp_path / "data"
    first = run_stage("seed_tasks", params, root)
    assert first["up_to_date"] is False and first["rows"] == 20
    rec = lineage.read_record(root, "seed_tasks")
    assert rec and rec["outputs"] == lineage.dir_md5(root / "seed_tasks", exclude=("lineage.json",))
    tasks = root / "seed_tasks" / "tasks.json"
    mtime = tasks.stat().st_mtime_ns
    second = run_stage("seed_tasks", params, root)
    assert second["up_to_date"] is True and second["rows"] == 20
    assert tasks.stat().st_mtime_ns == mtime  # nothing was rewritten
    assert stale(params, root)[0] == "anchor_facts"  # and everything after it
    tasks.write_text(tasks.read_text()[:-3])  # edited after it was built: runs again
    assert lineage.up_to_date(STAGES["seed_tasks"], params, root) is None
    assert run_stage("seed_tasks", params, root)["up_to_date"] is False
    assert run_stage("seed_tasks", params, root, force=True)["up_to_date"] is False
    other = params.model_copy(update={"seed": params.seed.model_copy(update={"limit": 21})})
    assert run_stage("seed_tasks", other, root)["rows"] == 21  # another param: runs again
    with pytest.raises(StageError, match="only benchmark_scores"):
        run_stage("seed_tasks", params, root, shards=[0])


def test_dir_md5_is_dvc_s_folder_hash_format(tmp_path: Path) -> None:
    (tmp_path / "d" / "sub").mkdir(parents=True)
    (tmp_path / "d" / "a.txt").write_text("a\n")
    (tmp_path / "d" / "sub" / "b.txt").write_text("b\n")
    h = lineage.dir_md5(tmp_path / "d")
    assert h.endswith(".dir") and len(h) == 36
    assert lineage.dir_md5(tmp_path / "d", exclude=("a.txt",)) != h
    (tmp_path / "d" / "a.txt").write_text("A\n")
    assert lineage.dir_md5(tmp_path / "d") != h
    assert lineage.dir_md5(tmp_path / "nothing") == "missing"


def test_incoming_seed_files_join_the_seeds_once_and_bad_ones_are_refused(tmp_path: Path) -> None:
    path = _params(tmp_path)
    params, root = load_params(path), tmp_path / "data"
    assert run_stage("seed_tasks", params, root)["incoming_tasks"] == 0
    inbox = root / "incoming"
    (inbox / "media").mkdir(parents=True)
    (inbox / "media" / "new.png").write_bytes(b"\x89PNG fake bytes")
    (inbox / "batch1.json").write_text(json.dumps([_task("user-1", "new.png")]))
    assert lineage.up_to_date(STAGES["seed_tasks"], params, root) is None  # a new file is a new input
    meta = run_stage("seed_tasks", params, root)
    assert (meta["rows"], meta["incoming_files"], meta["incoming_tasks"]) == (21, 1, 1)
    assert (root / "seed_tasks" / "media" / "new.png").read_bytes() == b"\x89PNG fake bytes"
    ids = [t["id"] for t in json.loads((root / "seed_tasks" / "tasks.json").read_text())]
    assert ids[-1] == "user-1"
    before = (root / "seed_tasks" / "tasks.json").read_bytes()
    (inbox / "batch2.json").write_text(json.dumps([_task("user-1", "new.png")]))
    with pytest.raises(StageError, match="already taken"):
        run_stage("seed_tasks", params, root)
    (inbox / "batch2.json").write_text(json.dumps([_task("user-2", "gone.png")]))
    with pytest.raises(StageError, match="gone.png"):
        run_stage("seed_tasks", params, root)
    (inbox / "batch2.json").write_text('[{"id": 1}]')
    with pytest.raises(StageError, match="batch2.json"):
        run_stage("seed_tasks", params, root)
    assert (root / "seed_tasks" / "tasks.json").read_bytes() == before  # nothing already written is lost


def test_dvc_yaml_is_the_stage_table() -> None:
    """dvc.yaml is generated from the stage table (`orchestra dvc-yaml --write dvc.yaml`) and says what it
    says: each stage's upstream outputs, code and params; every code path exists."""
    from orchestra.pipeline.dvc import dvc_yaml

    assert (ROOT / "dvc.yaml").read_text() == dvc_yaml(), "run: .venv/bin/orchestra dvc-yaml --write dvc.yaml"
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    assert list(stages) == list(STAGES)
    for name, stage in STAGES.items():
        dvc_deps = stages[name]["deps"]
        data = [d.removeprefix("data/") for d in dvc_deps if d.startswith("data/") and d != "data/incoming"]
        assert tuple(data) == stage.upstream, name
        assert tuple(d for d in dvc_deps if not d.startswith("data/")) == code_paths(stage), name
        assert tuple(stages[name]["params"]) == stage.params, name
        for path in code_paths(stage):
            assert (ROOT / path).exists(), path


def test_the_sensor_requests_data_job_once_per_new_file(tmp_path: Path) -> None:
    from dagster_project.automation import incoming_seeds
    from dagster_project.resources import ParamsResource

    path = _params(tmp_path)
    inbox = tmp_path / "data" / "incoming"
    resources = {"params": ParamsResource(path=str(path))}
    with dg.instance_for_test() as instance:
        ctx = dg.build_sensor_context(instance=instance, resources=resources)
        assert not incoming_seeds(ctx).run_requests  # no folder yet
        inbox.mkdir(parents=True)
        (inbox / "a.json").write_text(json.dumps([_task("user-1", "x.png")]))
        first = incoming_seeds(ctx)
        assert len(first.run_requests) == 1 and first.run_requests[0].run_key.startswith("a.json:")
        ctx = dg.build_sensor_context(instance=instance, resources=resources, cursor=first.cursor)
        assert not incoming_seeds(ctx).run_requests  # the same file again: nothing
        (inbox / "b.json").write_text(json.dumps([_task("user-2", "y.png")]))
        third = incoming_seeds(ctx)
        assert [r.run_key.split(":")[0] for r in third.run_requests] == ["b.json"]
        ctx = dg.build_sensor_context(instance=instance, resources=resources, cursor=third.cursor)
        (inbox / "a.json").write_text(json.dumps([_task("user-1b", "x.png")]))  # new content, same name
        assert len(incoming_seeds(ctx).run_requests) == 1


def test_jobs_schedule_and_executor() -> None:
    import datetime

    from dagster_project.automation import weekly_retraining
    from dagster_project.definitions import defs

    assert {j.name for j in defs.jobs or []} >= {"data_job", "train_eval_job", "full_pipeline"}
    data = defs.resolve_job_def("data_job")
    assert {k.to_user_string() for k in data.asset_layer.executable_asset_keys} == {
        n for n, stage in STAGES.items() if stage.group == "data"
    }
    assert weekly_retraining.default_status == dg.DefaultScheduleStatus.STOPPED  # schedule.retrain: false
    ctx = dg.build_schedule_context(scheduled_execution_time=datetime.datetime(2026, 12, 7, 3))
    (req,) = weekly_retraining.evaluate_tick(ctx).run_requests or []
    assert req.tags["dagster/asset_partition_range_start"] == "shard-0"
    assert defs.executor is not None and defs.executor.name == "multiprocess"
    # the torch training steps run one at a time (two side by side on 2 cores only contend)
    run_config = defs.resolve_job_def("full_pipeline").executor_def.config_schema.resolve_config({})
    limits = run_config.value["config"]["tag_concurrency_limits"]
    assert limits == [{"key": "orchestra/cores", "value": "torch", "limit": 1}]
    tagged = {
        k.to_user_string()
        for a in defs.assets or []
        if isinstance(a, dg.AssetsDefinition)
        for k in a.keys
        if a.op.tags.get("orchestra/cores") == "torch"
    }
    assert tagged == {"policy_sft", "policy_dagrpo", "policy_grpo"}
    bench = defs.resolve_assets_def("benchmark_scores")
    assert bench.partitions_def is not None and bench.partitions_def.get_partition_keys() == [
        "shard-0",
        "shard-1",
    ]


def test_the_celery_example_config_is_valid_for_the_celery_executor(monkeypatch: pytest.MonkeyPatch) -> None:
    """configs/dagster_celery.yaml: a run config of the executor ORCHESTRA_EXECUTOR=celery picks, and the
    worker's own loader reads it."""
    from dagster_celery.cli import get_validated_config

    from dagster_project import definitions

    path = ROOT / "configs" / "dagster_celery.yaml"
    monkeypatch.setenv("ORCHESTRA_EXECUTOR", "celery")
    monkeypatch.setenv("ORCHESTRA_CELERY_BROKER", "redis://broker:6379/0")
    monkeypatch.setenv("ORCHESTRA_CELERY_BACKEND", "redis://broker:6379/1")
    celery = definitions._executor()
    assert celery.name == "celery"
    location = definitions.defs
    scaled = dg.Definitions(
        assets=location.assets,
        asset_checks=location.asset_checks,
        jobs=location.jobs,
        resources=location.resources,
        executor=celery,
    )
    job = scaled.resolve_job_def("train_eval_job")
    dg.validate_run_config(job, yaml.safe_load(path.read_text()))
    assert get_validated_config(str(path))["broker"] == "redis://broker:6379/0"  # from the worker's env
    with pytest.raises(dg.DagsterInvalidConfigError):
        dg.validate_run_config(job, {"execution": {"config": {"brokr": "x"}}})
    monkeypatch.setenv("ORCHESTRA_EXECUTOR", "ray")
    with pytest.raises(ValueError, match="multiprocess, celery"):
        definitions._executor()
