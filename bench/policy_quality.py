"""Policy quality: decisions on the val split and answers on the test split, for every trained policy.

Usage: python bench/policy_quality.py [--data data] [--params params.yaml] [--limit N] [--tasks N]

On the val split's decision samples (greedy decoding, the policy's own view of the state): exact
decisions (canonical equality after id renumbering), structural match, parse and validity rates,
exact match on states whose target never occurs in training, and the mean rubric reward (builtin
rubric, weights from params) — for the untrained policy (the SFT recipe's initialisation),
SFT, outcome GRPO and DA-GRPO (each row only where ``data/policy_<recipe>/model`` exists).

End to end on the embedded benchmark (the test split of verified_samples, ``--tasks`` of them):
the orchestra system with real tools and builtin sub-agents, driven by each trained policy and by
the oracle; accuracy = answer equals the label. Prints one row per policy and a final RESULT line
with the SFT policy's share of the oracle's accuracy (target >= 0.8); exits 1 below it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from orchestra.answers import answers_equal
from orchestra.config import data_root, load_params
from orchestra.data import store
from orchestra.training.common import evaluate_policy, file_digest, mean_rubric
from orchestra.training.examples import PolicyView, load_samples, prepare, target_texts
from orchestra.training.rewards import rubric

RECIPES = ("sft", "grpo", "dagrpo")


def decision_rows(params, root: Path, limit: int | None) -> dict[str, object]:  # type: ignore[no-untyped-def]
    from orchestra.training.policy import build_policy, load_policy

    view = PolicyView()
    samples = prepare(load_samples(store.samples_file(root)), view, params.agent)
    train = [p for p in samples if p.sample.split == "train"]
    val = [p for p in samples if p.sample.split == "val"][:limit]
    seen = target_texts(train)
    texts = []
    for p in train:
        texts += [m["content"] for m in p.prompt]
        texts.append(p.target)
    models = {"untrained": build_policy(params.train.policy, texts, params.train.seed)}
    for recipe in RECIPES:
        path = store.model_dir(root, recipe)
        if (path / "config.json").is_file():
            model, tok, view = load_policy(path)
            models[recipe] = (model, tok)
    out: dict[str, object] = {}
    for name, (model, tok) in models.items():
        score, rows = evaluate_policy(model, tok, val, params.agent, seen)
        reward = mean_rubric([r["output"] for r in rows], val, rubric, params, view.fmt)
        out[name] = {**score.as_metrics(), "rubric_reward": reward["rubric_reward"]}
        print(
            f"{name:10s} exact {score.exact:.3f}  structural {score.structural:.3f}  "
            f"parse {score.parse:.3f}  "
            f"valid {score.valid:.3f}  unseen exact {score.exact_unseen:.3f} ({score.n_unseen})  "
            f"rubric {reward['rubric_reward']:.3f}  n={score.n}",
            flush=True,
        )
    return out


def end_to_end(params, root: Path, n_tasks: int | None) -> dict[str, float]:  # type: ignore[no-untyped-def]
    from orchestra.agent.lm_policy import lm_policy
    from orchestra.agent.policies import OraclePolicy
    from orchestra.agent.runtime import open_runtime
    from orchestra.agent.systems import run_task_sync
    from orchestra.config import ProviderSpec
    from orchestra.data.store import read_verified

    tasks = [s.task for s in read_verified(root) if s.split == "test"][:n_tasks]
    seeds_dir = store.seeds_dir(root)
    acc: dict[str, float] = {}
    runtime = open_runtime(
        params.agent, params.tools, pages=seeds_dir, media_root=seeds_dir / "media", cache_dir=root
    )
    with runtime as env:
        policies = {"oracle": None}
        policies.update({r: store.model_dir(root, r) for r in RECIPES if store.model_dir(root, r).is_dir()})
        for name, path in policies.items():
            right = 0
            trained = None
            if path is not None:  # loaded once; its view (style, format) comes from the directory
                trained = lm_policy(
                    ProviderSpec(kind="transformers", model=str(path)), params.agent, name=name
                )
            for task in tasks:
                policy = trained or OraclePolicy(task, params.agent)
                traj = run_task_sync(task, "orchestra", policy, env)
                right += traj.answer is not None and answers_equal(str(traj.answer), task.answer)
            acc[name] = right / max(1, len(tasks))
            print(
                f"end to end {name:8s} accuracy {acc[name]:.3f} ({right}/{len(tasks)} test tasks)", flush=True
            )
    return acc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=None, help="data folder (default: the params' data_dir)")
    ap.add_argument("--params", type=Path, default=Path("params.yaml"))
    ap.add_argument("--limit", type=int, default=None, help="first N val decision samples")
    ap.add_argument("--tasks", type=int, default=None, help="first N test tasks end to end")
    args = ap.parse_args()
    params = load_params(args.params)
    root = args.data or data_root(args.params, params)
    print(f"decision_samples sha256 {file_digest(root / 'decision_samples' / 'samples.jsonl')[:16]}")
    decision_rows(params, root, args.limit)
    acc = end_to_end(params, root, args.tasks)
    if "sft" not in acc:
        print("RESULT sft_over_oracle=nan (no data/policy_sft/model: run make pipeline)")
        return 1
    share = acc["sft"] / acc["oracle"] if acc["oracle"] else 0.0
    print(f"RESULT sft_over_oracle={share:.3f} (target >= 0.8)")
    return 0 if share >= 0.8 else 1


if __name__ == "__main__":
    sys.exit(main())
