"""`orchestra world ...`: generate a procedural world and replay its seed tasks from the command line."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from orchestra.cli_common import fail
from orchestra.errors import OrchestraError

app = typer.Typer(no_args_is_help=True, add_completion=False, help="The procedural omni-modal world.")
out = Console(highlight=False)


def _world_params(params_file: Path | None, seed: int | None, n_seeds: int | None) -> Any:
    from orchestra.config import WorldParams, load_params

    if params_file is None and Path("params.yaml").is_file():
        params_file = Path("params.yaml")
    world = load_params(params_file).seed.world if params_file is not None else WorldParams()
    update = {k: v for k, v in (("seed", seed), ("n_seeds", n_seeds)) if v is not None}
    if not update:
        return world
    from orchestra.config import parse_params

    data = {"seed": {"world": {**world.model_dump(mode="json"), **update}}}
    return parse_params(data, "command line").seed.world


def print_distribution(summary: dict[str, Any]) -> None:
    """The distribution report: counts by category, Level, task_type and tool."""
    table = Table(title=f"world seed {summary['seed']}: {summary['rows']} tasks")
    table.add_column("facet")
    table.add_column("value")
    table.add_column("count", justify="right")
    for facet, counts in summary["distribution"].items():
        for i, (value, n) in enumerate(counts.items()):
            table.add_row(facet if i == 0 else "", value, str(n))
    out.print(table)


@app.command("generate")
def generate(
    out_dir: Path = typer.Option(..., "--out", help="output folder (replaced whole if it holds a world)"),
    seed: int | None = typer.Option(None, "--seed", help="override seed.world.seed"),
    n_seeds: int | None = typer.Option(None, "--n-seeds", help="override seed.world.n_seeds"),
    params_file: Path | None = typer.Option(
        None, "--params", "-p", help="params file (default: ./params.yaml)"
    ),
) -> None:
    """Write tasks.json (OmniGAIA format), media/, kb/ and truth/ into --out."""
    from orchestra.errors import WorldError
    from orchestra.io import atomic_dir
    from orchestra.world import generate_world

    start = time.perf_counter()
    try:
        params = _world_params(params_file, seed, n_seeds)
        if out_dir.exists() and any(out_dir.iterdir()) and not (out_dir / "tasks.json").is_file():
            raise WorldError(f"{out_dir} is not empty and holds no world; refusing to replace it")
        with atomic_dir(out_dir) as tmp:
            summary = generate_world(params, tmp)
    except OrchestraError as e:
        raise fail(e) from e
    print_distribution(summary)
    out.print(
        f"{summary['media_files']} media files, {summary['media_bytes'] / 1e6:.1f} MB; "
        f"{summary['pages']} pages; written to {out_dir} in {time.perf_counter() - start:.1f} s"
    )


@app.command("replay")
def replay_cmd(world_dir: Path = typer.Argument(..., help="a generated world folder")) -> None:
    """Re-execute every seed's solution program against the world's ground truth."""
    from orchestra.world.replay import replay_world

    try:
        result = replay_world(world_dir)
    except OrchestraError as e:
        raise fail(e) from e
    out.print(f"{result['replayed']} tasks replayed: every answer matches")
