"""Training cost per optimizer step: outcome GRPO (full rollouts) over DA-GRPO (decision prompts).

Usage: python bench/train_cost.py [--data data] [--params params.yaml] [--steps 4]

Both recipes start from ``data/policy_sft/model`` with the params' group size and batch (outcome
GRPO takes DA-GRPO's, so the comparison is fair), run ``--steps`` optimizer steps each in one
process, into a scratch data root (the project's data is only read) and a scratch MLflow store.
Seconds per step are the median of the recipe's ``step_wall_s`` (first step dropped: model and
tool start-up). Outcome GRPO runs twice: perception cache off (cold tools: what a rollout costs),
then on (the project's warm cache). DA-GRPO runs no sub-agent, so the cache does not matter to it.
Prints both lines and ``RESULT grpo_over_dagrpo=R`` (cache off; the paper's point: R >= 5).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

from orchestra.data.store import SAMPLES_FILE
from orchestra.stages import DECISION_SAMPLES, POLICY_SFT, SEED_TASKS, VERIFIED_SAMPLES


def _scratch(root: Path, tmp: Path, val: int, cache: bool) -> Path:
    out = tmp / "data"
    out.mkdir()
    for name in (SEED_TASKS, VERIFIED_SAMPLES, POLICY_SFT):
        (out / name).symlink_to((root / name).resolve())
    if cache and (root / "cache").is_dir():
        (out / "cache").symlink_to((root / "cache").resolve())
    (out / DECISION_SAMPLES).mkdir()
    kept, n_val = [], 0
    with (root / DECISION_SAMPLES / SAMPLES_FILE).open(encoding="utf-8") as fh:
        for line in fh:
            split = json.loads(line)["split"]
            if split == "val":
                n_val += 1
                if n_val > val:
                    continue
            kept.append(line)
    (out / DECISION_SAMPLES / SAMPLES_FILE).write_text("".join(kept), encoding="utf-8")
    return out


def seconds_per_step(recipe: str, params, root: Path, steps: int, cache: bool) -> float:  # type: ignore[no-untyped-def]
    import mlflow

    from orchestra.training.run import train_recipe

    with tempfile.TemporaryDirectory(prefix=".bench-", dir=root.parent) as tmp:
        data = _scratch(root, Path(tmp), val=4, cache=cache)
        db = f"sqlite:///{Path(tmp) / 'mlflow.db'}"
        gp = params.train.dagrpo
        same = {
            k: getattr(gp, k)
            for k in (
                "num_generations",
                "per_device_batch_size",
                "steps_per_generation",
                "max_completion_length",
            )
        }
        train = params.train.model_copy(
            update={
                recipe: getattr(params.train, recipe).model_copy(
                    update={**same, "max_steps": steps, "save_steps": steps}
                )
            }
        )
        p = params.model_copy(
            update={
                "train": train,
                "tools": params.tools.model_copy(update={"cache": cache}),
                "tracking": params.tracking.model_copy(update={"mlflow_uri": db}),
            }
        )
        result = train_recipe(recipe, p, data)
        history = mlflow.MlflowClient(db).get_metric_history(result.run_id or "", "step_wall_s")
        times = [m.value for m in sorted(history, key=lambda m: m.step)][1:] or [m.value for m in history]
        return statistics.median(times)


def main() -> int:
    from orchestra.config import data_root, load_params

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=None)
    ap.add_argument("--params", type=Path, default=Path("params.yaml"))
    ap.add_argument("--steps", type=int, default=4)
    args = ap.parse_args()
    params = load_params(args.params)
    root = (args.data or data_root(args.params, params)).resolve()
    if not (root / POLICY_SFT / "model" / "config.json").is_file():
        print(f"{root}/policy_sft/model is missing: run make pipeline first")
        return 1
    gp = params.train.dagrpo
    print(f"group size {gp.num_generations}, batch {gp.per_device_batch_size}, {args.steps} steps each")
    dag = seconds_per_step("dagrpo", params, root, args.steps, cache=False)
    cold = seconds_per_step("grpo", params, root, args.steps, cache=False)
    warm = seconds_per_step("grpo", params, root, args.steps, cache=True)
    print(f"cache off: outcome GRPO {cold:.2f} s/step, DA-GRPO {dag:.2f} s/step, ratio {cold / dag:.2f}")
    print(f"cache on:  outcome GRPO {warm:.2f} s/step, DA-GRPO {dag:.2f} s/step, ratio {warm / dag:.2f}")
    ratio = cold / dag
    print(f"RESULT grpo_over_dagrpo={ratio:.2f} (cache off; expect >= 5)")
    return 0 if ratio >= 5 else 1


if __name__ == "__main__":
    sys.exit(main())
