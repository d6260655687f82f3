"""The start policy's own states (DAgger): it runs train tasks end to end on the real runtime, and every
state it reaches is relabelled with the expert's decision there.

Where the expert's path and its off-path variants are states a policy trained on them already decides
well, the states the policy reaches itself are where its end-to-end errors start. The rollouts are
greedy (the lean decoder), on the builtin pool and the tools with the perception cache, so the same
policy and params give the same states; they are written beside the recipe's checkpoints
(``policy_states.jsonl``) and counted in the run's MLflow metrics.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from orchestra.config import Params, ProviderSpec
from orchestra.errors import StageError
from orchestra.io import write_jsonl
from orchestra.schemas import DecisionSample, Trajectory, VerifiedSample
from orchestra.training.common import prompt_order

__all__ = ["policy_states", "rollout_environment"]


def rollout_environment(params: Params, root: Path, max_turns: int = 8) -> AbstractContextManager[Any]:
    """The runtime a policy is rolled out on in training: the tool pool over ``root``'s seeds (the
    perception cache as ``tools.cache`` says), the builtin experts."""
    from orchestra.agent.runtime import open_runtime
    from orchestra.data.store import media_dir, seeds_dir

    return open_runtime(
        params.agent,
        params.tools,
        pages=seeds_dir(root),
        media_root=media_dir(root),
        cache_dir=root,
        max_turns=max_turns,
    )


def _rollouts(params: Params, root: Path, start: Path, tasks: list[VerifiedSample]) -> list[Trajectory]:
    """Greedy runs of the policy at ``start`` on ``tasks`` (``orchestra`` system, builtin pool), run
    ``eval.concurrency`` at a time (their decisions decode as one batch)."""
    from orchestra.agent.lm_policy import lm_policy
    from orchestra.agent.systems import run_task

    policy = lm_policy(ProviderSpec(kind="transformers", model=str(start)), params.agent, name="start")
    with rollout_environment(params, root, params.eval.max_turns) as env:

        async def main() -> list[Trajectory]:
            gate = asyncio.Semaphore(max(1, params.eval.concurrency))

            async def one(s: VerifiedSample) -> Trajectory:
                async with gate:
                    return await run_task(s.task, "orchestra", policy, env)

            return await asyncio.gather(*(one(s) for s in tasks))

        return asyncio.run(main())


def policy_states(
    params: Params, root: Path, start: Path, count: int, out: Path
) -> tuple[list[DecisionSample], dict[str, float]]:
    """The states the policy at ``start`` reaches on ``count`` train tasks (drawn by ``train.seed``),
    each with the expert's decision (kind ``policy``), written to ``out``; and what the collection
    measured (tasks, states, states where the policy's own decision differed, seconds). With several
    training processes the main one collects and the others read what it wrote."""
    from orchestra.io import read_jsonl
    from orchestra.training.dist import barrier, is_main

    stats: dict[str, float] = {}
    if is_main():
        stats = _collect(params, root, start, count, out)
    barrier()
    return read_jsonl(out, DecisionSample), stats


def _collect(params: Params, root: Path, start: Path, count: int, out: Path) -> dict[str, float]:
    from orchestra.data.decisions import relabel_trajectory
    from orchestra.data.store import read_verified

    t0 = time.perf_counter()
    train = [s for s in read_verified(root) if s.split == "train" and s.task.solution_program]
    if not train:
        raise StageError(f"{root / 'verified_samples'}: no train task with a solution to roll out")
    tasks = [
        train[i] for i in sorted(set(prompt_order(len(train), min(count, len(train)), params.train.seed)))
    ]
    samples: list[DecisionSample] = []
    skipped: Counter[str] = Counter()
    solved = differed = 0
    for s, traj in zip(tasks, _rollouts(params, root, start, tasks), strict=True):
        got, why = relabel_trajectory(s, traj, params.agent)
        samples += got
        skipped += why
        solved += int(traj.answer == s.task.answer)
        differed += sum(_differs(step, got) for step in traj.steps)
    if not samples:
        raise StageError.empty("policy states", f"states of {len(tasks)} rollouts", skipped)
    write_jsonl(out, samples)
    return {
        "states_tasks": float(len(tasks)),
        "states_solved": float(solved),
        "states_n": float(len(samples)),
        "states_policy_differed": float(differed),
        "states_skipped": float(sum(skipped.values())),
        "states_s": time.perf_counter() - t0,
    }


def _differs(step: Any, relabelled: list[DecisionSample]) -> bool:
    """Whether the policy's decision at ``step`` is not the expert's relabel of the same state (after
    id renumbering and in any order: :func:`~orchestra.training.examples.canonical`)."""
    from orchestra.training.examples import canonical

    label = next((d for d in relabelled if d.step_index == step.index), None)
    if label is None:
        return False
    return step.decision is None or canonical(step.decision) != canonical(label.decision)
