"""SFT warm start: TRL's SFTTrainer on (state, expert decision) pairs, loss on the decision only."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from orchestra.config import Params
from orchestra.data.store import samples_file, stage_dir
from orchestra.errors import StageError
from orchestra.schemas import Delegate
from orchestra.stages import DECISION_SAMPLES, POLICY_SFT
from orchestra.training.common import (
    RecipeRun,
    RunDirs,
    TrainResult,
    base_args,
    file_digest,
    init_policy,
    train_and_publish,
    wall_budget,
)
from orchestra.training.examples import PolicyView, Prepared, load_samples, prepare
from orchestra.training.policy import build_policy, load_policy, n_params, read_view

__all__ = ["sft_examples", "train_sft"]


def sft_examples(
    samples: Sequence[Prepared], first_repeats: int = 1, replan_repeats: int = 1
) -> list[dict[str, Any]]:
    """TRL's conversational prompt-completion rows: the rendered state, the expert decision. A pair
    the view renders identically to an earlier one is kept once (a re-rendering the view does not
    show, e.g. another backend order for a view that sorts backends): repetition costs steps. A first
    decision (no evidence yet: the whole plan) is repeated ``first_repeats`` times: it is where a
    small policy fails most, and measured repetition of it pays (docs/results/history.md); a later
    delegation on the expert's path (a re-plan) ``replan_repeats`` times."""
    rows, seen = [], set()
    for p in samples:
        key = (json.dumps(p.prompt, sort_keys=True), p.target)
        if key not in seen:
            seen.add(key)
            row = {"prompt": p.prompt, "completion": [{"role": "assistant", "content": p.target}]}
            if not p.state.context:
                rows.extend([row] * first_repeats)
            elif p.sample.kind == "expert" and isinstance(p.decision, Delegate):
                rows.extend([row] * replan_repeats)
            else:
                rows.append(row)
    return rows


def _distinct(rows: Sequence[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[int]]:
    """The rows :func:`sft_examples` repeats (the same object), once each with a ``row`` number, and
    the row number of every position: TRL then tokenizes a repeated row once (tokenizing is about
    1,000 rows/s on 2 cores, and repeats are most of the rows)."""
    index: dict[int, int] = {}
    distinct: list[dict[str, Any]] = []
    order = []
    for r in rows:
        if id(r) not in index:
            index[id(r)] = len(distinct)
            distinct.append({**r, "row": len(distinct)})
        order.append(index[id(r)])
    return distinct, order


def _repeat(dataset: Any, order: Sequence[int]) -> Any:
    """The tokenized ``dataset`` of :func:`_distinct` rows in ``order`` (a row TRL dropped, e.g. one
    truncation left without a completion token, stays dropped), without the ``row`` column."""
    at = {r: i for i, r in enumerate(dataset["row"])}
    return dataset.select([at[r] for r in order if r in at]).remove_columns("row")


def _snapshots(steps: Sequence[int], model: Any, tokenizer: Any, view: PolicyView, out: Path) -> Any:
    """A transformers callback that keeps the model at each of ``steps`` as ``out/step-N`` (a policy
    directory, written atomically): a start for RL where the policy still errs (``sft@N``)."""
    from transformers import TrainerCallback

    from orchestra.io import atomic_dir
    from orchestra.training.policy import save_policy

    class Snapshots(TrainerCallback):  # type: ignore[misc]
        def on_step_end(self, args: Any, state: Any, control: Any, **_: Any) -> Any:
            if state.global_step in steps and state.is_world_process_zero:
                with atomic_dir(out / f"step-{state.global_step}") as tmp:
                    save_policy(model, tokenizer, view, tmp)
            return control

    return Snapshots()


def _model(params: Params, init: Path | None, rows: Sequence[dict[str, Any]]) -> tuple[Any, Any]:
    """(model, tokenizer): the policy at ``init``, or a new one (``train.policy``) for ``rows``."""
    if init is not None:
        model, tokenizer, _ = load_policy(init)
        return model, tokenizer
    texts = [m["content"] for r in rows for m in r["prompt"] + r["completion"]]
    return build_policy(params.train.policy, texts, params.train.seed)


def train_sft(params: Params, root: Path) -> TrainResult:
    """Train a policy from scratch (or from ``train.policy.base_model``, or continue ``train.sft.init``)
    on the train split's decision samples (with ``train.sft.states: both`` also the start policy's own
    states relabelled by the expert: DAgger), score it on the val split, publish
    ``data/policy_sft/model``; resumable (see RunDirs); stops at ``max_wall_s``."""
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    from orchestra.training.tracking import log_metrics, log_samples_input, recipe_run, step_callback

    t0 = time.perf_counter()
    path = samples_file(root)
    sp = params.train.sft
    init = init_policy(root, sp.init) if sp.init else None
    view = (read_view(init) or PolicyView()) if init else PolicyView()
    samples = prepare(load_samples(path), view, params.agent)
    train = [p for p in samples if p.sample.split == "train"]
    val = [p for p in samples if p.sample.split == "val"]
    if not train:
        raise StageError(f"{path}: no train samples")
    digest = file_digest(path)
    dirs = RunDirs(stage_dir(root, POLICY_SFT))
    fingerprint = {
        "recipe": "sft",
        "policy": params.train.policy.model_dump(mode="json"),
        "sft": sp.model_dump(mode="json"),
        "seed": params.train.seed,
        "agent": params.agent.model_dump(mode="json"),
        DECISION_SAMPLES: digest,
        **({"start": file_digest(init / "model.safetensors")} if init else {}),
    }
    resume = dirs.prepare(fingerprint)
    stats: dict[str, float] = {}
    if init is not None and sp.states == "both":
        from orchestra.training.states import policy_states

        own, stats = policy_states(params, root, init, sp.state_tasks, dirs.root / "policy_states.jsonl")
        train += prepare(own, view, params.agent)
    rows = sft_examples(train, sp.first_decision_repeats, sp.replan_repeats)
    model, tokenizer = _model(params, init, rows)
    if not resume:
        shutil.rmtree(dirs.root / "snapshots", ignore_errors=True)
    tags = {"orchestra.decision_samples_sha256": digest, "orchestra.params_n": str(n_params(model))}
    if init is not None:
        tags["orchestra.start_policy"] = str(init)
    with recipe_run(params, root, "sft", tags, resume_id=dirs.run_id()) as run_id:
        dirs.remember_run(run_id)
        log_samples_input(path, digest, [p.sample for p in samples], "training")
        log_metrics(stats)
        args = base_args(
            dirs.checkpoints, params.train.seed, sp.learning_rate, sp.batch_size, sp.max_steps, sp.save_steps
        )
        config = SFTConfig(
            **args,
            num_train_epochs=sp.epochs,
            lr_scheduler_type="cosine",
            warmup_steps=sp.warmup_steps,
            max_length=params.train.policy.max_length,
            train_sampling_strategy="group_by_length",  # batches of like lengths: little padding
        )
        distinct, order = _distinct(rows)
        callbacks = [step_callback(), wall_budget(t0, sp.max_wall_s)]
        if sp.snapshot_steps:
            callbacks.append(_snapshots(sp.snapshot_steps, model, tokenizer, view, dirs.root / "snapshots"))
        trainer = SFTTrainer(
            model=model,
            args=config,
            train_dataset=Dataset.from_list(distinct),
            processing_class=tokenizer,
            callbacks=callbacks,
        )
        trainer.train_dataset = _repeat(trainer.train_dataset, order)
        seen = {r["completion"][0]["content"] for r in rows}
        run = RecipeRun("sft", dirs, resume, run_id, t0)
        return train_and_publish(run, trainer, model, view, params, val, seen, len(train))
