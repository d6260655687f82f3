"""DVC: `dvc repro` on a copy of the project builds the stages, and a second repro finds nothing to do."""

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import TINY_EVAL

from orchestra import lineage
from orchestra.stages import STAGES

ROOT = Path(__file__).resolve().parents[1]
DVC = ROOT / ".venv-dvc" / "bin" / "dvc"


@pytest.fixture()
def project_copy(tmp_path: Path, tiny_train: dict) -> Path:
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    dst = tmp_path / "p"
    for rel in files:
        if (ROOT / rel).is_file():
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, dst / rel)
    (dst / ".venv").symlink_to(ROOT / ".venv")
    subprocess.run(["git", "init", "-q"], cwd=dst, check=True)
    params = yaml.safe_load((dst / "params.yaml").read_text())
    params["seed"]["limit"] = 12
    params["seed"]["world"].update(n_seeds=12, n_entities=40)
    params["train"] = tiny_train
    params["eval"].update(TINY_EVAL, shards=1)  # one shard: DVC has no partitions (the Dagster test has two)
    (dst / "params.yaml").write_text(yaml.safe_dump(params))
    return dst


@pytest.mark.skipif(not DVC.exists(), reason="make setup creates .venv-dvc")
def test_dvc_repro_builds_then_is_up_to_date(project_copy: Path) -> None:
    env = {**os.environ, "DVC_NO_ANALYTICS": "1"}

    def dvc(*args: str) -> str:
        res = subprocess.run(
            [str(DVC), *args], cwd=project_copy, capture_output=True, text=True, env=env, check=False
        )
        assert res.returncode == 0, res.stdout + res.stderr
        return res.stdout + res.stderr

    def dvc_json(*args: str) -> Any:
        res = subprocess.run(
            [str(DVC), *args, "--json"],
            cwd=project_copy,
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        assert res.returncode == 0 and not res.stderr.strip(), res.stdout + res.stderr
        return json.loads(res.stdout)

    first = dvc("repro")
    assert "Running stage 'seed_tasks'" in first
    lock = yaml.safe_load((project_copy / "dvc.lock").read_text())["stages"]
    for name in STAGES:  # DVC's hash of each output is the one the lineage records and Dagster shows
        (out,) = [o for o in lock[name]["outs"] if o["path"] == f"data/{name}"]
        assert out["md5"] == lineage.dir_md5(project_copy / out["path"]), name
    assert (project_copy / "data" / "seed_tasks" / "tasks.json").is_file()
    assert "Running stage 'rewrite_candidates'" in first
    assert (project_copy / "data" / "rewrite_candidates" / "candidates.jsonl").is_file()
    assert (project_copy / "data" / "policy_dagrpo" / "model" / "model.safetensors").is_file()
    assert (project_copy / "data" / "report" / "report.md").is_file()
    metrics = dvc_json("metrics", "show")  # benchmark_scores' metrics, as DVC reads them
    shown = next(iter(metrics.values()))["data"]["data/benchmark_metrics.json"]["data"]
    assert shown["orchestra_oracle"]["em"] == 1.0
    second = dvc("repro")
    assert "up to date" in second, second
    assert "Running stage" not in second
    # one rewrite param changed: rewrite_candidates (and what is downstream of it) runs again, only it
    params = yaml.safe_load((project_copy / "params.yaml").read_text())
    params["rewrite"]["seed"] += 1
    (project_copy / "params.yaml").write_text(yaml.safe_dump(params))
    third = dvc("repro")
    assert "Running stage 'rewrite_candidates'" in third, third
    assert "Running stage 'anchor_facts'" not in third and "Running stage 'seed_tasks'" not in third
    assert "Running stage" not in dvc("repro")
    # an experiment: one DA-GRPO param set on the command line; only it and what is downstream run
    git = {**env, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t"}
    git["GIT_COMMITTER_EMAIL"] = "t@t"
    for args in (["add", "-A"], ["commit", "-qm", "baseline"]):
        subprocess.run(["git", *args], cwd=project_copy, env=git, check=True, capture_output=True)
    exp = dvc("exp", "run", "-S", "train.dagrpo.learning_rate=0.002")
    assert "Running stage 'policy_dagrpo'" in exp and "Running stage 'benchmark_scores'" in exp, exp
    assert "Running stage 'policy_sft'" not in exp and "Running stage 'decision_samples'" not in exp
    shown = dvc_json("exp", "show")
    lrs = [
        e["data"]["params"]["params.yaml"]["data"]["train"]["dagrpo"]["learning_rate"]
        for rev in shown
        for e in [rev, *[x for exp in rev.get("experiments") or [] for x in exp.get("revs", [])]]
        if e.get("data")
    ]
    assert 0.002 in lrs, lrs
    diff = dvc_json("metrics", "diff", "--all")  # the baseline commit vs the experiment
    assert "orchestra_dagrpo.em" in diff["data/benchmark_metrics.json"], diff


def _run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: int = 900) -> str:
    res = subprocess.run(
        cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )
    assert res.returncode == 0, (cmd, res.stdout[-3000:], res.stderr[-3000:])
    return res.stdout + res.stderr


@pytest.mark.slow
@pytest.mark.skipif(not DVC.exists(), reason="make setup creates .venv-dvc")
def test_a_dagster_run_leaves_dvc_clean_and_a_clone_pulls_its_outputs(
    project_copy: Path, tmp_path: Path
) -> None:
    """`make pipeline`'s driver (Dagster) records what it built in dvc.lock: `dvc status` is clean and
    `dvc repro` runs nothing; `dvc push` to the local remote, and a colleague's clone `dvc pull`s every
    output: the driver then finds nothing stale and `orchestra audit` holds on the shared MLflow store."""
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    env = {**os.environ, "DVC_NO_ANALYTICS": "1", "DAGSTER_HOME": str(home)}
    env.pop("ORCHESTRA_PARAMS", None)
    (project_copy / ".venv-dvc").symlink_to(ROOT / ".venv-dvc")
    python = str(ROOT / ".venv" / "bin" / "python")
    built = _run([python, "-m", "launch.pipeline"], project_copy, env)
    assert f"dvc.lock records {len(STAGES)} of {len(STAGES)} stages" in built, built
    status = json.loads(_run([str(DVC), "status", "--json"], project_copy, env))
    assert status == {}, status
    repro = _run([str(DVC), "repro"], project_copy, env)
    assert "Running stage" not in repro, repro
    _run([str(DVC), "push"], project_copy, env)

    git = {**env, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t"}
    git["GIT_COMMITTER_EMAIL"] = "t@t"
    for args in (["add", "-A", "--", ".", ":!.venv", ":!.venv-dvc"], ["commit", "-qm", "built"]):
        _run(["git", *args], project_copy, git)
    clone = tmp_path / "colleague"
    _run(["git", "clone", "-q", str(project_copy), str(clone)], tmp_path, git)
    for venv in (".venv", ".venv-dvc"):
        (clone / venv).symlink_to(ROOT / venv)
    assert not (clone / "data" / "policy_sft").exists()
    remote = str(project_copy / ".dvc-remote")  # the shared remote (an object store for a team)
    _run([str(DVC), "remote", "modify", "--local", "local", "url", remote], clone, env)
    _run([str(DVC), "pull"], clone, env)
    for name in STAGES:
        recorded = json.loads((project_copy / "data" / name / lineage.LINEAGE_FILE).read_text())["outputs"]
        assert lineage.output_md5(clone / "data", name) == recorded, name
    shared = {**env, "ORCHESTRA_MLFLOW_URI": f"sqlite:///{project_copy / 'mlflow.db'}"}
    again = _run([python, "-m", "launch.pipeline"], clone, shared)
    assert "nothing recomputed" in again, again
    audit = _run([str(ROOT / ".venv" / "bin" / "orchestra"), "audit"], clone, shared)
    assert "0 broken" in audit, audit
