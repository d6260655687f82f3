"""`orchestra ...`: the command line over the library (params, stages, world, tools, backends, answer)."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from orchestra.agent import cli as agent_cli
from orchestra.backends.cli import app as backends_app
from orchestra.cli_common import fail
from orchestra.errors import OrchestraError
from orchestra.evaluation import cli as eval_cli
from orchestra.tools.cli import app as tools_app
from orchestra.world.cli import app as world_app

app = typer.Typer(no_args_is_help=True, add_completion=False, help="Omni-modal agent orchestration pipeline.")
params_app = typer.Typer(no_args_is_help=True, help="Inspect and check params.yaml.")
app.add_typer(params_app, name="params")
app.add_typer(world_app, name="world", help="Generate and replay the procedural omni-modal world.")
app.add_typer(tools_app, name="tools", help="List the tools and run one on a file.")
backends_app.command("calibrate")(eval_cli.calibrate_cmd)
app.add_typer(backends_app, name="backends", help="The expert pool: list it, calibrate its skill vectors.")
app.command("answer")(agent_cli.answer)
app.command("serve")(agent_cli.serve)
app.command("eval")(eval_cli.eval_command)


@params_app.command("check")
def params_check(file: Path = typer.Argument(Path("params.yaml"), help="params file to validate")) -> None:
    """Validate a params file; exit 0 when valid, 2 with every problem named by key path."""
    from orchestra.config import load_params

    try:
        load_params(file)
    except OrchestraError as e:
        raise fail(e) from e
    typer.echo(f"{file}: ok")


@params_app.command("show")
def params_show(file: Path = typer.Argument(Path("params.yaml"))) -> None:
    """Print the effective params (defaults filled in) as JSON."""
    from orchestra.config import load_params

    try:
        params = load_params(file)
    except OrchestraError as e:
        raise fail(e) from e
    typer.echo(json.dumps(params.model_dump(mode="json"), indent=2))


@app.command("report")
def report(
    params_file: Path = typer.Option(Path("params.yaml"), "--params", "-p"),
    rescore: bool = typer.Option(
        True, "--eval/--no-eval", help="evaluate the ladder first (benchmark_scores), or only re-render"
    ),
) -> None:
    """The papers' tables on the embedded benchmark: run benchmark_scores (every row of eval.rows),
    then report (data/report/report.md, plots, an MLflow run); print the Markdown."""
    from orchestra.config import data_root, load_params
    from orchestra.data.store import stage_dir
    from orchestra.pipeline.run import run_stage
    from orchestra.stages import BENCHMARK_SCORES, REPORT

    try:
        params = load_params(params_file)
        root = data_root(params_file, params)
        if rescore:
            run_stage(BENCHMARK_SCORES, params, root)
        run_stage(REPORT, params, root)
    except (OrchestraError, OSError) as e:
        raise fail(e) from e
    typer.echo((stage_dir(root, REPORT) / "report.md").read_text(encoding="utf-8"))


@app.command("stage")
def stage(
    name: str = typer.Argument(..., help="stage (= Dagster asset) name, e.g. seed_tasks"),
    params_file: Path = typer.Option(Path("params.yaml"), "--params", "-p"),
    no_cache: bool = typer.Option(False, "--no-cache", help="run every tool cold (tools.cache: false)"),
    force: bool = typer.Option(False, "--force", help="run even when its lineage record says up to date"),
    shard: list[int] = typer.Option(None, "--shard", help="benchmark_scores: only these shards (repeatable)"),
) -> None:
    """Run one pipeline stage outside Dagster (this is what each DVC stage calls); a stage whose
    lineage record matches its params, code and inputs is not recomputed."""
    from orchestra.config import data_root, load_params
    from orchestra.pipeline.run import run_stage

    try:
        params = load_params(params_file)
        if no_cache:
            params = params.model_copy(update={"tools": params.tools.model_copy(update={"cache": False})})
        meta = run_stage(name, params, data_root(params_file, params), shard or None, force)
    except OrchestraError as e:
        raise fail(e) from e
    typer.echo(json.dumps(meta, indent=2, ensure_ascii=False))


@app.command("dvc-yaml")
def dvc_yaml(
    write: Path = typer.Option(None, "--write", help="write it to this file (dvc.yaml), not to stdout"),
) -> None:
    """dvc.yaml as the stage table (orchestra/stages.py) says: one DVC stage per pipeline stage, with what
    it reads, its params and its outputs."""
    from orchestra.io import atomic_write_text
    from orchestra.pipeline.dvc import dvc_yaml as render

    if write is None:
        typer.echo(render(), nl=False)
    else:
        atomic_write_text(write, render())
        typer.echo(f"wrote {write}")


@app.command("train")
def train(
    recipe: str = typer.Option(
        ..., "--recipe", "-r", help="sft | grpo (outcome, Maestro) | dagrpo (Orchestra-o1)"
    ),
    params_file: Path = typer.Option(Path("params.yaml"), "--params", "-p"),
) -> None:
    """Train the policy with one recipe (grpo and dagrpo start from policy_sft); resumes a killed run
    from its last checkpoint and records its lineage (as the stage would). Prints the summary: steps,
    validation metrics, MLflow run id."""
    from orchestra.config import data_root, load_params
    from orchestra.data.store import policy_stage
    from orchestra.pipeline.run import run_stage

    try:
        params = load_params(params_file)
        summary = run_stage(policy_stage(recipe), params, data_root(params_file, params), force=True)
    except OrchestraError as e:
        raise fail(e) from e
    typer.echo(json.dumps(summary, indent=2))


@app.command("audit")
def audit(
    row: list[str] = typer.Option(
        None, "--row", help="a benchmark_scores row (repeatable); default: every trained one"
    ),
    params_file: Path = typer.Option(Path("params.yaml"), "--params", "-p"),
) -> None:
    """Walk each benchmark score back to the seeds (score → checkpoint → MLflow run and registered model
    version → decision_samples → ... → seed_tasks) and flag every link that no longer matches; exits 1
    when one is broken."""
    from rich.console import Console
    from rich.table import Table

    from orchestra.config import data_root, load_params
    from orchestra.pipeline.audit import audit as run_audit

    try:
        params = load_params(params_file)
        links = run_audit(params, data_root(params_file, params), row or None)
    except OrchestraError as e:
        raise fail(e) from e
    table = Table("chain", "link", "", "detail", title="lineage audit")
    for link in links:
        table.add_row(link.chain, link.link, "ok" if link.ok else "[bold red]BROKEN[/]", link.detail)
    Console(width=200).print(table)
    broken = [link for link in links if not link.ok]
    typer.echo(f"{len(links) - len(broken)} of {len(links)} links hold, {len(broken)} broken")
    if broken:
        raise typer.Exit(1)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
