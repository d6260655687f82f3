"""The Dagster code location loads and its assets materialize in-process into data/<asset>/."""

import json
import os
import subprocess
from pathlib import Path

import dagster as dg
import yaml
from conftest import TINY_EVAL

from dagster_project.assets import ASSETS
from dagster_project.definitions import defs
from dagster_project.resources import ParamsResource
from orchestra.data.store import read_run_record
from orchestra.evaluation.report import LADDER

ROOT = Path(__file__).resolve().parents[1]


def test_definitions_load() -> None:
    dg.Definitions.validate_loadable(defs)
    keys = {k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()}
    assert {"seed_tasks", "anchor_facts", "rewrite_candidates"} <= keys


def test_the_dagster_graph_is_the_stage_table() -> None:
    """Each row of the stage table is an asset depending on exactly what the row reads, in its group, with
    its partitions, op tags and blocking checks; nothing else is an asset or a check."""
    from orchestra.stages import STAGES

    graph = defs.resolve_asset_graph()
    assert {k.to_user_string() for k in graph.get_all_asset_keys()} == set(STAGES)
    checks = {
        (spec.asset_key.to_user_string(), spec.name, spec.blocking)
        for c in defs.asset_checks or []
        for spec in c.check_specs  # type: ignore[union-attr]
    }
    assert checks == {(n, c.name, True) for n, s in STAGES.items() for c in s.checks}
    for name, stage in STAGES.items():
        node = graph.get(dg.AssetKey(name))
        assert {p.to_user_string() for p in node.parent_keys} == set(stage.upstream), name
        assert node.group_name == stage.group and (node.partitions_def is not None) == stage.sharded, name
        asset = defs.resolve_assets_def(name)
        assert (asset.op.tags.get("orchestra/cores") == "torch") == stage.all_cores, name
        assert asset.descriptions_by_key[dg.AssetKey(name)] == stage.description


def _params_file(tmp_path: Path, **seed: object) -> Path:
    data = yaml.safe_load((ROOT / "params.yaml").read_text())
    data["seed"].update(seed)
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_seed_tasks_materializes_omnigaia(tmp_path: Path) -> None:
    params = _params_file(tmp_path, source="omnigaia", limit=None)
    result = dg.materialize([ASSETS["seed_tasks"]], resources={"params": ParamsResource(path=str(params))})
    assert result.success
    out = tmp_path / "data" / "seed_tasks"
    tasks = json.loads((out / "tasks.json").read_text())
    assert len(tasks) == 360
    meta = result.asset_materializations_for_node("seed_tasks")[0].metadata
    assert meta["dagster/row_count"].value == 360
    assert meta["distribution"].value["Level"] == {"Easy": 122, "Hard": 78, "Medium": 160}


def test_failed_materialization_keeps_previous_output(tmp_path: Path) -> None:
    params = _params_file(tmp_path, source="omnigaia", limit=5)
    resources = {"params": ParamsResource(path=str(params))}
    assert dg.materialize([ASSETS["seed_tasks"]], resources=resources).success
    out = tmp_path / "data" / "seed_tasks" / "tasks.json"
    before = out.read_bytes()
    broken = tmp_path / "broken.json"
    broken.write_text('[{"id": 1}]')
    _params_file(tmp_path, source="omnigaia_file", path=str(broken))
    result = dg.materialize([ASSETS["seed_tasks"]], resources=resources, raise_on_error=False)
    assert not result.success
    assert out.read_bytes() == before


def test_seed_tasks_materializes_the_world_by_default(tmp_path: Path) -> None:
    params = _params_file(tmp_path)
    data = yaml.safe_load(params.read_text())
    assert data["seed"]["source"] == "world"
    data["seed"]["world"].update(n_seeds=8, n_entities=30)
    params.write_text(yaml.safe_dump(data))
    result = dg.materialize([ASSETS["seed_tasks"]], resources={"params": ParamsResource(path=str(params))})
    assert result.success
    out = tmp_path / "data" / "seed_tasks"
    tasks = json.loads((out / "tasks.json").read_text())
    assert len(tasks) == 8
    for task in tasks:
        for media in task["omni_modal_input"]:
            assert (out / "media" / media["path"]).is_file()
    assert (out / "kb" / "pages.jsonl").is_file()
    meta = result.asset_materializations_for_node("seed_tasks")[0].metadata
    assert meta["media_files"].value >= 8


def _audit(params: Path) -> subprocess.CompletedProcess:
    cmd = [str(ROOT / ".venv" / "bin" / "orchestra"), "audit", "--params", str(params)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)


def test_the_lineage_materializes_and_its_blocking_checks_pass(tmp_path: Path, tiny_train: dict) -> None:
    """Every asset, data and training (the smallest policy), every benchmark shard, in one in-process run;
    then the lineage audit holds, flags a tampered file and a deleted MLflow run; a second run recomputes
    nothing."""
    import mlflow

    from dagster_project.automation import ALL_SHARDS
    from dagster_project.definitions import defs as location
    from dagster_project.resources import project_resources

    params = _params_file(tmp_path)
    data = yaml.safe_load(params.read_text())
    data["seed"]["world"].update(n_seeds=10, n_entities=30)
    data["train"] = tiny_train
    data["eval"].update(TINY_EVAL)
    params.write_text(yaml.safe_dump(data))
    everything = [*(location.assets or []), *(location.asset_checks or [])]
    result = dg.materialize(everything, resources=project_resources(str(params)), tags=ALL_SHARDS)  # type: ignore[arg-type]
    assert result.success
    assert mlflow.active_run() is None  # the Dagster run's MLflow run does not outlive it in this process
    checks = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
    assert checks == {
        "verified_samples_are_clean": True,
        "verified_samples_pass_the_suite": True,
        "decision_samples_are_valid": True,
    }
    meta = result.asset_materializations_for_node("verified_samples")[0].metadata
    assert meta["funnel"].value["verified"] == meta["dagster/row_count"].value > 0
    assert Path(meta["ge_data_docs"].value).is_file()
    assert meta["dvc_md5"].value.endswith(".dir") and meta["up_to_date"].value == "False"
    assert (tmp_path / "data" / "decision_samples" / "samples.jsonl").is_file()
    client = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")  # the project's store, beside params
    # dagster-mlflow finds the Dagster run's MLflow run by this tag in each step process: it must be one
    exp = client.get_experiment_by_name("orchestra").experiment_id
    (pipeline_run,) = client.search_runs([exp], f"tags.dagster_run_id = '{result.run_id}'")
    for name in ("policy_sft", "policy_dagrpo", "policy_grpo"):
        meta = result.asset_materializations_for_node(name)[0].metadata
        assert (Path(meta["model_dir"].value) / "model.safetensors").is_file()
        assert meta["mlflow_run_id"].value and 0 <= meta["metrics"].value["val_valid"] <= 1
        assert meta["mlflow_run"].value.endswith(f"/runs/{meta['mlflow_run_id'].value}")
        run = client.get_run(meta["mlflow_run_id"].value)  # nested under the Dagster run's (dagster-mlflow)
        assert run.data.tags["orchestra.dagster_run_id"] == result.run_id
        assert run.data.tags["dvc.decision_samples"].endswith(".dir") and run.data.tags["git_commit"]
        assert (
            run.data.tags["mlflow.parentRunId"] == pipeline_run.info.run_id and run.info.run_name == name[7:]
        )
    shards = result.asset_materializations_for_node("benchmark_scores")
    assert sorted(m.partition for m in shards) == ["shard-0", "shard-1"]
    meta = shards[0].metadata
    assert meta["dagster/row_count"].value == len(LADDER)
    assert set(meta["accuracy"].value) == {r.key for r in LADDER}
    assert meta["accuracy"].value["orchestra_oracle"] == 1.0
    scores = json.loads((tmp_path / "data" / "benchmark_scores" / "scores.json").read_text())
    assert all(s["n"] == TINY_EVAL["tasks"] for s in scores.values())  # both shards, merged
    report = (tmp_path / "data" / "report" / "report.md").read_text()
    assert all(r.label in report for r in LADDER)
    for png in ("accuracy_by_level.png", "reward_curves.png"):
        assert (tmp_path / "data" / "report" / png).stat().st_size > 1000
    meta = result.asset_materializations_for_node("report")[0].metadata
    assert meta["mlflow_run_id"].value and meta["reward_curves"].value == ["dagrpo", "grpo"]

    ok = _audit(params)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "0 broken" in ok.stdout and "verified_samples GE suite" in ok.stdout
    verified = tmp_path / "data" / "verified_samples" / "verified.jsonl"
    kept = verified.read_bytes()
    verified.write_bytes(kept.replace(b'"split":"train"', b'"split":"test"', 1))  # tampered after training
    bad = _audit(params)
    assert bad.returncode == 1 and "changed after it was built" in bad.stdout, bad.stdout
    assert "decision_samples ← verified_samples" in bad.stdout
    from orchestra.config import load_params
    from orchestra.data.verified import check_kept_with_suite

    rows = [json.loads(line) for line in kept.decode().splitlines()]
    rows[0]["verification"]["checks"]["judge"]["passed"] = False  # a sample that failed a check, kept
    verified.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ok_suite, detail = check_kept_with_suite(tmp_path / "data", load_params(params))
    assert not ok_suite and "4/5" in detail, detail
    verified.write_bytes(kept)
    sft = read_run_record(tmp_path / "data", "policy_sft")["mlflow_run_id"]
    client.delete_run(sft)
    gone = _audit(params)
    assert gone.returncode == 1 and f"run {sft} was deleted" in gone.stdout, gone.stdout
    client.restore_run(sft)
    assert _audit(params).returncode == 0

    again = dg.materialize(everything, resources=project_resources(str(params)), tags=ALL_SHARDS)  # type: ignore[arg-type]
    assert again.success
    for event in again.get_asset_materialization_events():
        assert event.materialization.metadata["up_to_date"].value == "True", event.asset_key
    driver = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "python"), "-m", "launch.pipeline", "--params", str(params)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert driver.returncode == 0 and "nothing recomputed" in driver.stdout, driver.stdout + driver.stderr


def test_the_cli_runs_pooled_perception_steps_one_after_another(tmp_path: Path) -> None:
    """`dagster asset materialize` as `make pipeline` runs it (multiprocess executor, each step a
    subprocess): a step whose perception tools ran in worker processes must not stall the next step."""
    params = _params_file(tmp_path)
    data = yaml.safe_load(params.read_text())
    data["seed"]["world"].update(n_seeds=6, n_entities=24)
    data["tools"]["workers"] = 2
    params.write_text(yaml.safe_dump(data))
    (tmp_path / "home").mkdir()
    env = {**os.environ, "ORCHESTRA_PARAMS": str(params), "DAGSTER_HOME": str(tmp_path / "home")}
    dagster = str(ROOT / ".venv" / "bin" / "dagster")
    cmd = [dagster, "asset", "materialize", "-m", "dagster_project.definitions"]
    cmd += ["--select", "seed_tasks,anchor_facts,rewrite_candidates"]
    res = subprocess.run(
        cmd, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=420
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert "Materialized value rewrite_candidates" in res.stderr and "RUN_SUCCESS" in res.stderr, res.stderr[
        -3000:
    ]
    assert (tmp_path / "data" / "rewrite_candidates" / "candidates.jsonl").is_file()
