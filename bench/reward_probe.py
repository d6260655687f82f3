"""Reward probe: does a decision reward rank the decisions a policy samples by what they are worth?

Usage: python bench/reward_probe.py [--data DIR] [--params params.yaml] [--tasks 10] [--k 6]
                                    [--temperature 1.0] [--init sft] [--quick]

States: every state of two runs per val task — the expert's (the oracle) and the start policy's own
(``--init``: the SFT policy ``data/policy_sft/model`` by default, ``sft@N`` a snapshot of its run
such as the recipes bench's start; greedy). In each, K decisions are sampled from the start policy at
temperature 1 (``--temperature``; its own view of the state). Each distinct decision is labelled by
its consequence on the real runtime: the run is replayed up to the state, the decision runs, and
the task is finished twice — by the expert and by the start policy (greedy) — each within
``eval.max_turns``. Its value
is the mean over the two finishes of ``right - 0.05 * turns after it - 0.01 * sub-task calls after
it`` (a right answer, less what it cost to get there).

For each reward: the within-state AUC against the value (pairs of decisions in one state whose
values differ; a tie in reward counts a half), also on the pairs whose values differ by at least one
turn's cost (``AUC turn``: smaller gaps are mostly the start policy's finish varying with the
text), Spearman's rank correlation with the calls a decision
costs, and the share of groups (a state's K samples) whose rewards all tie (no signal for GRPO).
Rewards: the builtin rubric under the published weights (0.1/0.1/0.2/0.6) and under the project's
default ones (1/1/1/2), both with the answer credit the default run trains with, the progress
reward (``orchestra.training.progress``) and the lookahead reward (``orchestra.training.lookahead``:
the decision run from the state itself, not replayed, and finished by the expert alone — the
expert half of the value, so its AUC is high by construction and says how much the start policy's
finish changes the ranking). Prints a table and
``RESULT reward_probe auc_<reward>=… no_signal_<reward>=… distinct_per_group=…``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestra.config import Params, ProviderSpec, RubricWeights, data_root, load_params
from orchestra.data import store
from orchestra.errors import StageError
from orchestra.schemas import Task
from orchestra.training.lookahead import TURN_COST, Outcome, ScriptThen
from orchestra.training.rewards import REJECTED

PUBLISHED = RubricWeights(format=0.1, validity=0.1, tools=0.2, decision=0.6)


@dataclass
class Probe:
    """One state: the task, the decisions replayed to reach it, the state, and the sampled decisions
    (text -> how many of the K samples wrote it) with each distinct one's value and rewards."""

    task: Task
    prefix: list[str]
    state: Any
    samples: dict[str, int] = field(default_factory=dict)
    value: dict[str, float] = field(default_factory=dict)
    expert: dict[str, float] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)
    rewards: dict[str, dict[str, float]] = field(default_factory=dict)


def _states(task: Task, policy: Any, env: Any, params: Params) -> list[Probe]:
    """The states of the expert's run and of ``policy``'s run on ``task``, with the decisions
    (in ``policy``'s format) that lead to each."""
    from orchestra.agent.decision import render_decision
    from orchestra.agent.policies import OraclePolicy
    from orchestra.agent.state import OrchestraState
    from orchestra.agent.systems import run_task_sync

    out = []
    for who in (OraclePolicy(task, params.agent), policy):
        traj = run_task_sync(task, "orchestra", who, env)
        own = who is policy  # its raw texts replay as written (an invalid one loses its turn again)
        texts = [s.raw_output or "" if own else render_decision(s.decision, policy.fmt) for s in traj.steps]
        for t, step in enumerate(traj.steps):
            if step.state is not None:
                out.append(Probe(task, texts[:t], OrchestraState.model_validate(step.state)))
    return out


def _sample(
    model: Any, tok: Any, policy: Any, probe: Probe, k: int, temperature: float, params: Params, seed: int
) -> None:
    import torch

    messages = policy.render(probe.state, params.agent)
    ids = tok.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    torch.manual_seed(seed)
    with torch.no_grad():
        out = model.generate(
            **ids,
            do_sample=True,
            temperature=temperature,
            top_k=0,
            num_return_sequences=k,
            max_new_tokens=params.agent.decision_tokens,
        )
    n = ids["input_ids"].shape[1]
    for text in tok.batch_decode(out[:, n:], skip_special_tokens=True):
        probe.samples[text.strip()] = probe.samples.get(text.strip(), 0) + 1


def _evidence(state: dict[str, Any] | None) -> list[tuple[Any, ...]]:
    return [(e["id"], e["status"], e["value"], e["goal"]) for e in (state or {}).get("context", [])]


def _label(probe: Probe, policy: Any, env: Any, params: Params) -> None:
    """Each distinct decision's value: finished by the expert and by the start policy."""
    from orchestra.agent.policies import OraclePolicy
    from orchestra.agent.systems import run_task_sync

    before = len(probe.prefix)
    for text in probe.samples:
        vals, calls = [], []
        for then in (OraclePolicy(probe.task, params.agent), policy):
            traj = run_task_sync(
                probe.task, "orchestra", ScriptThen([*probe.prefix, text], policy.fmt, then), env
            )
            after = traj.steps[before:]
            if not after or _evidence(after[0].state) != _evidence(probe.state.model_dump(mode="json")):
                raise RuntimeError(f"replaying {probe.task.id} to turn {before} reached another state")
            out = Outcome.of(traj, probe.task, before)
            vals.append(out.value)
            calls.append(out.calls)
        probe.value[text], probe.calls[text], probe.expert[text] = sum(vals) / 2, calls[0], vals[0]


def _rewards(probe: Probe, fmt: Any, params: Params, program: Sequence[Any], env: Any) -> None:
    from orchestra.agent.expert import expert_decision
    from orchestra.training.lookahead import lookahead_reward
    from orchestra.training.progress import progress_reward
    from orchestra.training.reward_model import credit_answer
    from orchestra.training.rewards import rubric

    expert = expert_decision(probe.state, program, agent=params.agent)
    score = credit_answer(rubric)
    below = params.agent.escalation_confidence
    for text in probe.samples:
        parts = score(text, probe.state, expert, fmt, answer=probe.task.answer)
        probe.rewards[text] = {
            "rubric_published": parts.total(PUBLISHED),
            "rubric_default": parts.total(RubricWeights()),
            "progress": progress_reward(text, probe.state, program, probe.task.answer, fmt, below),
            "lookahead": lookahead_reward(text, probe.state, probe.task, fmt, env, params.agent),
        }


def _auc(probes: Sequence[Probe], name: str, apart: float = 1e-9) -> tuple[float, int]:
    """Within-state AUC over pairs whose values differ by at least ``apart``, and how many pairs."""
    agree = pairs = 0.0
    for p in probes:
        texts = list(p.samples)
        for i, a in enumerate(texts):
            for b in texts[i + 1 :]:
                dv = p.value[a] - p.value[b]
                if abs(dv) < apart:
                    continue
                dr = p.rewards[a][name] - p.rewards[b][name]
                pairs += 1
                agree += 0.5 if abs(dr) < 1e-9 else float((dr > 0) == (dv > 0))
    return (agree / pairs if pairs else float("nan")), int(pairs)


def _spearman_calls(probes: Sequence[Probe], name: str) -> float:
    from scipy.stats import spearmanr

    xs = [p.rewards[t][name] for p in probes for t in p.samples]
    ys = [p.calls[t] for p in probes for t in p.samples]
    rho = spearmanr(xs, ys).statistic if len(set(xs)) > 1 and len(set(ys)) > 1 else float("nan")
    return float(rho)


def _no_signal(probes: Sequence[Probe], name: str) -> float:
    flat = [len({round(p.rewards[t][name], 9) for t in p.samples}) == 1 for p in probes]
    return sum(flat) / max(1, len(flat))


def _write(probes: Sequence[Probe], path: Path) -> None:
    from orchestra.io import atomic_write_text, dump_json

    rows = [
        {"state": i, "task": p.task.id, "turn": len(p.prefix), "decision": t, "samples": n}
        | {"value": p.value[t], "expert_finish": p.expert[t], "calls": p.calls[t], **p.rewards[t]}
        for i, p in enumerate(probes)
        for t, n in p.samples.items()
    ]
    atomic_write_text(path, "".join(dump_json(r) + "\n" for r in rows))


def main() -> int:
    from orchestra.agent.lm_policy import lm_policy
    from orchestra.agent.runtime import open_runtime
    from orchestra.training.common import init_policy
    from orchestra.training.policy import load_policy

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=None, help="data folder (default: the params' data_dir)")
    ap.add_argument("--params", type=Path, default=Path("params.yaml"))
    ap.add_argument("--tasks", type=int, default=10, help="val tasks whose states are probed")
    ap.add_argument("--offset", type=int, default=0, help="skip the first N val tasks (a held-out set)")
    ap.add_argument("--k", type=int, default=6, help="decisions sampled per state")
    ap.add_argument("--temperature", type=float, default=1.0, help="sampling temperature")
    ap.add_argument("--init", default="sft", help="the start policy: sft, sft@N (a snapshot) or a directory")
    ap.add_argument("--quick", action="store_true", help="3 tasks, 4 samples")
    ap.add_argument("--out", type=Path, default=None, help="write one JSON row per state and decision")
    args = ap.parse_args()
    if args.quick:
        args.tasks, args.k = 3, 4
    params = load_params(args.params)
    root = args.data or data_root(args.params, params)
    try:
        start = init_policy(root, args.init)
    except StageError as e:
        print(f"RESULT reward_probe nan ({e}: run make pipeline)")
        return 1
    model, tok, _ = load_policy(start)
    policy = lm_policy(ProviderSpec(kind="transformers", model=str(start)), params.agent, name="start")
    tasks = [s.task for s in store.read_verified(root) if s.split == "val" and s.task.solution_program]
    seeds = store.seeds_dir(root)
    with open_runtime(
        params.agent, params.tools, pages=seeds, media_root=seeds / "media", cache_dir=root
    ) as env:
        chosen = tasks[args.offset : args.offset + args.tasks]
        probes = [p for t in chosen for p in _states(t, policy, env, params)]
        for i, p in enumerate(probes):
            _sample(model, tok, policy, p, args.k, args.temperature, params, params.train.seed + i)
            _label(p, policy, env, params)
            _rewards(p, policy.fmt, params, p.task.solution_program or [], env)
    if args.out:
        _write(probes, args.out)
    names = list(probes[0].rewards[next(iter(probes[0].samples))]) if probes else []
    distinct = sum(len(p.samples) for p in probes) / max(1, len(probes))
    spread = sum(len({round(v, 9) for v in p.value.values()}) > 1 for p in probes) / max(1, len(probes))
    head = f"{len(probes)} states of {len(chosen)} val tasks (from #{args.offset}), K={args.k}"
    print(f"{head}, temperature {args.temperature}")
    print(f"distinct decisions per group {distinct:.2f}; states whose decisions differ in value {spread:.2f}")
    run = [(p.expert[t], p.rewards[t]["lookahead"]) for p in probes for t in p.samples]
    same = [abs(e - r) < 1e-9 for e, r in run if r != REJECTED]  # rejected: the floor, not the run
    print(f"lookahead (run from the state) = the replayed expert finish: {sum(same)} of {len(same)} accepted")
    print(
        f"{'reward':18s} {'AUC':>6s} {'pairs':>5s} {'AUC turn':>8s} {'pairs':>5s} "
        f"{'rho(calls)':>10s} {'no signal':>9s}"
    )
    result = []
    for name in names:
        (auc, pairs), (far, n_far) = _auc(probes, name), _auc(probes, name, TURN_COST)
        rho, flat = _spearman_calls(probes, name), _no_signal(probes, name)
        print(f"{name:18s} {auc:6.3f} {pairs:5d} {far:8.3f} {n_far:5d} {rho:10.3f} {flat:9.3f}")
        result += [f"auc_{name}={auc:.3f}", f"auc_turn_{name}={far:.3f}", f"no_signal_{name}={flat:.3f}"]
    print("RESULT reward_probe " + " ".join(result) + f" distinct_per_group={distinct:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
