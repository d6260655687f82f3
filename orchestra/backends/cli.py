"""`orchestra backends list`: the expert pool (its `calibrate` command: orchestra.evaluation.cli)."""

from __future__ import annotations

from pathlib import Path

import typer

from orchestra.cli_common import fail
from orchestra.errors import OrchestraError

app = typer.Typer(no_args_is_help=True, add_completion=False, help="The expert pool and its calibration.")


def _params(path: Path):  # type: ignore[no-untyped-def]
    from orchestra.config import Params, load_params

    return load_params(path) if path.is_file() else Params()


@app.command("list")
def list_backends(params_file: Path = typer.Option(Path("params.yaml"), "--params")) -> None:
    """The pool: every expert with its kind, mode, skill levels, price and latency."""
    from rich.console import Console
    from rich.table import Table

    from orchestra.backends.registry import expert_specs

    try:
        specs = expert_specs(_params(params_file).agent)
    except OrchestraError as e:
        raise fail(e) from e
    table = Table("expert", "kind", "mode", "skills", "price/call", "latency s")
    for name, s in sorted(specs.items()):
        skills = ", ".join(f"{k} {v:.2f}" for k, v in sorted(s.skills.items(), key=lambda kv: -kv[1]))
        table.add_row(name, s.kind, s.mode or "-", skills, f"{s.price.per_call:g}", f"{s.latency.base_s:g}")
    Console().print(table)
