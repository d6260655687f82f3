"""`orchestra backends list|calibrate`: the expert pool, and measured skill vectors into a registry file."""

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


@app.command("calibrate")
def calibrate_cmd(
    params_file: Path = typer.Option(Path("params.yaml"), "--params"),
    seed: int = typer.Option(4242, "--seed", help="the calibration world's seed (never the benchmark's)"),
    n_seeds: int = typer.Option(120, "--n-seeds", min=1, help="tasks of the calibration world"),
    out: Path | None = typer.Option(None, "--out", help="registry file to write (default: the one in use)"),
    price_per_s: float = typer.Option(0.01, "--price-per-s", min=0, help="builtin price per compute second"),
) -> None:
    """Run every builtin expert on a calibration world; write measured skill levels and latencies."""
    from rich.console import Console
    from rich.progress import Progress
    from rich.table import Table

    from orchestra.backends.calibrate import calibrate, calibrated_registry
    from orchestra.backends.registry import default_registry_path, registry_for, write_registry
    from orchestra.config import WorldParams

    try:
        params = _params(params_file)
        registry = registry_for(params.agent)
        world = WorldParams(
            seed=seed, n_seeds=n_seeds, n_entities=max(60, n_seeds), noise=params.seed.world.noise
        )
        with Progress(transient=True) as bar:
            job = bar.add_task("calibrating", total=None)
            items = calibrate(
                params.agent, registry, world, progress=lambda k, n: bar.update(job, completed=k, total=n)
            )
        new = calibrated_registry(registry, items, world, price_per_s)
        target = out or Path(params.agent.registry or default_registry_path())
        header = (
            "Orchestra expert registry: Level-1 skills (with their Level-2 routines) and the expert pool.\n"
            "Skill levels of the builtin experts are measured accuracies: `orchestra backends calibrate` "
            "rewrites them."
        )
        write_registry(target, new, header)
    except OrchestraError as e:
        raise fail(e) from e
    tau = params.agent.escalation_confidence
    table = Table(
        "expert", "skill", "accuracy", "p50 s", "n", f"conf < {tau:g}", f"accuracy, conf >= {tau:g}"
    )
    for name, spec in sorted(new.experts.items()):
        for skill, m in sorted(spec.measured.items()):
            rated = [i for i in items if i.expert == name and i.skill == skill and i.confidence is not None]
            sure = [i for i in rated if (i.confidence or 0.0) >= tau]
            low = f"{1 - len(sure) / len(rated):.2f}" if rated else "-"
            kept = f"{sum(i.correct for i in sure) / len(sure):.3f}" if sure else "-"
            table.add_row(name, skill, f"{m.accuracy:.3f}", f"{m.p50_s:.3f}", str(m.n), low, kept)
    Console().print(table)
    typer.echo(f"wrote {target} ({len(items)} items, world seed {seed})")
