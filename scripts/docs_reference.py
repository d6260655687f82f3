"""Write the docs site's reference pages from the code: every params.yaml key (from the pydantic models),
every `orchestra` command and option (from the CLI), the record schemas, and the Dagster assets with
their checks. `make docs` runs it before `mkdocs build`; the pages are not kept in git.

    python scripts/docs_reference.py --out docs/reference
"""

from __future__ import annotations

import argparse
import json
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo

_BOUNDS = {"ge": "≥", "gt": ">", "le": "≤", "lt": "<", "min_length": "min length", "max_length": "max length"}


def _cell(text: Any) -> str:
    """Text for a Markdown table cell: pipes escaped, one line, and ``<...>`` shown rather than read as HTML
    (outside code spans, which show it as it is)."""
    parts = str(text).replace("\n", " ").split("`")
    parts = [p if i % 2 else p.replace("<", "&lt;").replace(">", "&gt;") for i, p in enumerate(parts)]
    return "`".join(parts).replace("|", "\\|")


def _type(annotation: Any) -> str:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _type(args[0])
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type(a) for a in args)
    if origin is typing.Literal:
        return " or ".join(json.dumps(a) for a in args)
    if origin is not None:
        return f"{getattr(origin, '__name__', str(origin))}[{', '.join(_type(a) for a in args)}]"
    if annotation is type(None):
        return "None"
    return getattr(annotation, "__name__", str(annotation).replace("typing.", ""))


def _default(field: FieldInfo) -> str:
    if field.default_factory is not None:
        value = field.default_factory()  # type: ignore[call-arg]
    elif field.is_required():
        return "required"
    else:
        value = field.default
    if isinstance(value, BaseModel):
        return "(section)"
    try:
        return f"`{json.dumps(value, default=str)}`"
    except TypeError:
        return f"`{value!r}`"


def _bounds(field: FieldInfo) -> str:
    out = []
    for meta in field.metadata:
        for attr, sign in _BOUNDS.items():
            if getattr(meta, attr, None) is not None:
                out.append(f"{sign} {getattr(meta, attr)}")
    return ", ".join(out)


def _model_in(annotation: Any) -> tuple[type[BaseModel] | None, str]:
    """The model a field holds: itself, or the values of a ``dict[str, Model]`` (suffix ``.<name>``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, ""
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is dict and len(args) == 2:
        inner, _ = _model_in(args[1])
        return inner, ".<name>"
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        models = [m for a in args if (m := _model_in(a)[0]) is not None]
        return (models[0], "") if len(models) == 1 else (None, "")
    return None, ""


def params_rows(model: type[BaseModel], prefix: str = "") -> Iterator[tuple[str, FieldInfo]]:
    """Every key of ``model`` (dotted), nested sections and ``dict`` values of sections walked into."""
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        inner, suffix = _model_in(field.annotation)
        yield key, field
        if inner is not None:
            yield from params_rows(inner, f"{key}{suffix}.")


def params_page() -> str:
    from orchestra.config import Params

    lines = [
        "# params.yaml reference",
        "",
        "Every key `params.yaml` takes, generated from the pydantic models in `orchestra/config/`. "
        "`orchestra params check FILE` validates a file against them; `orchestra params show` prints "
        "the effective values. A key written `a.<name>.b` belongs to each entry of the mapping `a`.",
        "",
        "| key | type | default | bounds | description |",
        "|---|---|---|---|---|",
    ]
    for key, field in params_rows(Params):
        cells = [
            f"`{key}`",
            _type(field.annotation),
            _default(field),
            _bounds(field),
            field.description or "",
        ]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def cli_page() -> str:
    import typer

    from orchestra.cli import app

    lines = ["# `orchestra` command reference", "", "Generated from the CLI (`orchestra --help`)."]

    def walk(cmd: Any, path: list[str]) -> None:  # typer's own click types: duck-typed
        if path:
            lines.extend(["", f"## `{' '.join(path)}`", "", _cell(cmd.help or "").strip(), ""])
            params = [p for p in cmd.params if p.name != "help"]
            if params:
                lines.extend(["| argument / option | type | default | help |", "|---|---|---|---|"])
                for p in params:
                    names = ", ".join(p.opts) if p.param_type_name == "option" else p.name.upper()
                    default = "" if p.default is None or callable(p.default) else f"`{p.default}`"
                    text = getattr(p, "help", "") or ""
                    kind = getattr(getattr(p, "type", None), "name", "")
                    lines.append(f"| `{names}` | {kind} | {_cell(default)} | {_cell(text)} |")
        if getattr(cmd, "commands", None):
            for name in sorted(cmd.commands):
                walk(cmd.commands[name], [*path, name] if path else ["orchestra", name])

    walk(typer.main.get_command(app), [])
    return "\n".join(lines) + "\n"


def schemas_page() -> str:
    import orchestra.schemas as schemas

    lines = [
        "# Record schemas",
        "",
        "The records each stage writes (`orchestra/schemas.py`), one pydantic model each.",
    ]
    for name in sorted(schemas.__all__):
        model = getattr(schemas, name)
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            continue
        doc = (model.__doc__ or "").strip().split("\n\n")[0]
        lines.extend(["", f"## `{name}`", "", _cell(doc), "", "| field | type | default |", "|---|---|---|"])
        for field_name, field in model.model_fields.items():
            lines.append(f"| `{field_name}` | {_cell(_type(field.annotation))} | {_cell(_default(field))} |")
    return "\n".join(lines) + "\n"


def assets_page() -> str:
    from dagster_project.definitions import defs
    from orchestra.stages import STAGES

    graph = {k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()}
    lines = [
        "# Stages and Dagster assets",
        "",
        "The stage table (`orchestra/stages.py`): each stage is one Dagster asset of the code location "
        "`dagster_project.definitions`, one DVC stage of `dvc.yaml` and one folder `data/<stage>/`. What "
        "it reads (upstream stages and params keys; reading another key is an error), its group, and the "
        "checks on it (blocking checks stop what is downstream).",
        "",
        "| stage | group | reads | params | checks | description |",
        "|---|---|---|---|---|---|",
    ]
    for name, stage in STAGES.items():
        assert name in graph, name  # the code location is made from the same table
        checks = ", ".join(f"`{c.name}` (blocking)" for c in stage.checks) or "-"
        reads = ", ".join(f"`{u}`" for u in stage.upstream) or "-"
        params = ", ".join(f"`{k}`" for k in stage.params)
        cells = [f"`{name}`", stage.group, reads, params, checks, stage.description]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    jobs = ", ".join(f"`{j.name}`" for j in defs.jobs or [])  # type: ignore[union-attr]
    lines.extend(["", f"Jobs: {jobs}. Schedule: `weekly_retraining`. Sensor: `incoming_seeds`."])
    return "\n".join(lines) + "\n"


PAGES = {"params.md": params_page, "cli.md": cli_page, "schemas.md": schemas_page, "assets.md": assets_page}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("docs/reference"))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for name, page in PAGES.items():  # the tables take the page's width: no table of contents beside them
        (args.out / name).write_text("---\nhide:\n  - toc\n---\n\n" + page(), encoding="utf-8")
        print(f"wrote {args.out / name}")


if __name__ == "__main__":
    main()
