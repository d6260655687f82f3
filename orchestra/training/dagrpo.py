"""DA-GRPO in TRL: decision-level prompts, a reward per sampled decision, no whole-task rollout.

The reward (``train.dagrpo.reward``) is Orchestra-o1's rubric against the expert's decision (four
TRL reward functions, weighted by ``train.dagrpo.rubric``), or one grounded reward: ``progress``
(training/progress.py) or ``lookahead`` (training/lookahead.py: the decision run on the real runtime
from its state and the task finished by the expert). Groups whose decisions all score alike can be
guided by the expert's decision (``guide``) and dropped and resampled (``resample_rounds``), both in
training/dynamic.py.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from functools import lru_cache
from pathlib import Path
from typing import Any

from orchestra.agent.decision import render_decision
from orchestra.config import Params
from orchestra.data.store import samples_file, stage_dir
from orchestra.errors import StageError
from orchestra.schemas import Task
from orchestra.stages import DECISION_SAMPLES, POLICY_DAGRPO
from orchestra.training.common import (
    RUBRIC_PARTS,
    RecipeRun,
    RunDirs,
    TrainResult,
    file_digest,
    init_policy,
    prompt_order,
    train_and_publish,
    wall_budget,
)
from orchestra.training.examples import PolicyView, Prepared, load_samples, prepare, target_texts
from orchestra.training.grpo import grpo_config
from orchestra.training.policy import load_policy
from orchestra.training.rewards import RubricScores

__all__ = [
    "decision_reward",
    "distinct_prompts",
    "grounded_score",
    "pick_prompts",
    "rubric_rewards",
    "screen_prompts",
    "train_dagrpo",
]

#: a grounded reward of one policy output for a prepared state: (text, state) -> reward
Score = Callable[[str, Prepared], float]


def _texts(completions: Sequence[Any]) -> list[str]:
    return [c[0]["content"] if isinstance(c, list) else str(c) for c in completions]


def rubric_rewards(
    samples: Mapping[str, Prepared],
    score: Callable[..., RubricScores],
    fmt: str,
    answers: Mapping[str, str] | None = None,
) -> list[Callable[..., list[float]]]:
    """One TRL reward function per rubric part (logged as ``rewards/<part>/mean``), all four from
    one rubric call per (sample, completion): the reward model is called once per decision.
    ``answers``: task id -> labelled answer, passed to ``score`` (answer credit) when given."""

    @lru_cache(maxsize=4096)
    def scores(sample_id: str, text: str) -> RubricScores:
        p = samples[sample_id]
        if answers is None:
            return score(text, p.state, p.decision, fmt)
        return score(text, p.state, p.decision, fmt, answer=answers[p.sample.task_id])

    def part(name: str) -> Callable[..., list[float]]:
        def reward(completions: list[Any], sample_id: list[str], **_: Any) -> list[float]:
            return [
                float(getattr(scores(sid, t), name))
                for sid, t in zip(sample_id, _texts(completions), strict=True)
            ]

        reward.__name__ = name
        return reward

    return [part(name) for name in RUBRIC_PARTS]


def decision_reward(samples: Mapping[str, Prepared], score: Score, name: str) -> Callable[..., list[float]]:
    """``score`` as a TRL reward function named ``name``, each (sample, completion) scored once."""

    @lru_cache(maxsize=8192)
    def cached(sample_id: str, text: str) -> float:
        return float(score(text, samples[sample_id]))

    def reward(completions: list[Any], sample_id: list[str], **_: Any) -> list[float]:
        return [cached(sid, t) for sid, t in zip(sample_id, _texts(completions), strict=True)]

    reward.__name__ = name
    return reward


def grounded_score(kind: str, tasks: Mapping[str, Task], fmt: Any, params: Params, env: Any = None) -> Score:
    """The ``progress`` or ``lookahead`` reward of a text in a prepared state of one of ``tasks``
    (task id -> task with its solution program); ``env``: the runtime lookahead runs decisions on."""
    from orchestra.training.lookahead import lookahead_reward
    from orchestra.training.progress import progress_reward

    def task(p: Prepared) -> Task:
        t = tasks.get(p.sample.task_id)
        if t is None or not t.solution_program:
            raise StageError(f"{kind} reward: task {p.sample.task_id} has no solution program")
        return t

    def progress(text: str, p: Prepared) -> float:
        t = task(p)
        return progress_reward(
            text, p.state, t.solution_program or [], t.answer, fmt, params.agent.escalation_confidence
        )

    def lookahead(text: str, p: Prepared) -> float:
        return lookahead_reward(text, p.state, task(p), fmt, env, params.agent)

    scores = {"progress": progress, "lookahead": lookahead}
    if kind not in scores:
        raise StageError(f"train.dagrpo.reward: no grounded reward {kind!r}")
    return scores[kind]


def distinct_prompts(samples: Sequence[Prepared]) -> list[Prepared]:
    """``samples`` less those whose prompt is an earlier one's (a re-rendering the view does not show,
    e.g. another backend order): a repeated prompt is a repeated group."""
    seen: set[str] = set()
    out = []
    for p in samples:
        key = json.dumps(p.prompt, sort_keys=True)
        if key not in seen:
            seen.add(key)
            out.append(p)
    return out


def pick_prompts(train: Sequence[Prepared], count: int, first_repeats: int, seed: int) -> list[Prepared]:
    """The ``count`` states DA-GRPO samples decisions for (:func:`prompt_order`), a first decision (no
    evidence yet: the whole plan, where the SFT policy errs most) weighted ``first_repeats`` times."""
    pool = [p for p in train for _ in range(1 if p.state.context else first_repeats)]
    return [pool[i] for i in prompt_order(len(pool), count, seed)]


def screen_prompts(
    candidates: Sequence[Prepared],
    totals: Sequence[float],
    count: int,
    best: float = 1.0,
) -> tuple[list[Prepared], int]:
    """``count`` of ``candidates`` (in their order), first those whose start-policy output scored
    below ``best`` (``totals``: the rubric of each one's greedy decision, normalised to 0..1), then the
    others; and how many scored below. A state the policy already decides perfectly gives a group of
    equal rewards, which has no advantage and teaches GRPO nothing."""
    if len(candidates) != len(totals):
        raise ValueError("one rubric total per candidate")
    hard = [s for s, t in zip(candidates, totals, strict=True) if t < best - 1e-9]
    easy = [s for s, t in zip(candidates, totals, strict=True) if t >= best - 1e-9]
    return (hard + easy)[:count], len(hard)


def _train_states(
    params: Params,
    root: Path,
    start: Path,
    samples: Sequence[Prepared],
    view: PolicyView,
    dirs: RunDirs,
) -> tuple[list[Prepared], dict[str, float]]:
    """The train states ``train.dagrpo.states`` asks for, each rendering once (:func:`distinct_prompts`),
    and what collecting the policy's own states measured."""
    from orchestra.training.states import policy_states

    gp = params.train.dagrpo
    train = [p for p in samples if p.sample.split == "train"] if gp.states != "policy" else []
    stats: dict[str, float] = {}
    if gp.states != "expert":
        own, stats = policy_states(params, root, start, gp.state_tasks, dirs.root / "policy_states.jsonl")
        train += prepare(own, view, params.agent)
    return distinct_prompts(train), stats


def _rewards(
    params: Params, root: Path, samples: Mapping[str, Prepared], fmt: Any, env: Any
) -> tuple[list[Callable[..., list[float]]], list[float], Score]:
    """The TRL reward functions ``train.dagrpo.reward`` names, their weights, and the scalar the
    screen compares a greedy decision by (the weighted rubric total, or the grounded reward)."""
    from orchestra.data.store import read_verified
    from orchestra.training.reward_model import make_rubric, sees_answer

    gp = params.train.dagrpo
    tasks = {s.candidate_id: s.task for s in read_verified(root)}
    if gp.reward != "rubric":
        score = grounded_score(gp.reward, tasks, fmt, params, env)
        return [decision_reward(samples, score, gp.reward)], [1.0], score
    w, rubric = gp.rubric, make_rubric(params)
    answers = {k: t.answer for k, t in tasks.items()} if sees_answer(params) else None

    def total(text: str, p: Prepared) -> float:  # the screen: expert-relative, no answer given
        return rubric(text, p.state, p.decision, fmt).total(w)

    funcs = rubric_rewards(samples, rubric, fmt, answers)
    return funcs, [w.format, w.validity, w.tools, w.decision], total


def train_dagrpo(params: Params, root: Path) -> TrainResult:
    """DA-GRPO from ``train.dagrpo.init`` on decision prompts (``train.dagrpo.states``: the expert's
    states, the start policy's own, or both): a group of decisions per state, each scored by the
    reward ``train.dagrpo.reward`` names (module docstring); publishes ``data/policy_dagrpo/model``,
    scores it on the val split; resumable; stops at ``max_wall_s``."""
    from datasets import Dataset

    from orchestra.training.dynamic import dynamic_trainer
    from orchestra.training.reward_model import make_rubric
    from orchestra.training.states import rollout_environment
    from orchestra.training.tracking import log_metrics, log_samples_input, recipe_run, step_callback

    t0 = time.perf_counter()
    gp, path = params.train.dagrpo, samples_file(root)
    start = init_policy(root, gp.init)
    model, tokenizer, view = load_policy(start)
    samples = prepare(load_samples(path), view, params.agent)
    val = [p for p in samples if p.sample.split == "val"]
    digest = file_digest(path)
    dirs = RunDirs(stage_dir(root, POLICY_DAGRPO))
    fingerprint = {
        "recipe": "dagrpo",
        "dagrpo": gp.model_dump(mode="json"),
        "seed": params.train.seed,
        "agent": params.agent.model_dump(mode="json"),
        DECISION_SAMPLES: digest,
        "start": file_digest(start / "model.safetensors"),
    }
    resume = dirs.prepare(fingerprint)
    train, stats = _train_states(params, root, start, samples, view, dirs)
    by_id = {p.sample.sample_id: p for p in train}
    n_prompts = gp.max_steps * gp.per_device_batch_size * gp.steps_per_generation // gp.num_generations
    picked = pick_prompts(train, n_prompts * max(1, gp.screen), gp.first_decision_repeats, params.train.seed)
    tags = {"orchestra.decision_samples_sha256": digest, "orchestra.start_policy": str(start)}
    with ExitStack() as stack:
        env = None
        if gp.reward == "lookahead":
            env = stack.enter_context(rollout_environment(params, root, params.eval.max_turns))
        funcs, weights, scalar = _rewards(params, root, by_id, view.fmt, env)
        if gp.screen:
            picked, screened = _screen(picked, n_prompts, model, tokenizer, view, params, scalar)
            stats.update(screened)
        rows = [{"prompt": p.prompt, "sample_id": p.sample.sample_id} for p in picked]
        reserve = [{"prompt": p.prompt, "sample_id": p.sample.sample_id} for p in train]
        with recipe_run(params, root, "dagrpo", tags, resume_id=dirs.run_id()) as run_id:
            dirs.remember_run(run_id)
            log_samples_input(path, digest, [p.sample for p in samples], "training")
            log_metrics({**stats, "distinct_train_states": float(len(train))})
            guides = {p.sample.sample_id: p.target for p in train} if gp.guide else None
            trainer = dynamic_trainer(reserve, gp.resample_rounds, guides)(
                model=model,
                reward_funcs=funcs,
                args=grpo_config(gp, dirs.checkpoints, params.train.seed, weights, gp.save_steps),
                train_dataset=Dataset.from_list(rows),
                processing_class=tokenizer,
                callbacks=[step_callback(), wall_budget(t0, gp.max_wall_s)],
            )
            run = RecipeRun("dagrpo", dirs, resume, run_id, t0)
            seen, rubric = target_texts(train), make_rubric(params)  # val's rubric columns, any reward
            return train_and_publish(run, trainer, model, view, params, val, seen, len(rows), rubric)


def _screen(
    candidates: Sequence[Prepared],
    count: int,
    model: Any,
    tokenizer: Any,
    view: Any,
    params: Params,
    score: Score,
) -> tuple[list[Prepared], dict[str, float]]:
    """:func:`screen_prompts` on the start policy's greedy decisions (deterministic, so a resumed run
    screens to the same prompts), each scored by ``score`` next to the expert's own decision in its
    state (1: as good as the expert's); and what the screen found, for MLflow."""
    from orchestra.training.common import generate

    t0 = time.perf_counter()
    outputs = generate(model, tokenizer, [p.prompt for p in candidates], params.agent.decision_tokens)
    totals = [
        1.0 + score(o, p) - score(render_decision(p.decision, view.fmt), p)
        for o, p in zip(outputs, candidates, strict=True)
    ]
    picked, hard = screen_prompts(candidates, totals, count)
    stats = {
        "screen_candidates": float(len(candidates)),
        "screen_below_best": float(hard),
        "screen_s": time.perf_counter() - t0,
    }
    return picked, stats
