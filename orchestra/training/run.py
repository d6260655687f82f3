"""One entry point per recipe (sft, dagrpo, grpo): the stages, `orchestra train` and the benches call it."""

from __future__ import annotations

import json
from pathlib import Path

from orchestra.config import Params
from orchestra.errors import StageError
from orchestra.io import atomic_write_text
from orchestra.training.common import RECIPES, TrainResult

__all__ = ["train_recipe"]


def train_recipe(recipe: str, params: Params, root: Path) -> TrainResult:
    """Train ``recipe`` on the data under ``root``, publish ``root/policy_<recipe>/`` (model,
    summary.json, val_decisions.jsonl) and return what it measured."""
    if recipe == "sft":
        from orchestra.training.sft import train_sft as fn
    elif recipe == "dagrpo":
        from orchestra.training.grpo import train_dagrpo as fn
    elif recipe == "grpo":
        from orchestra.training.outcome import train_grpo as fn
    else:
        raise StageError(f"unknown recipe {recipe!r}; valid: {', '.join(RECIPES)}")
    from orchestra.training.dist import is_main, world_size

    result = fn(params, Path(root))
    if is_main():  # one summary however many processes trained
        summary = {**result.summary(), "processes": world_size()}
        atomic_write_text(result.model_dir.parent / "summary.json", json.dumps(summary, indent=2) + "\n")
    return result
