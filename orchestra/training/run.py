"""One entry point per recipe (sft, dagrpo, grpo): the stages, `orchestra train` and the benches call it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from orchestra.config import Params
from orchestra.data.store import write_run_record
from orchestra.errors import StageError
from orchestra.io import atomic_write_text
from orchestra.training.common import RECIPES, TrainResult

__all__ = ["policy_dagrpo", "policy_grpo", "policy_sft", "train_recipe"]


def train_recipe(recipe: str, params: Params, root: Path) -> TrainResult:
    """Train ``recipe`` on the data under ``root``, publish ``root/policy_<recipe>/`` (model,
    summary.json, val_decisions.jsonl) and return what it measured (its MLflow run, wall seconds and
    the model's path go to the folder's run record, ``_run/run.json``, not to summary.json)."""
    if recipe == "sft":
        from orchestra.training.sft import train_sft as fn
    elif recipe == "dagrpo":
        from orchestra.training.dagrpo import train_dagrpo as fn
    elif recipe == "grpo":
        from orchestra.training.grpo import train_grpo as fn
    else:
        raise StageError(f"unknown recipe {recipe!r}; valid: {', '.join(RECIPES)}")
    from orchestra.training.dist import is_main, world_size

    result = fn(params, Path(root))
    if is_main():  # one summary however many processes trained
        summary = result.summary()
        run = summary.pop("run")
        summary["processes"] = world_size()
        atomic_write_text(result.model_dir.parent / "summary.json", json.dumps(summary, indent=2) + "\n")
        write_run_record(root, result.model_dir.parent.name, run)  # the stage's runner adds to it
    return result


def policy_sft(params: Params, root: Path) -> dict[str, Any]:
    """The policy_sft stage."""
    return train_recipe("sft", params, root).summary()


def policy_dagrpo(params: Params, root: Path) -> dict[str, Any]:
    """The policy_dagrpo stage."""
    return train_recipe("dagrpo", params, root).summary()


def policy_grpo(params: Params, root: Path) -> dict[str, Any]:
    """The policy_grpo stage."""
    return train_recipe("grpo", params, root).summary()
