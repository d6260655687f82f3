"""Latency of every default tool (median and p95 per call) on a generated world; code executor ≤ 150 ms.

Usage: python bench/tools_latency.py [--world DIR] [--calls N] [--threshold-ms 150] [--budget-s 20]
Without --world a small world is generated into a temporary folder. Prints one row per tool and a final
RESULT line; exits 1 when the code executor's median is over the threshold or a tool cannot be measured.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from orchestra.config import ToolParams, WorldParams
from orchestra.tools.base import Tool
from orchestra.tools.pages import PageStore
from orchestra.tools.registry import default_registry

SNIPPETS = [
    "sum(range(1000))",
    "import math\nround(math.sqrt(2) * 1000, 3)",
    "words = 'the quick brown fox jumps'.split()\nsorted(words, key=len)[-1]",
    "print('hello')\n1 + 1",
    "from fractions import Fraction\nFraction(3, 4) + Fraction(1, 6)",
    "[n for n in range(2, 60) if all(n % d for d in range(2, n))]",
    "import json\njson.dumps({'a': [1, 2, 3]})",
    "x = 1234 * 5678\nx % 97",
]
EXTRA_ARGS: dict[str, dict[str, Any]] = {"image_crop": {"box": [0, 0, 64, 64]}}  # beyond the media path
MEDIA = {"image": (".jpg", ".jpeg", ".png"), "audio": (".wav",), "video": (".mp4",)}
# Tools timed only on the world media kind they read (others would fail fast and skew the figure).
MEANT_FOR = {
    "image_read_chart": "chart",
    "audio_dtmf": "dtmf",
    "audio_morse": "morse",
    "audio_tones": "beeps",
}


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def measure(tool: Tool, inputs: list[dict[str, Any]], calls: int, budget_s: float) -> dict[str, Any]:
    """Call ``tool`` ``calls`` times cycling through ``inputs`` (fewer, but at least 3, once ``budget_s``
    is spent); wall time per call in milliseconds."""
    times, ok, errors = [], 0, []
    begin = time.perf_counter()
    for i in range(calls):
        if i >= 3 and time.perf_counter() - begin > budget_s:
            break
        start = time.perf_counter()
        obs = tool(**inputs[i % len(inputs)])
        times.append((time.perf_counter() - start) * 1000)
        ok += obs.ok
        if not obs.ok and len(errors) < 2:
            errors.append(obs.error)
    return {
        "median": statistics.median(times),
        "p95": p95(times),
        "first": times[0],
        "ok": ok,
        "n": len(times),
        "errors": errors,
    }


def inputs_for(tool: Tool, world: Path, pages: PageStore) -> list[dict[str, Any]] | None:
    if tool.name == "web_search":
        return [{"query": p.title} for p in pages.pages]
    if tool.name == "page_browser":
        return [{"url": p.url} for p in pages.pages]
    if tool.name == "code_executor":
        return [{"code": c} for c in SNIPPETS]
    kind = tool.name.split("_", 1)[0]
    if kind in MEDIA and "path" in tool.input_schema.get("properties", {}):
        files = sorted(f for f in (world / "media").rglob("*") if f.suffix.lower() in MEDIA[kind])
        meant = MEANT_FOR.get(tool.name)
        if meant is not None:  # time the tool on what it reads (the bench may look at the truth)
            rows = (world / "truth" / "media.jsonl").read_text().splitlines()
            kinds = {r["path"]: r["kind"] for r in map(json.loads, rows)}
            files = [f for f in files if kinds.get(f.relative_to(world / "media").as_posix()) == meant]
        return [{"path": str(f), **EXTRA_ARGS.get(tool.name, {})} for f in files] or None
    return None


def run(world: Path, calls: int, threshold_ms: float, budget_s: float = 20.0) -> int:
    pages = PageStore.from_world(world)
    registry = default_registry(world, ToolParams())
    rows, unmeasured = {}, []
    print(f"world: {world} ({len(pages)} pages); up to {calls} calls per tool, {budget_s:g} s budget each")
    print(f"{'tool':<18} {'median ms':>10} {'p95 ms':>10} {'first ms':>10} {'ok':>7}")
    for tool in registry:
        inputs = inputs_for(tool, world, pages)
        if not inputs:
            unmeasured.append(tool.name)
            print(f"{tool.name:<18} {'no input of its kind in the world':>40}")
            continue
        row = rows[tool.name] = measure(tool, inputs, calls, budget_s)
        print(
            f"{tool.name:<18} {row['median']:>10.1f} {row['p95']:>10.1f} {row['first']:>10.1f} "
            f"{row['ok']:>3}/{row['n']:<3}" + (f"  e.g. {row['errors'][0][:80]}" if row["errors"] else "")
        )
    registry.close()
    code = rows.get("code_executor")
    code_ok = code is not None and code["median"] <= threshold_ms and code["ok"] == code["n"]
    passed = code_ok and not unmeasured
    failing = [name for name, row in rows.items() if row["ok"] < row["n"]]  # timed, but some calls failed
    summary = " ".join(f"{name}={row['median']:.1f}/{row['p95']:.1f}" for name, row in rows.items())
    print(
        f"RESULT tools_latency pass={str(passed).lower()} code_executor_median_ms="
        f"{code['median'] if code else float('nan'):.1f} threshold_ms={threshold_ms:g} "
        f"unmeasured={','.join(unmeasured) or 'none'} with_failures={','.join(failing) or 'none'} "
        f"median/p95_ms: {summary}"
    )
    return 0 if passed else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world", type=Path, help="a generated world (or seed_tasks output) folder")
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--threshold-ms", type=float, default=150.0)
    parser.add_argument("--budget-s", type=float, default=20.0, help="time per tool before stopping early")
    args = parser.parse_args(argv)
    if args.world is not None:
        return run(args.world, args.calls, args.threshold_ms, args.budget_s)
    from orchestra.world import generate_world

    with tempfile.TemporaryDirectory(prefix="orchestra-bench-") as tmp:
        world = Path(tmp) / "world"
        generate_world(WorldParams(n_seeds=60, n_entities=60), world)  # 60 seeds: every media kind
        return run(world, args.calls, args.threshold_ms, args.budget_s)


if __name__ == "__main__":
    sys.exit(main())
