"""The ``benchmark_scores`` stage: every ladder row on each benchmark shard, merged once all shards are in.

Shard ``k`` of ``eval.shards`` holds every n-th task of the first ``eval.tasks`` (from the k-th), each
row in ``data/benchmark_scores/shard-<k>/<row>/`` (items, results.json, summary.json) with a
``shard.json`` naming the inputs it was built from. Dagster partitions the asset by shard, so a
Kubernetes or Celery executor can spread the shards over machines; a local run covers them all. On
one machine the (shard, row) units run side by side in ``eval.workers`` spawned processes (a row's
policy decodes one token at a time in Python, so one process keeps about one core busy), the
trained rows first: they take the longest. When every shard of the same inputs is present, the
merge writes ``<row>/results.json`` and ``<row>/summary.json`` over all tasks in benchmark order,
``scores.json`` (every row's summary) and ``data/benchmark_metrics.json`` (the DVC metrics).
"""

from __future__ import annotations

import json
import multiprocessing
import shutil
import time
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from orchestra.config import Params
from orchestra.data.store import (
    RUN_DIR,
    SCORES_FILE,
    TIMING_FILE,
    benchmark_file,
    run_dir,
    stage_dir,
    stage_lock,
)
from orchestra.errors import StageError
from orchestra.evaluation.report import (
    BY_KEY,
    METRICS_FILE,
    Row,
    flat_metrics,
    read_timing,
)
from orchestra.evaluation.scoring import latency_summary
from orchestra.io import atomic_dir, atomic_write_text, dump_json
from orchestra.lineage import LINEAGE_FILE
from orchestra.stages import BENCHMARK_SCORES
from orchestra.tools.pool import usable_cores

__all__ = ["SHARD_FILE", "build_benchmark_scores", "eval_workers", "shard_dir", "shard_keys"]

SHARD_FILE = "shard.json"
#: in a shard's run record: each row's wall seconds on that shard
WALL_FILE = "wall.json"


def shard_keys(params: Params) -> list[str]:
    """The Dagster partition keys of benchmark_scores."""
    return [f"shard-{k}" for k in range(params.eval.shards)]


def shard_dir(root: Path, k: int) -> Path:
    return stage_dir(root, BENCHMARK_SCORES) / f"shard-{k}"


def _shard_info(root: Path, k: int) -> dict[str, Any] | None:
    path = shard_dir(root, k) / SHARD_FILE
    try:
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
    except json.JSONDecodeError:
        return None


def _row_config(params: Params, root: Path, row: Row, out: Path, shard: tuple[int, int] | None) -> Any:
    from orchestra.evaluation.runner import EvalConfig

    ep = params.eval
    floor = row.policy == "untrained"  # never valid: a cut-down run shows it (docs/concepts/evaluation.md)
    return EvalConfig(
        benchmark=benchmark_file(root),
        out=out,
        system=row.system,
        policy=row.policy_arg(root),
        limit=min(ep.tasks or 10**9, ep.untrained_tasks) if floor else ep.tasks,
        concurrency=ep.concurrency,
        samples=ep.sc_k if row.policy != "oracle" else 1,
        judge=ep.judge_provider,
        max_turns=ep.untrained_turns if floor else ep.max_turns,
        data_dir=root,
        seed=params.train.seed,
        shard=shard,
    )


def _run_unit(params: Params, root: Path, row_key: str, k: int, out: Path) -> float:
    """One row on shard ``k`` into ``out``; its wall seconds."""
    from orchestra.evaluation.runner import run_eval

    t = time.perf_counter()
    run_eval(params, _row_config(params, root, BY_KEY[row_key], out, (k, params.eval.shards)))
    return round(time.perf_counter() - t, 1)


def _init_worker(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)  # the workers share the cores: intra-op threads would only contend


def eval_workers(params: Params, units: int) -> int:
    """``eval.workers`` resolved for ``units`` units: None = the usable cores; never more than units."""
    w = params.eval.workers
    return max(1, min(usable_cores() if w is None else w, units))


def _run_shards(params: Params, root: Path, rows: list[Row], shards: list[int], key: str) -> None:
    """Every row on each of ``shards``; a shard's folder replaces the old one only when all its rows are
    in, and a failing row leaves every shard of this call as it was."""
    n = params.eval.shards
    # trained rows first (minutes each, the oracle rows seconds), so the last unit to start is short
    units = [(k, r) for r in rows if r.policy != "oracle" for k in shards]
    units += [(k, r) for r in rows if r.policy == "oracle" for k in shards]
    workers = eval_workers(params, len(units))
    with ExitStack() as stack:
        tmp = {k: stack.enter_context(atomic_dir(shard_dir(root, k))) for k in shards}
        walls: dict[int, dict[str, float]] = {k: {} for k in shards}
        if workers == 1:
            for k, r in units:
                walls[k][r.key] = _run_unit(params, root, r.key, k, tmp[k] / r.key)
        else:
            ctx = multiprocessing.get_context("spawn")  # fresh interpreters: the caller runs threads
            threads = max(1, usable_cores() // workers)
            with ProcessPoolExecutor(workers, ctx, _init_worker, (threads,)) as pool:
                futures: list[tuple[int, str, Future[float]]] = [
                    (k, r.key, pool.submit(_run_unit, params, root, r.key, k, tmp[k] / r.key))
                    for k, r in units
                ]
                try:
                    for k, key_, f in futures:
                        walls[k][key_] = f.result()
                except BaseException:
                    pool.shutdown(wait=True, cancel_futures=True)
                    raise
        for k in shards:
            info = {"shard": k, "of": n, "inputs": key, "rows": [r.key for r in rows]}
            atomic_write_text(tmp[k] / SHARD_FILE, dump_json(info) + "\n")
            atomic_write_text(run_dir(tmp[k]) / WALL_FILE, dump_json(walls[k]) + "\n")


def _merge(params: Params, root: Path, rows: list[Row], infos: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """Every row over all shards, in benchmark order; scores.json and the DVC metrics; each row's wall
    seconds and latencies (the shards' clocks) in the stage's run record (:data:`TIMING_FILE`)."""
    from orchestra.evaluation.items import latencies, load_clocks, write_summary

    out = stage_dir(root, BENCHMARK_SCORES)
    scores: dict[str, Any] = {}
    timing: dict[str, Any] = {}
    for row in rows:
        cfg = _row_config(params, root, row, out / row.key, None)
        items: list[dict[str, Any]] = []
        clocks: dict[str, Any] = {}
        for k in sorted(infos):
            src = shard_dir(root, k) / row.key
            clocks.update(load_clocks(src))
            for item in json.loads((src / "results.json").read_text(encoding="utf-8")):
                if item.get("trajectory"):
                    item["trajectory"] = f"../shard-{k}/{row.key}/{item['trajectory']}"
                items.append(item)
        order = {str(t.id): i for i, t in enumerate(_tasks(cfg))}
        items.sort(key=lambda it: order[str(it["id"])])
        with atomic_dir(out / row.key) as tmp:
            summary = write_summary(
                tmp, items, system=cfg.system, policy=cfg.portable_policy(), samples=cfg.samples
            )
        label = row.label
        if row.policy == "untrained":
            label += f" ({cfg.limit} tasks, {cfg.max_turns} turn(s) at most)"
        scores[row.key] = {
            "label": label,
            "system": row.system,
            "policy": row.policy,
            **{k: v for k, v in summary.items() if k not in ("system", "policy")},
        }
        walls = [_shard_wall(root, k).get(row.key, 0.0) for k in sorted(infos)]
        timing[row.key] = {
            "wall_s": round(sum(walls), 1),
            "latency_s": latency_summary(latencies(items, clocks)),
        }
    atomic_write_text(out / SCORES_FILE, dump_json(scores) + "\n")
    atomic_write_text(run_dir(out) / TIMING_FILE, dump_json(timing) + "\n")
    # DVC metrics: a file of their own (DVC refuses a metrics file inside a tracked output folder)
    atomic_write_text(Path(root) / METRICS_FILE, dump_json(flat_metrics(scores)) + "\n")
    return scores


def _shard_wall(root: Path, k: int) -> dict[str, float]:
    path = run_dir(shard_dir(root, k)) / WALL_FILE
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def _tasks(cfg: Any) -> list[Any]:
    from orchestra.schemas import read_tasks_json

    return read_tasks_json(cfg.benchmark)[: cfg.limit]


def _merge_if_complete(
    params: Params, root: Path, rows: list[Row], want: tuple[str, int, list[str]]
) -> dict[str, Any]:
    """Merge the rows when every shard is built from ``want`` (key, shards, rows); the stage's metadata."""
    n = params.eval.shards
    infos = {k: _shard_info(root, k) or {} for k in range(n)}
    ready = {k: i for k, i in infos.items() if (i.get("inputs"), i.get("of"), i.get("rows")) == want}
    meta: dict[str, Any] = {"rows": len(rows), "shards": n, "complete": len(ready) == n}
    if len(ready) == n:
        out = stage_dir(root, BENCHMARK_SCORES)
        keep = {f"shard-{k}" for k in range(n)} | {r.key for r in rows} | {SCORES_FILE, LINEAGE_FILE, RUN_DIR}
        for old in out.iterdir():  # rows and shards of an earlier layout or eval.shards
            if old.name not in keep and not old.name.startswith("."):
                shutil.rmtree(old) if old.is_dir() else old.unlink()
        scores = _merge(params, root, rows, ready)
        meta.update(
            tasks=max((s["n"] for s in scores.values()), default=0),
            accuracy={k: round(v["accuracy"]["em"]["mean"], 4) for k, v in scores.items()},
        )
    return meta


def build_benchmark_scores(
    params: Params, root: Path, shards: list[int] | None = None, key: str = ""
) -> dict[str, Any]:
    """Evaluate each row of ``eval.rows`` on ``shards`` (default: all) of the embedded benchmark; a
    shard already built from the same inputs (``key``, the stage's lineage digest) is kept. Merges
    when every shard is in (``complete`` in the result says whether it did)."""
    root = Path(root)
    n = params.eval.shards
    shards = list(range(n)) if shards is None else shards
    bad = [k for k in shards if not 0 <= k < n]
    if bad:
        raise StageError(f"benchmark shards {bad}: eval.shards is {n}, so shards are 0..{n - 1}")
    rows = [BY_KEY[k] for k in params.eval.rows]
    for row in rows:
        row.policy_arg(root)  # every model present before any row runs
    t0 = time.perf_counter()
    want = (key, n, params.eval.rows)
    ran = [
        k
        for k in shards
        if ((i := _shard_info(root, k) or {}).get("inputs"), i.get("of"), i.get("rows")) != want
    ]
    if ran:
        _run_shards(params, root, rows, ran, key)
    with stage_lock(root, BENCHMARK_SCORES):  # partitions on other workers may complete the set too
        meta = _merge_if_complete(params, root, rows, want)
    timing = read_timing(root) if meta["complete"] else {}
    meta["run"] = {"wall_s": round(time.perf_counter() - t0, 1), "shards_run": ran, "timing": timing}
    return meta
