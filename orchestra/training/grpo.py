"""Outcome GRPO (Maestro's recipe): full rollouts with real tools, reward = answer + format; GRPOConfig."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestra.answers import answers_equal
from orchestra.config import AgentParams, GRPOParams, Params
from orchestra.data.store import samples_file, stage_dir
from orchestra.errors import StageError
from orchestra.lm.chat import ChatResult
from orchestra.schemas import Task
from orchestra.stages import POLICY_GRPO
from orchestra.training.common import (
    RecipeRun,
    RunDirs,
    TrainResult,
    base_args,
    file_digest,
    init_policy,
    prompt_order,
    train_and_publish,
    wall_budget,
)
from orchestra.training.examples import PolicyView, load_samples, prepare, target_texts
from orchestra.training.policy import load_policy

__all__ = [
    "SamplingChat",
    "answer_reward",
    "decision_prompt",
    "grpo_config",
    "make_rollout",
    "rollout_format_reward",
    "train_grpo",
]


def grpo_config(
    gp: GRPOParams, out: Path, seed: int, reward_weights: Sequence[float], save_steps: int
) -> Any:
    """TRL's GRPOConfig from params: group size, generation batch, clip, beta, loss type, learning rate
    with its warm-up and decay.
    One pass over a shuffled prompt list (never a second epoch), so a resumed run replays the same
    prompts (TRL's sampler does not reseed per epoch)."""
    from trl import GRPOConfig

    return GRPOConfig(
        **base_args(
            out, seed, gp.learning_rate, gp.per_device_batch_size, gp.max_steps, save_steps, logging=1
        ),
        lr_scheduler_type=gp.lr_scheduler,
        warmup_steps=gp.warmup_ratio,  # a float below 1: a share of max_steps
        num_generations=gp.num_generations,
        steps_per_generation=gp.steps_per_generation,
        num_iterations=gp.num_iterations,
        beta=gp.beta,
        epsilon=gp.epsilon,
        loss_type=gp.loss_type,
        max_completion_length=gp.max_completion_length,
        temperature=gp.temperature,
        reward_weights=list(reward_weights),
        shuffle_dataset=False,
        use_vllm=gp.use_vllm,
        vllm_mode=gp.vllm_mode,
        vllm_server_base_url=gp.vllm_server_url,
    )


@dataclass
class _Call:
    prompt_ids: list[int]
    completion_ids: list[int]


@dataclass
class SamplingChat:
    """A chat client over the model being trained: samples a decision at ``temperature`` and keeps
    the token ids of every call (the rollout's turns: one call per decision)."""

    model: Any
    tokenizer: Any
    max_new_tokens: int
    temperature: float = 1.0
    calls: list[_Call] = field(default_factory=list)

    @property
    def context_tokens(self) -> int | None:
        return int(self.model.config.max_position_embeddings)

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def chat(self, messages: Sequence[Mapping[str, Any]], tools: Any = None) -> ChatResult:
        import torch

        t0 = time.perf_counter()
        ids = self.tokenizer.apply_chat_template(
            list(messages), add_generation_prompt=True, return_dict=True
        )["input_ids"]
        if len(ids) + self.max_new_tokens > int(self.context_tokens or 0):
            raise ValueError(  # the policy renders its state within context - decision_tokens
                f"a {len(ids)}-token prompt and {self.max_new_tokens} new tokens exceed the context"
            )
        dev = self.model.device
        with torch.no_grad():
            out = self.model.generate(
                torch.tensor([ids], device=dev),
                attention_mask=torch.ones(1, len(ids), dtype=torch.long, device=dev),
                max_new_tokens=self.max_new_tokens,
                do_sample=True,
                temperature=self.temperature,
                pad_token_id=self.tokenizer.pad_token_id,
                eos_token_id=self.tokenizer.eos_token_id,
            )
        new = out[0, len(ids) :].tolist()
        self.calls.append(_Call(list(ids), new))
        text = self.tokenizer.decode(new, skip_special_tokens=True)
        return ChatResult(text, [], len(ids), len(new), time.perf_counter() - t0)


def decision_prompt(task_id: str, k: int) -> str:
    """The trainer's prompt text for decision ``k`` of a rollout of ``task_id``."""
    return f"{task_id}#{k}"


def _parse(prompt: Any) -> tuple[str, int]:
    text = prompt[-1]["content"] if isinstance(prompt, list) else str(prompt)
    task_id, _, k = text.rpartition("#")
    return task_id, int(k)


@dataclass
class _Rollout:
    calls: list[_Call]
    correct: float
    formatted: float


def make_rollout(
    tasks: Mapping[str, Task], env: Any, view: PolicyView, agent: AgentParams, gp: GRPOParams
) -> Any:
    """TRL's ``rollout_func``. A prompt names decision ``k`` of a task (:func:`decision_prompt`); the
    G prompts of a group are G rollouts of the task (the orchestra system end to end, the policy
    sampling every decision, real sub-agents and tools), each run once for all its decisions in the
    batch. Row j of the group for decision k is the j-th rollout's k-th call: exactly the prompt and
    tokens it was sampled from, with the rollout's rewards (``correct``, ``formatted``); a rollout with
    fewer decisions gives a one-token row with no loss (``env_mask`` 0)."""
    from orchestra.agent.lm_policy import LMPolicy
    from orchestra.agent.systems import run_task_sync

    def run(task: Task, trainer: Any) -> _Rollout:
        chat = SamplingChat(trainer.model, trainer.processing_class, gp.max_completion_length, gp.temperature)
        policy = LMPolicy(chat, fmt=view.fmt, style=view.style, max_retries=0, name="rollout", agent=agent)  # type: ignore[arg-type]
        traj = run_task_sync(task, "orchestra", policy, env)
        decisions = [s for s in traj.steps if s.raw_output is not None]
        ok = sum(1 for s in decisions if s.decision is not None)
        correct = float(traj.answer is not None and answers_equal(str(traj.answer), task.answer))
        return _Rollout(chat.calls, correct, ok / len(decisions) if decisions else 0.0)

    def rollout(prompts: list[Any], trainer: Any) -> dict[str, Any]:
        keys = [_parse(p) for p in prompts]
        runs: dict[str, list[_Rollout]] = {}
        seen: dict[tuple[str, int], int] = {}
        out: dict[str, list[Any]] = {
            k: [] for k in ("prompt_ids", "completion_ids", "env_mask", "correct", "formatted")
        }
        eos = trainer.processing_class.eos_token_id
        for key in keys:
            j = seen[key] = seen.get(key, -1) + 1
            done = runs.setdefault(key[0], [])
            while len(done) <= j:
                done.append(run(tasks[key[0]], trainer))
            r = done[j]
            call = r.calls[key[1]] if key[1] < len(r.calls) else None
            out["prompt_ids"].append(call.prompt_ids if call else r.calls[0].prompt_ids)
            out["completion_ids"].append(call.completion_ids if call else [eos])
            out["env_mask"].append([1 if call else 0] * (len(call.completion_ids) if call else 1))
            out["correct"].append(r.correct)
            out["formatted"].append(r.formatted)
        return {**out, "logprobs": None}

    return rollout


def answer_reward(completions: list[Any], correct: list[float], **_: Any) -> list[float]:
    """1 when the rollout's final answer equals the labelled answer."""
    return [float(c) for c in correct]


def rollout_format_reward(completions: list[Any], formatted: list[float], **_: Any) -> list[float]:
    """TRL's reward function for the format term: the share of the rollout's decisions that parsed and
    were valid (the runtime's check; one text's parse: :func:`orchestra.training.rewards.format_reward`)."""
    return [float(f) for f in formatted]


def train_grpo(params: Params, root: Path) -> TrainResult:
    """Outcome GRPO from ``train.grpo.init`` over the train split's verified tasks, with the same group
    size and batch as DA-GRPO, the first ``train.grpo.decisions`` decisions of every rollout trained
    on (:func:`make_rollout`); publishes ``data/policy_grpo/model``; resumable; stops at ``max_wall_s``."""
    from datasets import Dataset
    from trl import GRPOTrainer

    from orchestra.data.store import read_verified
    from orchestra.training.states import rollout_environment
    from orchestra.training.tracking import log_samples_input, recipe_run, step_callback

    t0 = time.perf_counter()
    gp, path = params.train.grpo, samples_file(root)
    verified = [s for s in read_verified(root) if s.split == "train"]
    if not verified:
        raise StageError(f"{root / 'verified_samples'}: no train tasks for outcome GRPO")
    tasks = {s.candidate_id: s.task for s in verified}
    ids = sorted(tasks)
    n_prompts = gp.max_steps * gp.per_device_batch_size * gp.steps_per_generation // gp.num_generations
    rows = [  # a task's decisions side by side: one generation batch runs its rollouts once
        {"prompt": [{"role": "user", "content": decision_prompt(ids[i], k)}]}
        for i in prompt_order(len(ids), n_prompts // gp.decisions, params.train.seed)
        for k in range(gp.decisions)
    ]
    start = init_policy(root, gp.init)
    model, tokenizer, view = load_policy(start)
    samples = prepare(load_samples(path), view, params.agent)
    val = [p for p in samples if p.sample.split == "val"]
    seen = target_texts(p for p in samples if p.sample.split == "train")
    dirs = RunDirs(stage_dir(root, POLICY_GRPO))
    fingerprint = {
        "recipe": "grpo",
        "grpo": gp.model_dump(mode="json"),
        "seed": params.train.seed,
        "agent": params.agent.model_dump(mode="json"),
        "tasks": ids,
        "start": file_digest(start / "model.safetensors"),
    }
    resume = dirs.prepare(fingerprint)
    digest = file_digest(path)
    tags = {"orchestra.decision_samples_sha256": digest, "orchestra.start_policy": str(start)}
    with (
        rollout_environment(params, root) as env,
        recipe_run(params, root, "grpo", tags, resume_id=dirs.run_id()) as run_id,
    ):
        dirs.remember_run(run_id)
        # it trains on verified tasks' rollouts: the decision samples are its validation input
        log_samples_input(path, digest, [p.sample for p in samples], "validation")
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=[answer_reward, rollout_format_reward],
            args=grpo_config(gp, dirs.checkpoints, params.train.seed, [1.0, gp.format_weight], gp.save_steps),
            train_dataset=Dataset.from_list(rows),
            processing_class=tokenizer,
            callbacks=[step_callback(), wall_budget(t0, gp.max_wall_s)],
            rollout_func=make_rollout(tasks, env, view, params.agent, gp),
        )
        run = RecipeRun("grpo", dirs, resume, run_id, t0)
        return train_and_publish(run, trainer, model, view, params, val, seen, len(rows))
