"""What every recipe shares: the stage folder, resumable checkpoints, trainer arguments, greedy evaluation."""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestra.config import AgentParams, Params
from orchestra.io import atomic_dir, atomic_write_text, dump_json
from orchestra.training.examples import DecisionScore, PolicyView, Prepared, score_decisions
from orchestra.training.policy import save_policy

__all__ = [
    "RECIPES",
    "RecipeRun",
    "RunDirs",
    "TrainResult",
    "base_args",
    "init_policy",
    "prompt_order",
    "wall_budget",
    "file_digest",
    "generate",
    "evaluate_policy",
    "mean_rubric",
    "publish",
    "train_and_publish",
    "validation_metrics",
]

RECIPES = ("sft", "grpo", "dagrpo")

# TRL and the Hub client phone home at start-up; the embedded default never needs the network.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def file_digest(path: Path) -> str:
    """SHA-256 of a file's bytes."""
    h = hashlib.sha256()
    with Path(path).open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def init_policy(root: Path, init: str) -> Path:
    """The policy directory a recipe starts from: ``sft`` (``policy_sft/model``), ``sft@N`` (the SFT
    run's snapshot at step N, ``train.sft.snapshot_steps``) or a directory (relative to ``root``)."""
    from orchestra.data.store import model_dir, policy_stage, stage_dir
    from orchestra.errors import StageError

    if init == "sft":
        path = model_dir(root, "sft")
    elif init.startswith("sft@") and init[4:].isdigit():
        path = stage_dir(root, policy_stage("sft")) / "snapshots" / f"step-{int(init[4:])}"
    else:
        path = root / init
    if not (path / "config.json").is_file():
        hint = f"materialize {policy_stage('sft')} first" if init.startswith("sft") else "a policy directory"
        raise StageError(f"{path}: no policy for init {init!r}; {hint}")
    return path


def prompt_order(n: int, count: int, seed: int) -> list[int]:
    """``count`` indices into ``n`` prompts: shuffled passes by ``seed``, cut to length (a GRPO run
    is one pass over this list, so a resumed run sees the same prompts)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    reps = -(-count // max(1, n))
    return [int(i) for _ in range(reps) for i in rng.permutation(n)][:count]


def wall_budget(t0: float, max_wall_s: float | None) -> Any:
    """A transformers callback that stops training at the first step end past ``t0 + max_wall_s``
    (``time.perf_counter`` seconds; None: never), so arms compared at equal wall-clock stop alike."""
    from transformers import TrainerCallback

    class WallBudget(TrainerCallback):  # type: ignore[misc]
        def on_step_end(self, args: Any, state: Any, control: Any, **_: Any) -> Any:
            from orchestra.training.dist import agree

            if max_wall_s is not None and agree(time.perf_counter() - t0 >= max_wall_s):
                control.should_training_stop = True
                control.should_save = False
            return control

    return WallBudget()


@dataclass(frozen=True)
class RunDirs:
    """``data/policy_<recipe>/``: ``model/`` (the published policy), ``summary.json``, and while a run
    is unfinished ``checkpoints/`` with the fingerprint of what it trains (params, data, start model):
    a run with the same fingerprint resumes from the last checkpoint, any other starts afresh."""

    root: Path

    @property
    def model(self) -> Path:
        return self.root / "model"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    def prepare(self, fingerprint: Mapping[str, Any]) -> bool:
        """Make ``checkpoints/`` for ``fingerprint``; True when it holds a checkpoint to resume."""
        from orchestra.training.dist import barrier, is_main

        stamp = self.checkpoints / "fingerprint.json"
        text = dump_json(dict(fingerprint))
        if is_main():  # the others wait: one process clears and stamps the folder
            if stamp.is_file() and stamp.read_text(encoding="utf-8") != text:
                shutil.rmtree(self.checkpoints)
            self.checkpoints.mkdir(parents=True, exist_ok=True)
            atomic_write_text(stamp, text)
        barrier()
        return any(p.name.startswith("checkpoint-") for p in self.checkpoints.iterdir())

    def run_id(self) -> str | None:
        """The MLflow run of the unfinished attempt these checkpoints belong to."""
        f = self.checkpoints / "mlflow_run_id"
        return f.read_text(encoding="utf-8").strip() or None if f.is_file() else None

    def remember_run(self, run_id: str | None) -> None:
        """Keep the MLflow run of this attempt (the main process's; None on the others)."""
        if run_id is not None:
            atomic_write_text(self.checkpoints / "mlflow_run_id", run_id)

    def finish(self) -> None:
        shutil.rmtree(self.checkpoints, ignore_errors=True)


@dataclass
class TrainResult:
    """What a recipe reports: the published model, steps, final metrics, the MLflow run and the
    registered model version the model became."""

    recipe: str
    model_dir: Path
    steps: int
    samples: int
    metrics: dict[str, float] = field(default_factory=dict)
    run_id: str | None = None
    resumed: bool = False
    wall_s: float = 0.0
    model_version: int | None = None

    def summary(self) -> dict[str, Any]:
        """What was trained (the same for the same inputs), and under ``run`` what this run of it was:
        its MLflow run and model version, whether it resumed, its wall seconds, the model's path."""
        return {
            "recipe": self.recipe,
            "steps": self.steps,
            "rows": self.samples,
            "metrics": self.metrics,
            "run": {
                "model_dir": str(self.model_dir),
                "mlflow_run_id": self.run_id,
                "mlflow_model_version": self.model_version,
                "resumed": self.resumed,
                "wall_s": round(self.wall_s, 1),
            },
        }


def base_args(
    out: Path,
    seed: int,
    learning_rate: float,
    batch_size: int,
    max_steps: int,
    save_steps: int,
    logging: int = 5,
) -> dict[str, Any]:
    """Trainer arguments every recipe shares: CPU unless an accelerator is present, fp32 on CPU (TRL
    defaults to bf16 and gradient checkpointing, both slow there), checkpoints every ``save_steps``
    into ``out`` (the last two kept), TRL reporting to MLflow (the active run, see tracking.py)."""
    import torch

    gpu = torch.cuda.is_available()
    return {
        "output_dir": str(out),
        "seed": seed,
        "data_seed": seed,
        "learning_rate": learning_rate,
        "per_device_train_batch_size": batch_size,
        "max_steps": max_steps,
        "save_strategy": "steps",
        "save_steps": save_steps,
        "save_total_limit": 2,
        "logging_steps": logging,
        "use_cpu": not gpu,
        "bf16": gpu and torch.cuda.is_bf16_supported(),
        "gradient_checkpointing": False,
        "disable_tqdm": True,
        "dataloader_num_workers": 0,
        "report_to": ["mlflow"],
    }


def generate(
    model: Any, tokenizer: Any, prompts: Sequence[list[dict[str, str]]], max_new_tokens: int
) -> list[str]:
    """Greedy completions of chat ``prompts``, 32 at a time: by the lean batched decoder where it
    covers the model (the tokens ``generate()`` gives each prompt alone), else ``generate()`` with
    left padding."""
    import torch

    from orchestra.lm.decoder import LeanDecoder, stop_tokens

    model.eval()
    ids = [
        list(tokenizer.apply_chat_template(p, add_generation_prompt=True, return_dict=True)["input_ids"])
        for p in prompts
    ]
    if not LeanDecoder.covers(model) and all(
        len(i) + max_new_tokens <= model.config.max_position_embeddings for i in ids
    ):
        lean, stop = LeanDecoder(model), stop_tokens(model)
        outs = [
            o
            for k in range(0, len(ids), 32)
            for o in lean.greedy_batch(ids[k : k + 32], max_new_tokens, stop)
        ]
        return list(tokenizer.batch_decode(outs, skip_special_tokens=True))
    tokenizer.padding_side = "left"
    out: list[str] = []
    for i in range(0, len(prompts), 32):
        texts = [
            tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True)
            for p in prompts[i : i + 32]
        ]
        enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
        with torch.no_grad():
            gen = model.generate(
                **enc,
                max_new_tokens=max_new_tokens,
                do_sample=False,
                pad_token_id=tokenizer.pad_token_id,
                eos_token_id=tokenizer.eos_token_id,
            )
        out += tokenizer.batch_decode(gen[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    return out


def evaluate_policy(
    model: Any,
    tokenizer: Any,
    samples: Sequence[Prepared],
    agent: AgentParams,
    seen: Collection[str] = (),
) -> tuple[DecisionScore, list[Mapping[str, Any]]]:
    """Greedy decisions on ``samples`` (their prompts) scored against the expert's: rates and
    per-sample rows (with the output). ``seen``: the training targets; exact match is also reported on
    the samples whose target text is not among them."""
    outputs = generate(model, tokenizer, [p.prompt for p in samples], agent.decision_tokens)
    return score_decisions(outputs, samples, seen)


RUBRIC_PARTS = ("format", "validity", "tools", "decision")


def mean_rubric(
    outputs: Sequence[str], samples: Sequence[Prepared], score: Any, params: Params, fmt: str
) -> dict[str, float]:
    """Mean rubric parts and weighted total (``train.dagrpo.rubric``) of ``outputs`` on ``samples``;
    ``score`` is a rubric (``reward_model.make_rubric``)."""
    parts = [score(t, p.state, p.decision, fmt) for t, p in zip(outputs, samples, strict=True)]
    n = max(1, len(parts))
    out = {f"rubric_{k}": sum(getattr(p, k) for p in parts) / n for k in RUBRIC_PARTS}
    out["rubric_reward"] = sum(p.total(params.train.dagrpo.rubric) for p in parts) / n
    return out


def validation_metrics(
    model: Any,
    tokenizer: Any,
    samples: Sequence[Prepared],
    view: PolicyView,
    params: Params,
    train_targets: Collection[str],
    rubric: Any = None,
) -> tuple[dict[str, float], list[Mapping[str, Any]]]:
    """What every recipe reports on the val split: the decision rates (:func:`evaluate_policy`) and,
    given the ``rubric`` it trains on (DA-GRPO's), the mean rubric reward of the same outputs, each
    prefixed ``val_``; and the per-sample rows. The other recipes do not score with DA-GRPO's rubric:
    its settings are not theirs (bench/policy_quality.py scores every policy with it)."""
    score, rows = evaluate_policy(model, tokenizer, samples, params.agent, train_targets)
    metrics = score.as_metrics("val_")
    if rubric is not None:
        reward = mean_rubric([r["output"] for r in rows], samples, rubric, params, view.fmt)
        metrics.update({f"val_{k}": v for k, v in reward.items()})
    return metrics, rows


def publish(
    model: Any,
    tokenizer: Any,
    view: PolicyView,
    dirs: RunDirs,
    rows: Sequence[Mapping[str, Any]],
    metrics: Mapping[str, float],
) -> None:
    """Log the final ``metrics`` to the active MLflow run, write ``model/`` (atomically: the previous
    one stays until the new one is complete) and the per-sample validation rows
    (``val_decisions.jsonl``), and log both as artifacts of the run (the model directory as ``model``)."""
    import mlflow

    mlflow.log_metrics(dict(metrics))
    with atomic_dir(dirs.model) as tmp:
        save_policy(model, tokenizer, view, tmp)
    val = dirs.root / "val_decisions.jsonl"
    atomic_write_text(val, "".join(dump_json(dict(r)) + "\n" for r in rows))
    mlflow.log_artifacts(str(dirs.model), artifact_path="model")
    mlflow.log_artifact(str(val))


@dataclass(frozen=True)
class RecipeRun:
    """One recipe's run as its end needs it: the name, the checkpoint folder, whether it resumes,
    its MLflow run, when it started."""

    recipe: str
    dirs: RunDirs
    resume: bool
    run_id: str | None  # None on a process other than the main one
    t0: float


def train_and_publish(
    run: RecipeRun,
    trainer: Any,
    model: Any,
    view: PolicyView,
    params: Params,
    val: Sequence[Prepared],
    train_targets: Collection[str],
    n_samples: int,
    rubric: Any = None,
) -> TrainResult:
    """The end every recipe shares, inside its MLflow run: train (from the last checkpoint when
    resuming), score on the val split (plus the last logged training loss, which a resumed run
    restores), publish, register the model as a version of ``tracking.registered_model`` with the
    alias of the recipe, drop the checkpoints. ``rubric``: see :func:`validation_metrics`."""
    from orchestra.training.dist import barrier, is_main
    from orchestra.training.tracking import register_policy

    trainer.train(resume_from_checkpoint=True if run.resume else None)
    metrics: dict[str, float] = {}
    version = None
    if is_main():  # validation, the model, MLflow: once; the other processes wait
        tok = trainer.processing_class
        metrics, rows = validation_metrics(model, tok, val, view, params, train_targets, rubric)
        losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
        metrics["train_loss_last"] = float(losses[-1]) if losses else float("nan")
        publish(model, tok, view, run.dirs, rows, metrics)
        version = register_policy(params.tracking.registered_model, run.recipe, run.run_id, run.dirs.model)
        run.dirs.finish()
    barrier()
    steps, wall = trainer.state.global_step, time.perf_counter() - run.t0
    return TrainResult(
        run.recipe, run.dirs.model, steps, n_samples, metrics, run.run_id, run.resume, wall, version
    )
