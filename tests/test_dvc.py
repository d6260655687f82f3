"""DVC: `dvc repro` on a copy of the project builds the stages, and a second repro finds nothing to do."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import TINY_EVAL

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
    params["eval"].update(TINY_EVAL)
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

    first = dvc("repro")
    assert "Running stage 'seed_tasks'" in first
    assert (project_copy / "data" / "seed_tasks" / "tasks.json").is_file()
    assert "Running stage 'rewrite_candidates'" in first
    assert (project_copy / "data" / "rewrite_candidates" / "candidates.jsonl").is_file()
    assert (project_copy / "data" / "policy_dagrpo" / "model" / "model.safetensors").is_file()
    assert (project_copy / "data" / "report" / "report.md").is_file()
    metrics = json.loads(dvc("metrics", "show", "--json"))  # benchmark_scores' metrics, as DVC reads them
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
