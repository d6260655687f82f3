"""The recipes at equal budget: from one start policy, each arm trains the steps the same seconds buy.

Usage: python bench/recipes.py [--data data] [--params params.yaml] [--budget-s 150] [--seeds 17,18,19]
                               [--init sft@550] [--arms a,b,...] [--tasks N] [--world-seed 8]
                               [--out bench_out/recipes] [--quick]

Arms (each from ``--init``, the SFT run's snapshot by default: a policy that still errs):
  sft_continue      SFT on the expert's states (the decision samples), continued
  dagger_sft        SFT on those plus the start policy's own states relabelled by the expert (DAgger)
  dagrpo_expert     DA-GRPO on the expert's states (the default rubric, 1/1/1/2)
  dagrpo_policy     DA-GRPO on the start policy's own states
  dagrpo_published  DA-GRPO as published: the expert's states, Orchestra-o1's weights (0.1/0.1/0.2/0.6)
                    with answer credit, and the published RL settings (RL below)
  dagrpo_progress   DA-GRPO on the policy's own states, the progress reward, RL settings, dynamic
                    sampling (2 resampling rounds)
  dagrpo_lookahead  the same with the lookahead reward (the decision run, the expert finishing)
  dagrpo_progress_guided, dagrpo_lookahead_guided
                    the same two with a group whose samples all tie scored again with the expert's
                    decision in one sample's place (``train.dagrpo.guide``, training/dynamic.py)
  grpo              outcome GRPO (Maestro): rollouts end to end, reward = answer + format
Each arm runs once per ``train.seed`` in ``--seeds`` in its own copy of the data root (the start
policy, the decision samples) for the optimizer steps ``--budget-s`` seconds buy on 2 idle cores
(``budget_steps``: the start-up and step costs measured before, state collection included), and is
scored end to end (``orchestra eval``'s runner: the orchestra system, real tools, builtin sub-agents)
on every test task, and on the test split of a second world the bench generates first with
``seed.world.seed = --world-seed`` (the other params the same; ``WORLD_STAGES``, reused when built).
``--quick``: 60 s per arm (less than any arm's start-up, so the minimum 4 steps: a smoke run of the
bench's path, not a measurement), one seed, the first 40 test tasks, no second world. Prints per split and
arm: the mean EM over seeds, the bootstrap 95% interval of
(arm - sft_continue) (each arm's seeds resampled, then the tasks, paired by task), optimizer steps
and the median wall seconds of an optimizer step; the start policy's own EM; and the final line
``RESULT recipes split=<em|em_world2> order=<arms by EM> dagrpo_minus_sft=<d> [lo, hi]
step_cost_grpo_over_dagrpo=<r>``
(dagrpo = the better DA-GRPO arm by mean EM). Nothing is asserted: the numbers are what they are.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from orchestra.config import Params, data_root, load_params, parse_params
from orchestra.io import atomic_write_text
from orchestra.stages import (
    ANCHOR_FACTS,
    DECISION_SAMPLES,
    POLICY_SFT,
    REWRITE_CANDIDATES,
    SEED_TASKS,
    VERIFIED_SAMPLES,
)

#: the published RL settings, sized for 2 cores: groups of 8, 4 prompts a step, KL 0.01, warm-up and
#: cosine decay (the params' own defaults; params.yaml keeps the last bench's)
RL: dict[str, Any] = {
    "num_generations": 8,
    "per_device_batch_size": 32,
    "beta": 0.01,
    "lr_scheduler": "cosine",
    "warmup_ratio": 0.1,
}
PUBLISHED_RUBRIC = {"format": 0.1, "validity": 0.1, "tools": 0.2, "decision": 0.6}
ARMS: dict[str, tuple[str, dict[str, Any]]] = {
    "sft_continue": ("sft", {"states": "expert"}),
    "dagger_sft": ("sft", {"states": "both"}),
    "dagrpo_expert": ("dagrpo", {"states": "expert"}),
    "dagrpo_policy": ("dagrpo", {"states": "policy"}),
    "dagrpo_published": (
        "dagrpo",
        {"states": "expert", "reward": "rubric", "answer_credit": True, "rubric": PUBLISHED_RUBRIC, **RL},
    ),
    "dagrpo_progress": ("dagrpo", {"states": "policy", "reward": "progress", "resample_rounds": 2, **RL}),
    "dagrpo_lookahead": ("dagrpo", {"states": "policy", "reward": "lookahead", "resample_rounds": 2, **RL}),
    "dagrpo_progress_guided": (
        "dagrpo",
        {"states": "policy", "reward": "progress", "resample_rounds": 2, "guide": True, **RL},
    ),
    "dagrpo_lookahead_guided": (
        "dagrpo",
        {"states": "policy", "reward": "lookahead", "resample_rounds": 2, "guide": True, **RL},
    ),
    "grpo": ("grpo", {}),
}
#: tasks run at once when collecting states and scoring (concurrent policy calls decode as one batch)
CONCURRENCY = 8
#: per arm, the seconds a run spends before its first step (loading, tokenising, collecting states)
#: and per optimizer step on 2 idle cores, measured with ``--budget-s 120 --tasks 1 --world-seed 0``
#: on 2026-12-07 (docs/results/recipes.md; the two arms with the params.yaml settings earlier): the
#: budget is converted to each arm's ``max_steps`` once, so a run's learning-rate schedule runs to its
#: end and a busy machine changes how long the bench takes, not what it trains (the table prints the
#: seconds measured)
COST_S: dict[str, tuple[float, float]] = {
    "sft_continue": (92.0, 0.16),
    "dagger_sft": (129.0, 0.16),
    "dagrpo_expert": (40.0, 0.4),
    "dagrpo_policy": (40.0, 0.4),
    "dagrpo_published": (56.0, 1.43),
    "dagrpo_progress": (65.0, 3.06),
    "dagrpo_lookahead": (66.0, 4.34),
    "dagrpo_progress_guided": (84.0, 2.40),
    "dagrpo_lookahead_guided": (77.0, 3.20),
    "grpo": (78.0, 2.52),
}


def budget_steps(arm: str, budget: float) -> int:
    start, step = COST_S[arm]
    return max(4, int((budget - start) / step))


def rooted(base: Params, root: Path) -> dict[str, Any]:
    """``base`` as data to edit, its data folder ``root``."""
    data = base.model_dump(mode="json")
    data["paths"]["data_dir"] = str(root)
    return data


def arm_params(
    base: Params, root: Path, tracking: Path, arm: str, seed: int, init: str, budget: float
) -> Params:
    recipe, extra = ARMS[arm]
    data = rooted(base, root)
    data["train"]["seed"] = seed
    section = data["train"][recipe]
    section.update({"init": init, "max_wall_s": None, "max_steps": budget_steps(arm, budget), **extra})
    if recipe == "sft":
        section.update({"snapshot_steps": [], "save_steps": 10**6})
    else:
        section["save_steps"] = 10**6 - 10**6 % (section["steps_per_generation"] * section["num_iterations"])
    data["eval"]["concurrency"] = CONCURRENCY
    data["tracking"] = {
        **data["tracking"],
        "mlflow_uri": f"sqlite:///{tracking}",
        "experiment": "bench_recipes",
    }
    return parse_params(data)


def arm_root(src: Path, out: Path) -> Path:
    """A data root for one run: the seeds, verified and decision samples linked, the start policy copied."""
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    for name in (SEED_TASKS, VERIFIED_SAMPLES, DECISION_SAMPLES):
        (out / name).symlink_to((src / name).resolve())
    shutil.copytree(src / POLICY_SFT, out / POLICY_SFT, ignore=shutil.ignore_patterns("checkpoints"))
    for cache in (src / "cache",):
        if cache.is_dir():
            (out / "cache").symlink_to(cache.resolve())
    return out


def evaluate(params: Params, root: Path, model: Path, out: Path, tasks: int | None) -> dict[str, int]:
    """task id -> EM (0/1) of the policy at ``model`` on the test split, through the eval runner."""
    from orchestra.data.store import benchmark_file
    from orchestra.evaluation.items import load_items
    from orchestra.evaluation.runner import EvalConfig, run_eval

    cfg = EvalConfig(
        benchmark=benchmark_file(root),
        out=out,
        policy=f"checkpoint:{model}",
        limit=tasks,
        concurrency=CONCURRENCY,
        max_turns=params.eval.max_turns,
        data_dir=root,
        seed=params.train.seed,
    )
    run_eval(params, cfg)
    return {k: int(v["em_score"]) for k, v in load_items(out).items()}


def step_seconds(tracking: Path, run_id: str) -> float:
    import mlflow

    hist = mlflow.MlflowClient(f"sqlite:///{tracking}").get_metric_history(run_id, "step_wall_s")
    return statistics.median(m.value for m in hist) if hist else float("nan")


def seed_task_interval(
    a: np.ndarray, b: np.ndarray, n: int = 10000, seed: int = 0
) -> tuple[float, float, float]:
    """Mean of arm - baseline EM and its percentile bootstrap 95% interval, ``a`` and ``b`` the
    per-seed per-task EM (seeds x tasks): each replicate resamples each arm's seeds, then the tasks
    (the same tasks for both: paired), so the interval carries seed-to-seed spread and task sampling."""
    rng = np.random.default_rng(seed)
    d = a.mean(axis=0) - b.mean(axis=0)
    means = np.empty(n)
    for i in range(n):
        sa = a[rng.integers(0, len(a), len(a))].mean(axis=0)
        sb = b[rng.integers(0, len(b), len(b))].mean(axis=0)
        tasks = rng.integers(0, a.shape[1], a.shape[1])
        means[i] = (sa[tasks] - sb[tasks]).mean()
    return float(d.mean()), float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


#: the stages that build a world's benchmark (the test split, OmniGAIA format, its media and pages)
WORLD_STAGES = (SEED_TASKS, ANCHOR_FACTS, REWRITE_CANDIDATES, VERIFIED_SAMPLES)


def second_world(base: Params, out: Path, world_seed: int) -> Path:
    """The data root of a world generated with ``seed.world.seed = world_seed``, the other params the
    bench's, built up to its benchmark (a finished build is reused: each stage's lineage record)."""
    from orchestra.pipeline.run import run_stage

    root = out / f"world{world_seed}" / "data"
    data = rooted(base, root)
    data["seed"]["world"]["seed"] = world_seed
    params = parse_params(data)
    for name in WORLD_STAGES:
        run_stage(name, params, root)
    return root


def run_arm(
    args: argparse.Namespace, base: Params, src: Path, world2: Path | None, arm: str, seed: int
) -> dict[str, Any]:
    from orchestra.training.run import train_recipe

    work = args.out / f"{arm}-{seed}"
    done = work / "result.json"
    if done.is_file():  # a finished run of the same arm and seed (delete --out to redo)
        out = json.loads(done.read_text())
    else:
        root = arm_root(src, work / "data")
        tracking = work / "mlflow.db"
        params = arm_params(base, root, tracking, arm, seed, args.init, args.budget_s)
        t0 = time.perf_counter()
        res = train_recipe(ARMS[arm][0], params, root)
        wall = time.perf_counter() - t0
        out = {
            "arm": arm,
            "seed": seed,
            "steps": res.steps,
            "train_wall_s": round(wall, 1),
            "step_s": step_seconds(tracking, res.run_id or ""),
            "model": str(res.model_dir),
            "em": evaluate(params, root, res.model_dir, work / "eval", args.tasks),
        }
        if Path(res.model_dir).parent != root / POLICY_SFT:  # the start's copy, not the arm's policy
            shutil.rmtree(root / POLICY_SFT, ignore_errors=True)
    if world2 is not None and "em_world2" not in out:
        model = Path(out.get("model", ""))
        if not (model / "config.json").is_file():
            raise SystemExit(f"{done} has no second-world score and its policy is gone: delete {work}")
        out["em_world2"] = evaluate(base, world2, model, work / "eval_world2", args.tasks)
    atomic_write_text(done, json.dumps(out, indent=1) + "\n")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=None, help="data folder (default: the params' data_dir)")
    ap.add_argument("--params", type=Path, default=Path("params.yaml"))
    ap.add_argument("--budget-s", type=float, default=150.0, help="seconds per arm and seed, as steps")
    ap.add_argument("--seeds", default="17,18,19")
    ap.add_argument("--init", default="sft@550", help="the start: sft, sft@N (a snapshot) or a directory")
    ap.add_argument("--arms", default=",".join(ARMS))
    ap.add_argument("--tasks", type=int, default=None, help="first N test tasks (default: all)")
    ap.add_argument("--out", type=Path, default=Path("bench_out/recipes"))
    ap.add_argument("--world-seed", type=int, default=8, help="the second world's seed.world.seed (0: none)")
    ap.add_argument(
        "--quick",
        action="store_true",
        help="a smoke run: 60 s per arm (4 steps), one seed, 40 test tasks, no second world",
    )
    args = ap.parse_args()
    if args.quick:
        args.budget_s, args.seeds, args.tasks, args.world_seed = 60.0, "17", 40, 0
    base = load_params(args.params)
    src = args.data or data_root(args.params, base)
    arms = [a for a in args.arms.split(",") if a]
    unknown = [a for a in arms if a not in ARMS]
    if unknown or "sft_continue" not in arms:
        print(f"error: arms {unknown} unknown, or sft_continue (the baseline) missing", file=sys.stderr)
        return 2
    seeds = [int(s) for s in args.seeds.split(",")]
    world2 = second_world(base, args.out, args.world_seed) if args.world_seed else None
    start = run_start(args, base, src, world2)
    results: dict[str, list[dict[str, Any]]] = {a: [] for a in arms}
    for seed in seeds:  # seed-major: an interrupted bench has every arm on its first seeds
        for arm in arms:
            results[arm].append(run_arm(args, base, src, world2, arm, seed))
    report(results, start, "em", "test split")
    if world2 is not None:
        report(results, start, "em_world2", f"second world (seed.world.seed {args.world_seed})")
    return 0


def run_start(args: argparse.Namespace, base: Params, src: Path, world2: Path | None) -> dict[str, Any]:
    """The start policy's own EM on the same tasks (what every arm moves from), on each split."""
    from orchestra.training.common import init_policy

    out = args.out / "start"
    done = out / "em.json"
    start = init_policy(src, args.init)
    em = json.loads(done.read_text()) if done.is_file() else {}
    if "em" not in em:
        em["em"] = evaluate(base, src, start, out / "eval", args.tasks)
    if world2 is not None and "em_world2" not in em:
        em["em_world2"] = evaluate(base, world2, start, out / "eval_world2", args.tasks)
    atomic_write_text(done, json.dumps(em) + "\n")
    return em


def report(results: dict[str, list[dict[str, Any]]], start: dict[str, Any], key: str, split: str) -> None:
    """The table and ``RESULT`` line of one split (``key``: the results' scores on it)."""
    ids = sorted(start[key])
    per_seed = {a: np.array([[r[key][t] for t in ids] for r in rs], float) for a, rs in results.items()}
    base = per_seed["sft_continue"]
    print(f"{split}: start policy EM {np.mean([start[key][t] for t in ids]):.3f} on {len(ids)} tasks")
    w = max(len(a) for a in results)
    head = f"{'arm':{w}s} {'EM':>6s} {'seeds':>17s} {'minus sft_continue [95%]':>30s}"
    print(f"{head} {'steps':>11s} {'s/step':>7s}")
    rows = {}
    for arm, rs in results.items():
        d, lo, hi = seed_task_interval(per_seed[arm], base)
        ems = [np.mean([r[key][t] for t in ids]) for r in rs]
        steps = [r["steps"] for r in rs]
        cost = statistics.median(r["step_s"] for r in rs)
        rows[arm] = (float(np.mean(ems)), d, lo, hi, cost)
        print(
            f"{arm:{w}s} {np.mean(ems):6.3f} {'/'.join(f'{e:.3f}' for e in ems):>17s} "
            f"{d:+9.3f} [{lo:+.3f}, {hi:+.3f}]     {'/'.join(map(str, steps)):>11s} {cost:7.2f}"
        )
    order = sorted(rows, key=lambda a: -rows[a][0])
    dag = max((a for a in rows if a.startswith("dagrpo")), key=lambda a: rows[a][0], default=None)
    line = f"RESULT recipes split={key} order={'>'.join(order)}"
    if dag:
        _, d, lo, hi, cost = rows[dag]
        line += f" dagrpo_minus_sft={d:+.3f} [{lo:+.3f}, {hi:+.3f}] ({dag})"
        if "grpo" in rows:
            line += f" step_cost_grpo_over_dagrpo={rows['grpo'][4] / cost:.1f}"
    print(line)


if __name__ == "__main__":
    sys.exit(main())
