"""Speech read speed: an older read (a git revision) and this checkout's, on the same world files, one run.

Usage: python bench/speech_speed.py [--world DIR] [--old REV] [--new REV] [--files N] [--cold N] [--cache DIR]

Without --world a world with the default params (params.yaml) is generated into a temporary folder;
the files are its spoken numbers and names (the first --files), read by ``audio_speech`` as the
pipeline builds it (the names are the world's page titles). Each read runs in fresh interpreters:
the old one from ``git archive REV orchestra``, the new one from this checkout (or --new REV).

- templates: one process per read renders the templates into a shared cache folder first (a one-off
  build per world; its time is printed, not counted)
- cold: --cold processes each make one call on a different file (the first call's latency: templates
  read from the cache, compiled code loaded)
- warm: one process calls every file in turn after one unmeasured call

Prints p50/p95 of both reads, cold and warm, how many outputs are identical (value, words, margin)
and each read's accuracy against the world's truth, then
``RESULT speech_speedup=<old warm p50 / new warm p50> cold_speedup=... identical=k/n``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
#: the last commit with the numpy diagonal DTW and compressed float64 templates
OLD = "44413a6"


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def worker(world: Path, files: list[str], warm_up: bool) -> dict[str, Any]:
    """Read ``files`` with the speech tool of whichever ``orchestra`` this interpreter imports."""
    import orchestra
    from orchestra.tools.pages import PageStore
    from orchestra.tools.registry import speech_names
    from orchestra.tools.speech import AudioSpeech

    tool = AudioSpeech(names=speech_names(PageStore.from_world(world)))
    if warm_up:
        tool(path=files[0])
    out = []
    for f in files:
        t0 = time.perf_counter()
        obs = tool(path=f)
        took = time.perf_counter() - t0
        d = obs.data
        out.append({"s": took, "ok": obs.ok, "value": d.get("value"), "words": d.get("words"),
                    "margin": d.get("margin"), "loaded": d.get("loaded")})  # fmt: skip
    return {"package": orchestra.__file__, "calls": out}


def run_worker(tree: Path, world: Path, files: list[str], warm_up: bool, cache: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree), "ORCHESTRA_CACHE_DIR": str(cache)}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", str(world), "--warm-up", str(warm_up)]
    proc = subprocess.run(
        cmd, input=json.dumps(files), capture_output=True, text=True, env=env, cwd=cache, check=False
    )
    if proc.returncode:
        raise SystemExit(f"the read in {tree} failed:\n{proc.stderr[-3000:]}")
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    if not Path(res["package"]).resolve().is_relative_to(tree.resolve()):
        raise SystemExit(f"the worker imported {res['package']}, not the tree {tree}")
    return res


def speech_files(world: Path, n: int) -> tuple[list[str], list[str]]:
    """The first ``n`` spoken files of the world and what each says (its truth record's text)."""
    files, truth = [], []
    for line in (world / "truth" / "media.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if rec["kind"] == "speech" and len(files) < n:
            files.append(str(world / "media" / rec["path"]))
            truth.append(str(rec["facts"]["text"]))
    if not files:
        raise SystemExit(f"{world}: no spoken files (is speech on in the world params?)")
    return files, truth


def measure(tree: Path, world: Path, files: list[str], cold: int, cache: Path) -> dict[str, Any]:
    t0 = time.perf_counter()
    run_worker(tree, world, files[:1], False, cache)  # renders the templates unless cached
    build = time.perf_counter() - t0
    firsts = [run_worker(tree, world, [f], False, cache)["calls"][0] for f in files[:cold]]
    warm = run_worker(tree, world, files, True, cache)["calls"]
    return {"build_s": build, "cold": [c["s"] for c in firsts], "loaded": firsts[0]["loaded"], "warm": warm}


def rev_tree(rev: str, out: Path) -> Path:
    """``orchestra/`` as of git revision ``rev``, extracted under ``out``."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", rev, "orchestra"], capture_output=True, check=False
    )
    if archive.returncode:
        raise SystemExit(f"git archive {rev}: {archive.stderr.decode()[-500:]}")
    out.mkdir(parents=True)
    (out / "tree.tar").write_bytes(archive.stdout)
    with tarfile.open(out / "tree.tar") as tar:
        tar.extractall(out / "tree", filter="data")
    return out / "tree"


def report(name: str, m: dict[str, Any], truth: list[str]) -> float:
    warm = [c["s"] for c in m["warm"]]
    right = sum(str(c["value"]) == t for c, t in zip(m["warm"], truth, strict=True))
    print(
        f"{name:4s} cold p50 {statistics.median(m['cold']):6.3f} s p95 {p95(m['cold']):6.3f} | warm p50 "
        f"{statistics.median(warm):6.3f} s p95 {p95(warm):6.3f} | right {right}/{len(truth)} | "
        f"templates built in {m['build_s']:.1f} s | first call loaded {m['loaded']}"
    )
    return statistics.median(warm)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--world", type=Path, default=None)
    ap.add_argument("--old", default=OLD, help="git revision of the older read")
    ap.add_argument("--new", default=None, help="git revision of the newer read (default: this checkout)")
    ap.add_argument(
        "--cache", type=Path, default=None, help="template cache folder to keep (default: a new one)"
    )
    ap.add_argument("--files", type=int, default=60)
    ap.add_argument("--cold", type=int, default=5)
    ap.add_argument("--worker", type=Path, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--warm-up", default="False", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker is not None:
        print(json.dumps(worker(args.worker, json.loads(sys.stdin.read()), args.warm_up == "True")))
        return
    with tempfile.TemporaryDirectory() as tmp:
        world = args.world.resolve() if args.world else None  # the workers run in the cache folder
        if world is None:
            from orchestra.config import load_params
            from orchestra.world import generate_world

            world = Path(tmp) / "world"
            generate_world(load_params(ROOT / "params.yaml").seed.world, world)
        files, truth = speech_files(world, args.files)
        cache = args.cache or Path(tmp) / "cache"
        cache.mkdir(parents=True, exist_ok=True)
        trees = Path(tmp) / "old", Path(tmp) / "new"
        old = measure(rev_tree(args.old, trees[0]), world, files, args.cold, cache)
        new_tree = ROOT if args.new is None else rev_tree(args.new, trees[1])
        new = measure(new_tree, world, files, args.cold, cache)
        print(f"{len(files)} files of {world}; old = {args.old}, new = {args.new or 'this checkout'}")
        old_p50, new_p50 = report("old", old, truth), report("new", new, truth)
        keys = ("value", "words", "margin")
        same = sum(all(a[k] == b[k] for k in keys) for a, b in zip(old["warm"], new["warm"], strict=True))
        cold = statistics.median(old["cold"]) / statistics.median(new["cold"])
        speedup = old_p50 / new_p50
        print(f"RESULT speech_speedup={speedup:.2f} cold_speedup={cold:.2f} identical={same}/{len(files)}")


if __name__ == "__main__":
    main()
