"""`orchestra eval` (a system and policy over a benchmark) and `orchestra backends calibrate`."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from orchestra.cli_common import fail
from orchestra.errors import OrchestraError


def eval_command(
    benchmark: Path = typer.Option(..., "--benchmark", "-b", help="an OmniGAIA-format JSON task list"),
    out: Path = typer.Option(..., "--out", "-o", help="output folder (a rerun resumes it)"),
    media_root: Path | None = typer.Option(
        None, "--media-root", help="where the media paths point (default: BENCHMARK's folder/media)"
    ),
    world: Path | None = typer.Option(
        None, "--world", help="folder with kb/pages.jsonl (default: BENCHMARK's folder, if it has kb/)"
    ),
    system: str = typer.Option("orchestra", "--system", "-s", help="orchestra | linear | react | maestro"),
    policy: str = typer.Option(
        "oracle",
        "--policy",
        "-p",
        help="oracle | untrained | checkpoint:DIR | openai:MODEL | a key of params providers",
    ),
    limit: int | None = typer.Option(None, "--limit", min=1, help="only the first N tasks"),
    concurrency: int = typer.Option(1, "--concurrency", min=1, max=64, help="tasks run at once"),
    samples: int = typer.Option(1, "--samples", min=1, max=64, help="trajectories per task (majority vote)"),
    temperature: float = typer.Option(0.7, "--temperature", min=0.0, help="sampling with --samples > 1"),
    judge: str | None = typer.Option(None, "--judge", help="a params provider (openai) as the LLM judge"),
    registry: Path | None = typer.Option(
        None, "--registry", help="an expert registry file instead of params' (plug-and-play experts)"
    ),
    pool: int | None = typer.Option(None, "--pool", min=1, help="keep only the first N experts of the pool"),
    max_turns: int = typer.Option(8, "--max-turns", min=1, max=64),
    traces: bool = typer.Option(
        False, "--traces", help="an MLflow trace per item in params' tracking store (once per item)"
    ),
    params_file: Path = typer.Option(Path("params.yaml"), "--params", help="agent/tools/providers sections"),
) -> None:
    """Run a system and policy over a benchmark: per-item JSONL, results.json, summary.json in OUT."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from orchestra.config import Params, data_root, load_params
    from orchestra.evaluation.runner import EvalConfig, run_eval

    try:
        params = load_params(params_file) if params_file.is_file() else Params()
        cfg = EvalConfig(
            benchmark=benchmark,
            out=out,
            system=system,
            policy=policy,
            media_root=media_root,
            world=world,
            limit=limit,
            concurrency=concurrency,
            samples=samples,
            temperature=temperature,
            judge=judge,
            registry=registry,
            pool=pool,
            max_turns=max_turns,
            traces=traces,
            data_dir=data_root(params_file, params) if params_file.is_file() else None,
        )
        right = [0, 0]
        with Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()
        ) as bar:
            job = bar.add_task(f"{system}/{policy}", total=None)

            def on_item(item: dict, done: int, total: int) -> None:
                right[0] += item["em_score"]
                right[1] += 1
                acc = f"EM {right[0] / right[1]:.3f} over {right[1]} run now"
                bar.update(job, completed=done, total=total, description=f"{system}/{policy} {acc}")

            summary = run_eval(params, cfg, on_item=on_item)
    except (OrchestraError, OSError) as e:
        raise fail(e) from e
    acc = summary["accuracy"]
    line = {
        "n": summary["n"],
        "em": round(acc["em"]["mean"], 4),
        "em_ci": [round(x, 4) for x in acc["em"]["ci"]],
        "judge": None if acc["judge"] is None else round(acc["judge"]["mean"], 4),
        "not_run": summary["not_run"]["count"],
        "summary": str(out / "summary.json"),
    }
    typer.echo(json.dumps(line))


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

    from orchestra.backends.registry import default_registry_path, registry_for, write_registry
    from orchestra.config import Params, WorldParams, load_params
    from orchestra.evaluation.calibrate import calibrate, calibrated_registry

    try:
        params = load_params(params_file) if params_file.is_file() else Params()
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
