"""`orchestra tools ...`: list the agent's tools and run one from the command line."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import typer

from orchestra.cli_common import fail
from orchestra.errors import OrchestraError, ToolError

app = typer.Typer(no_args_is_help=True, add_completion=False, help="List the agent's tools and run one.")


def parse_args(pairs: list[str], schema: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``k=v`` pairs; a value that parses as JSON is used as such, anything else stays a string, and so
    does every value of an argument ``schema`` declares a string (``label=2021`` is the text '2021')."""
    props: Mapping[str, Any] = (schema or {}).get("properties", {})
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ToolError(f"--arg {pair!r}: expected KEY=VALUE")
        if props.get(key, {}).get("type") == "string":
            out[key] = value
            continue
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


@app.command("list")
def list_tools(
    as_json: bool = typer.Option(False, "--json", help="name, description and input schema"),
) -> None:
    """Every tool by name with its one-line description."""
    from orchestra.tools.registry import tool_classes

    try:
        classes = tool_classes()
    except OrchestraError as e:
        raise fail(str(e)) from e
    if as_json:
        specs = [
            {"name": c.name, "description": c.description, "input_schema": c.input_schema} for c in classes
        ]
        typer.echo(json.dumps(specs, indent=2, ensure_ascii=False))
        return
    width = max(len(c.name) for c in classes)
    for c in classes:
        typer.echo(f"{c.name:<{width}}  {c.description.split('. ')[0].rstrip('.')}")


def _pages(world: Path | None, params_file: Path) -> tuple[Any, Any]:
    """(page store, tool params): --world if given, else the seed_tasks output of params.yaml's data dir."""
    from orchestra.config import ToolParams, data_root, load_params
    from orchestra.stages import SEED_TASKS
    from orchestra.tools.pages import PageStore
    from orchestra.tools.registry import has_pages

    params = load_params(params_file) if params_file.is_file() else None
    tools = params.tools if params is not None else ToolParams()
    if world is not None:
        return PageStore.from_world(world), tools
    default = (data_root(params_file, params) if params is not None else Path("data").resolve()) / SEED_TASKS
    if has_pages(default):
        return PageStore.from_world(default), tools
    return PageStore.empty(
        f"no world pages at {default} (run `orchestra stage seed_tasks` or pass --world)"
    ), tools


@app.command("run")
def run_tool(
    name: str = typer.Argument(..., help="tool name (see `orchestra tools list`)"),
    input_path: Path | None = typer.Option(None, "--input", "-i", help="the media file (the tool's `path`)"),
    arg: list[str] = typer.Option([], "--arg", "-a", help="KEY=VALUE, repeatable; JSON values are parsed"),
    world: Path | None = typer.Option(
        None, "--world", "-w", help="world folder with kb/pages.jsonl [default: data/seed_tasks]"
    ),
    params_file: Path = typer.Option(
        Path("params.yaml"), "--params", "-p", help="tools: section, if present"
    ),
    as_json: bool = typer.Option(False, "--json", help="print the whole Observation as JSON"),
) -> None:
    """Run one tool and print what the agent would read; exit 1 when the tool reports a failure."""
    from orchestra.tools.registry import registry_for_pages

    try:
        with registry_for_pages(*_pages(world, params_file)) as registry:
            tool = registry.get(name)
            kwargs = parse_args(arg, tool.input_schema)
            if input_path is not None:
                if "path" not in tool.input_schema.get("properties", {}):
                    props = ", ".join(tool.input_schema.get("properties", {}))
                    raise ToolError(f"tool {name} takes no --input (its arguments: {props}); use --arg")
                kwargs["path"] = str(input_path)
            obs = tool(**kwargs)
    except OrchestraError as e:
        raise fail(str(e)) from e
    typer.echo(obs.model_dump_json(indent=2) if as_json else obs.text)
    if not obs.ok:
        raise typer.Exit(code=1)
