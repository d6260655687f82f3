"""Verification throughput: candidates verified per second, all five checks, builtin providers.

Usage: python bench/verify_throughput.py [--data data] [--repeat 2]

Reads a data folder after ``make pipeline`` (seed_tasks, anchor_facts, rewrite_candidates) and runs
``orchestra.data.verify.verify_report`` on every candidate ``--repeat`` times in one process: the
first pass is cold (a fresh sandbox pool to start, pages read from disk), the later ones warm (the
same tools, sandbox workers running; each pass still looks every page up anew). Prints ms per
candidate per check for each pass and a final RESULT line with both rates; exits 1 when the warm
rate is under the target (20 candidates/s).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from orchestra.config import Params
from orchestra.data import store
from orchestra.data.store import read_anchors, read_candidates, read_seed_tasks
from orchestra.data.verify import verification_tools, verify_report

TARGET = 20.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=Path("data"))
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    params = Params()
    seeds, anchors, cands = read_seed_tasks(args.data), read_anchors(args.data), read_candidates(args.data)
    seeds_dir = store.seeds_dir(args.data)
    rates = []
    with verification_tools(seeds_dir, params.tools, params.verify) as tools:
        for k in range(max(1, args.repeat)):
            t0 = time.perf_counter()
            report = verify_report(seeds, anchors, cands, seeds_dir, params.verify, tools)
            took = time.perf_counter() - t0
            rates.append(len(cands) / took)
            label = "cold" if k == 0 else "warm"
            print(f"pass {k + 1} ({label}): {len(cands)} candidates in {took:.2f} s = {rates[-1]:.1f}/s")
            print(
                "  ms per candidate: "
                + ", ".join(f"{c} {v:.2f}" for c, v in report.ms_per_candidate().items())
            )
            print(f"  pass rates: {', '.join(f'{c} {v:.3f}' for c, v in report.pass_rates().items())}")
    warm = rates[-1] if len(rates) > 1 else rates[0]
    passed = warm >= TARGET
    print(
        f"RESULT verify_throughput pass={str(passed).lower()} candidates={len(cands)} "
        f"cold_per_s={rates[0]:.1f} warm_per_s={warm:.1f} target_per_s={TARGET:g}"
    )
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
