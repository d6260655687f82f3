"""DVC in step with the lineage: what a Dagster run built is recorded in ``dvc.lock``.

Dagster and `make repro` build the same stages (``dvc.yaml`` says what each reads, as
the stage table does). After a Dagster run, ``dvc commit`` of every stage whose lineage
record says it is up to date writes its deps' and outputs' hashes to ``dvc.lock`` and its outputs to
DVC's cache: ``dvc status`` is then clean, ``make repro`` recomputes nothing and ``dvc push`` has the
outputs to ship, so a colleague's clone can ``dvc pull`` them instead of recomputing.

This holds only where DVC's stages are the run's: the params file is the project's ``params.yaml`` and
the data folder its ``data/`` (an overlay writing elsewhere, or a test's copy, is not DVC's business).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from orchestra.config import Params
from orchestra.errors import OrchestraError
from orchestra.lineage import up_to_date
from orchestra.stages import STAGES, code_paths

__all__ = ["DVC_ENV", "DvcError", "dvc_executable", "dvc_project", "record_in_dvc"]

#: the ``dvc`` executable to use; otherwise the project's ``.venv-dvc/bin/dvc``, then ``dvc`` on PATH
DVC_ENV = "ORCHESTRA_DVC"


class DvcError(OrchestraError):
    """DVC is missing or could not record the stages."""


def dvc_project(params_path: str | Path, root: Path) -> Path | None:
    """The folder holding ``dvc.yaml`` when the run's params and data are that DVC project's, else None."""
    project = Path(root).resolve().parent
    if not (project / "dvc.yaml").is_file() or Path(root).resolve() != project / "data":
        return None
    return project if Path(params_path).resolve() == project / "params.yaml" else None


def dvc_executable(project: Path) -> str:
    for candidate in (os.environ.get(DVC_ENV), project / ".venv-dvc" / "bin" / "dvc", shutil.which("dvc")):
        if candidate and Path(candidate).is_file():
            return str(candidate)
    raise DvcError(f"no dvc executable: set {DVC_ENV}, or run `make setup` (it creates .venv-dvc)")


def record_in_dvc(params_path: str | Path, params: Params, root: Path) -> list[str]:
    """``dvc commit`` the stages that are up to date by their lineage records; returns their names (none
    when the run is not DVC's project, see :func:`dvc_project`)."""
    project = dvc_project(params_path, root)
    if project is None:
        return []
    names = [name for name, stage in STAGES.items() if up_to_date(stage, params, root) is not None]
    if not names:
        return []
    cmd = [dvc_executable(project), "commit", "--force", "--quiet", *names]
    env = {**os.environ, "DVC_NO_ANALYTICS": "1"}
    try:
        res = subprocess.run(
            cmd, cwd=project, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL, check=False
        )
    except OSError as e:
        raise DvcError(f"{' '.join(cmd[:2])}: {e}") from e
    if res.returncode != 0:
        raise DvcError(
            f"dvc commit of {', '.join(names)} failed: {(res.stderr or res.stdout).strip()[-2000:]}"
        )
    return names


#: the header of the generated ``dvc.yaml``
_HEADER = (
    "# Generated from the stage table (orchestra/stages.py) by `orchestra dvc-yaml --write`; do not edit.\n"
    "# One DVC stage per Dagster asset; each calls the same library code as the asset.\n"
)


def dvc_yaml(data_dir: str = "data") -> str:
    """``dvc.yaml`` for the stage table: each stage's command, what it reads (upstream outputs, its code,
    other inputs under the data folder), its params and its outputs."""
    lines = [_HEADER.rstrip("\n"), "stages:"]
    for name, stage in STAGES.items():
        deps = [f"{data_dir}/{up}" for up in stage.upstream] + list(code_paths(stage))
        deps += [f"{data_dir}/{path}" for path in stage.inputs]
        lines += [f"  {name}:", f"    cmd: .venv/bin/orchestra stage {name}", "    deps:"]
        lines += [f"      - {d}" for d in deps]
        lines += ["    params:", *(f"      - {k}" for k in stage.params), "    outs:"]
        if stage.resumable:
            lines += [
                f"      - {data_dir}/{name}:",
                "          persist: true  # a killed run resumes from its checkpoints",
            ]
        else:
            lines.append(f"      - {data_dir}/{name}")
        if stage.metrics:
            lines.append("    metrics:")
            lines += [
                f"      - {data_dir}/{m}  # cached: `dvc metrics diff` reads any committed dvc.lock's"
                for m in stage.metrics
            ]
    return "\n".join(lines) + "\n"
