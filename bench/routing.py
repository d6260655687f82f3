"""Does routing matter? Accuracy and cost of four ways to pick experts, the decomposition fixed.

Usage: python bench/routing.py [--world DIR] [--n-seeds 72] [--seed 7] [--max-parallel 4]

Every world task is answered by the ``orchestra`` system driven by the expert (the oracle's
decomposition, the same for all four), once per routing, in the same run:

- (a) cheapest: every node on the cheapest expert with its skill
- (b) strongest: every node on the expert with the highest calibrated level on its skill
- (c) selection: the cost-aware match of the node's demand against the calibrated skill vectors
- (d) selection + escalation: (c), and a result below ``agent.escalation_confidence`` (or a failure)
  is re-delegated to a stronger expert (the expert's documented rule)

Cost is the trajectory's cost (expert prices from the registry + tool prices). Targets: (a) at
least 10 points below (b); (d) within 1 point of (b) at <= 60 % of (b)'s cost. Prints one row
per routing and ``RESULT``; exits 1 when a target is missed. Without --world a world of
--n-seeds seeds (seed --seed, the default noise ranges) is generated in a temporary folder.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from orchestra.agent.policies import OraclePolicy
from orchestra.agent.runtime import open_runtime
from orchestra.agent.systems import run_task_sync
from orchestra.config import AgentParams, ToolParams, WorldParams
from orchestra.schemas import read_tasks_json

ROUTINGS = {
    "a cheapest": {"routing": "cheapest", "escalate": False},
    "b strongest": {"routing": "strongest", "escalate": False},
    "c selection": {"routing": "selection", "escalate": False},
    "d selection+escalation": {"routing": "selection", "escalate": True},
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world", type=Path, default=None)
    ap.add_argument("--n-seeds", type=int, default=72)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--max-parallel", type=int, default=4)
    args = ap.parse_args()

    tmp = None
    world = args.world
    if world is None:
        from orchestra.world import generate_world

        tmp = tempfile.TemporaryDirectory(prefix="routing-world-")
        world = Path(tmp.name)
        generate_world(
            WorldParams(seed=args.seed, n_seeds=args.n_seeds, n_entities=max(60, args.n_seeds)), world
        )
    tasks = [t for t in read_tasks_json(world / "tasks.json") if t.solution_program]
    agent = AgentParams(max_parallel=args.max_parallel)
    results: dict[str, tuple[int, float, float, int]] = {}
    with open_runtime(agent, ToolParams(), pages=world, media_root=world / "media") as env:
        print(f"{len(tasks)} tasks; pool: {', '.join(env.backends.names())}")
        head = ("routing", "correct", "accuracy", "cost", "cost/task", "wall s", "nodes")
        print(f"{head[0]:<24}" + "".join(f"{h:>10}" for h in head[1:]))
        for label, kw in ROUTINGS.items():
            t0 = time.perf_counter()
            correct, cost, nodes = 0, 0.0, 0
            for task in tasks:
                policy = OraclePolicy(task, agent, **kw)  # type: ignore[arg-type]
                traj = run_task_sync(task, "orchestra", policy, env)
                correct += traj.answer == task.answer
                cost += traj.cost
                nodes += int(traj.accounting.get("subtasks", 0))
            wall = time.perf_counter() - t0
            results[label] = (correct, cost, wall, nodes)
            n = len(tasks)
            cells = (
                f"{correct}",
                f"{correct / n:.3f}",
                f"{cost:.4f}",
                f"{cost / n:.5f}",
                f"{wall:.1f}",
                f"{nodes}",
            )
            print(f"{label:<24}" + "".join(f"{x:>10}" for x in cells))
    if tmp is not None:
        tmp.cleanup()
    n = len(tasks)
    acc = {k: v[0] / n for k, v in results.items()}
    cost = {k: v[1] for k, v in results.items()}
    a, b, c, d = list(ROUTINGS)
    gap_ab = 100 * (acc[b] - acc[a])
    gap_bd = 100 * (acc[b] - acc[d])
    ratio = cost[d] / cost[b] if cost[b] else float("inf")
    passed = gap_ab >= 10 and gap_bd <= 1 and ratio <= 0.6
    print(
        f"(b)-(a) = {gap_ab:.1f} points (target >= 10); (b)-(d) = {gap_bd:.1f} points (target <= 1); "
        f"cost (d)/(b) = {ratio:.2f} (target <= 0.60); (c) accuracy {acc[c]:.3f}"
    )
    print(
        f"RESULT routing pass={str(passed).lower()} tasks={n} cheapest={acc[a]:.3f} strongest={acc[b]:.3f} "
        f"selection={acc[c]:.3f} escalation={acc[d]:.3f} cost_ratio_d_b={ratio:.3f} "
        f"gap_b_a_points={gap_ab:.1f} gap_b_d_points={gap_bd:.1f}"
    )
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
