"""The docs site builds with `mkdocs build --strict` (no broken link, no page left out of the nav), and
its params reference, generated from the code, lists every field of the params model."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_site_builds_strict_and_the_params_reference_lists_every_field(tmp_path: Path) -> None:
    from orchestra.config import Params

    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    ref = tmp_path / "docs" / "reference"
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "docs_reference.py"), "--out", str(ref)],
        cwd=ROOT, check=True, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    mkdocs = str(Path(sys.executable).parent / "mkdocs")
    env = {"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"}
    res = subprocess.run(
        [mkdocs, "build", "--strict", "-f", str(tmp_path / "mkdocs.yml")],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    pages = ("index", "reference/params", "reference/cli", "reference/assets", "results/index")
    pages += ("how-to/serve", "how-to/extend", "how-to/schedule", "how-to/audit", "concepts/lineage")
    pages += ("concepts/architecture",)
    for page in pages:
        assert (tmp_path / "site" / f"{page}.html").is_file(), page

    keys = set(re.findall(r"^\| `([^`]+)` \|", (ref / "params.md").read_text(), re.M))
    schema = Params.model_json_schema()
    models = [schema, *schema.get("$defs", {}).values()]
    fields = {name for model in models for name in model.get("properties", {})}
    missing = sorted(f for f in fields if not any(k == f or k.endswith(f".{f}") for k in keys))
    assert not missing, missing
    assert {"train.dagrpo.rubric", "providers.<name>.kind", "tracking.mlflow_uri"} <= keys
    html = (tmp_path / "site" / "reference" / "params.html").read_text()
    assert "train.dagrpo.states" in html
    cli = (ref / "cli.md").read_text()
    assert "## `orchestra audit`" in cli and "## `orchestra params check`" in cli
