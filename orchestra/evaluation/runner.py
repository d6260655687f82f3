"""`orchestra eval`: run a system and policy over an OmniGAIA-format benchmark, resumably.

Each finished item is appended to ``items.jsonl`` in ``--out`` as soon as it ends (one line, flushed
and fsynced), so a killed run loses at most the items in flight and a rerun skips what is there. An
item keeps the task's own fields and adds what OmniGAIA's tooling reads (``predicted_answer``,
``em_score``, ``llm_equal``, ``tool_call_num``, ``messages``) and ours (the trajectory file, tokens,
cost, the run's ``error``). What the clock measured (each item's latency, its trajectory's timings)
goes to the run record ``_run/clock.jsonl`` beside it, and the latency percentiles to
``_run/timing.json``: the rest of ``--out`` is the same for the same benchmark, policy and data. An
item that cannot run (a media file missing, no program for the oracle, a policy error) is recorded
wrong with its ``not_run`` reason, never dropped. At the end ``results.json`` (the items as one
list, the shape OmniGAIA's re-evaluation script reads) and ``summary.json`` (:func:`summarize`, plus
pass@1 / sc@K / pass@K with ``--samples K``) are written atomically from every item, in benchmark
order, so a resumed run's summary equals an uninterrupted one's.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from orchestra.config import AgentParams, Params, ProviderSpec
from orchestra.data.store import CLOCK_FILE, model_dir, run_dir, split_clock
from orchestra.errors import OrchestraError, RecordError
from orchestra.evaluation.items import (
    ITEMS_FILE,
    append_line,
    base_item,
    failed_item,
    item_messages,
    latencies,
    load_clocks,
    load_items,
    scored,
    tool_calls,
    vote,
    write_summary,
    write_timing,
)
from orchestra.evaluation.scoring import LLMJudge, extract_answer
from orchestra.io import atomic_write_text, dir_digest, dump_json, media_file, record_dict
from orchestra.schemas import Task, read_tasks_json

__all__ = ["EvalConfig", "EvalError", "run_eval"]

RUN_FILE = "run.json"


class EvalError(OrchestraError):
    """An evaluation that cannot start: a bad benchmark, policy or output folder."""


@dataclass(frozen=True)
class EvalConfig:
    """One evaluation: which benchmark, where its media are, which system and policy, where to write.

    ``policy``: ``oracle`` (replays each task's ``solution_program``), ``untrained`` (the SFT
    policy's architecture and tokenizer with fresh weights: the ladder's floor),
    ``checkpoint:DIR`` (a trained model directory), ``openai:MODEL`` (params' ``openai`` provider
    with that model) or a key of params ``providers``. ``samples`` > 1 runs each item that many
    times (a trained policy sampling at ``temperature``) and answers by majority vote.
    ``registry`` swaps the expert registry file (plug-and-play: experts the policy never saw);
    ``pool`` keeps only the first N experts of the pool (the pool-scaling curve). ``data_dir``: the
    project's data folder, for its perception cache and the SFT model ``untrained`` copies."""

    benchmark: Path
    out: Path
    system: str = "orchestra"
    policy: str = "oracle"
    media_root: Path | None = None
    world: Path | None = None
    limit: int | None = None
    concurrency: int = 1
    samples: int = 1
    temperature: float = 0.7
    judge: str | None = None
    registry: Path | None = None
    pool: int | None = None
    max_turns: int = 8
    data_dir: Path | None = None
    seed: int = 0
    shard: tuple[int, int] | None = None  # (k, n): only every n-th task from the k-th (a benchmark shard)
    traces: bool = False  # log an MLflow trace per item (evaluation/traces.py) once the run is done
    extra: Mapping[str, Any] = field(default_factory=dict)

    def media(self) -> Path:
        return self.media_root or self.benchmark.parent / "media"

    def kb(self) -> Path | None:
        if self.world is not None:
            return self.world
        return self.benchmark.parent if (self.benchmark.parent / "kb").is_dir() else None

    def fingerprint(self) -> dict[str, Any]:
        """What makes two runs the same run (``limit`` and ``concurrency`` do not)."""
        digest = hashlib.sha256(self.benchmark.read_bytes()).hexdigest()
        keep = ("system", "samples", "temperature", "judge", "pool", "max_turns", "seed", "shard")
        out = {"benchmark_sha256": digest, **{k: _plain(asdict(self)[k]) for k in keep}}
        out["policy"] = self.portable_policy()
        out["registry"] = None if self.registry is None else self._portable(self.registry)
        if self.policy.startswith("checkpoint:"):  # a retrained model is another run
            out["model_sha256"] = dir_digest(Path(self.policy.split(":", 1)[1]))
        elif self.policy == "untrained":  # fresh weights on the SFT policy's config and tokenizer
            out["model_sha256"] = dir_digest(model_dir(self.data_dir or self.out, "sft"))
        return out

    def _portable(self, path: Path) -> str:
        """``path`` relative to the data folder when it is inside it: a record names no checkout."""
        base = None if self.data_dir is None else Path(self.data_dir).resolve()
        p = Path(path).resolve()
        return p.relative_to(base).as_posix() if base is not None and p.is_relative_to(base) else str(path)

    def portable_policy(self) -> str:
        """``policy`` as records name it: a checkpoint inside the data folder by its relative path."""
        if self.policy.startswith("checkpoint:"):
            return "checkpoint:" + self._portable(Path(self.policy.split(":", 1)[1]))
        return self.policy


def _plain(v: Any) -> Any:
    return str(v) if isinstance(v, Path) else list(v) if isinstance(v, tuple) else v


def _missing_media(task: Task, media: Path) -> list[str]:
    out = []
    for m in task.omni_modal_input:
        try:
            media_file(media, m.path)
        except RecordError:
            out.append(m.path)
    return out


class _Policies:
    """Builds the policy a run asks for, once per run (a trained model is loaded once)."""

    def __init__(self, params: Params, cfg: EvalConfig) -> None:
        self.params, self.cfg = params, cfg
        self._lm: list[Any] | None = None

    def _trained(self) -> list[Any]:
        from orchestra.agent.lm_policy import lm_policy, named_provider, sampling_copy
        from orchestra.agent.policies import PolicyError
        from orchestra.agent.systems import system_format

        p, cfg, agent = self.params, self.cfg, self.params.agent
        name = cfg.policy
        if name == "untrained":
            spec = ProviderSpec(kind="transformers", model=str(_untrained_dir(p, cfg)))
        else:
            try:
                spec = named_provider(name, p.providers)
            except PolicyError as e:
                raise EvalError(f"{e} (or oracle, untrained)") from e
        first = lm_policy(spec, agent, fmt=system_format(cfg.system), name=cfg.portable_policy())  # type: ignore[arg-type]
        out = [first]
        for k in range(1, cfg.samples):
            out.append(sampling_copy(first, cfg.temperature, cfg.seed + k))
        if cfg.samples > 1:
            out[0] = sampling_copy(first, cfg.temperature, cfg.seed)
        return out

    def get(self, task: Task, k: int) -> Any:
        from orchestra.agent.policies import oracle_for

        if self.cfg.policy == "oracle":
            if not task.solution_program:
                raise EvalError("no solution_program: the oracle replays a task's program")
            return oracle_for(task, self.cfg.system, self.params.agent)
        if self._lm is None:
            self._lm = self._trained()
        return self._lm[k]


def _untrained_dir(params: Params, cfg: EvalConfig) -> Path:
    """A model directory with the SFT policy's config, tokenizer and view and fresh weights (cached
    beside the eval output)."""
    src = model_dir(cfg.data_dir or cfg.out, "sft")
    if not (src / "config.json").is_file():
        raise EvalError(f"policy untrained: {src} has no model (materialize policy_sft first)")
    dst = cfg.out / "untrained_model"
    if not (dst / "config.json").is_file():
        import shutil

        import torch
        from transformers import AutoConfig, AutoModelForCausalLM

        torch.manual_seed(cfg.seed)
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(src))
        tmp = cfg.out / "untrained_model.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        model.save_pretrained(tmp)
        for f in src.iterdir():
            if f.is_file() and not f.name.endswith((".safetensors", ".bin")) and f.name != "config.json":
                shutil.copy2(f, tmp / f.name)
        os.replace(tmp, dst)
    return dst


def run_eval(
    params: Params, cfg: EvalConfig, on_item: Callable[[dict[str, Any], int, int], None] | None = None
) -> dict[str, Any]:
    """Evaluate ``cfg`` (see :class:`EvalConfig`); returns the summary (also in ``summary.json``).
    ``on_item(item, done, total)`` is called after each finished item (the CLI's progress bar)."""
    tasks = _tasks_of(cfg)
    run = _claim(cfg)
    done = load_items(cfg.out)
    if cfg.judge and cfg.judge not in params.providers:
        raise EvalError(f"--judge {cfg.judge!r} is not a key of params providers")
    judge = LLMJudge(params.providers[cfg.judge]) if cfg.judge else None
    agent = params.agent
    if cfg.registry is not None:
        agent = agent.model_copy(update={"registry": str(cfg.registry)})
    with _runtime(params, cfg, agent) as env:
        runner = _Runner(cfg, env, _Policies(params.model_copy(update={"agent": agent}), cfg), judge)
        asyncio.run(runner.run([t for t in tasks if str(t.id) not in done], done, len(tasks), on_item))
    items, clocks = [done[str(t.id)] for t in tasks], load_clocks(cfg.out)
    if cfg.traces:
        from orchestra.evaluation.traces import trace_eval

        trace_eval(params, cfg.out, run, tasks, done, clocks, cfg.data_dir or cfg.out)
    write_timing(cfg.out, latencies(items, clocks))
    return write_summary(cfg.out, items, system=cfg.system, policy=cfg.portable_policy(), samples=cfg.samples)


def _tasks_of(cfg: EvalConfig) -> list[Task]:
    """The benchmark's tasks this evaluation runs (its first ``limit``, then its shard's)."""
    from orchestra.agent.systems import SYSTEMS

    if cfg.system not in SYSTEMS:
        raise EvalError(f"unknown system {cfg.system!r}; valid: {', '.join(SYSTEMS)}")
    if cfg.samples < 1 or cfg.concurrency < 1:
        raise EvalError("--samples and --concurrency must be at least 1")
    if not cfg.benchmark.is_file():
        raise EvalError(f"{cfg.benchmark}: no benchmark file")
    tasks = read_tasks_json(cfg.benchmark)[: cfg.limit]
    ids = [str(t.id) for t in tasks]
    if len(set(ids)) != len(ids):  # over every shard: the merge keys items by id
        raise EvalError(f"{cfg.benchmark}: task ids repeat; each item needs its own id")
    if cfg.shard is not None:
        k, n = cfg.shard
        if not 0 <= k < n:
            raise EvalError(f"shard {k} of {n}: k must be in [0, n)")
        tasks = tasks[k::n]
    return tasks


def _claim(cfg: EvalConfig) -> dict[str, Any]:
    """Make ``cfg.out`` this run's (its :data:`RUN_FILE`), or refuse a folder that holds another run;
    returns the run's fingerprint."""
    cfg.out.mkdir(parents=True, exist_ok=True)
    fp = cfg.fingerprint()
    run_file = cfg.out / RUN_FILE
    if run_file.is_file():
        old = json.loads(run_file.read_text(encoding="utf-8"))
        if old != fp:
            diff = sorted(k for k in fp if old.get(k) != fp[k])
            raise EvalError(f"{cfg.out} holds another run (differs in {', '.join(diff)}): use another --out")
    else:
        atomic_write_text(run_file, dump_json(fp) + "\n")
    (cfg.out / "trajectories").mkdir(exist_ok=True)
    run_dir(cfg.out).mkdir(exist_ok=True)
    return fp


def _runtime(params: Params, cfg: EvalConfig, agent: AgentParams) -> AbstractContextManager[Any]:
    """The runtime over the benchmark's pages and media, with the data folder's perception cache."""
    from orchestra.agent.runtime import open_runtime
    from orchestra.backends.pool import backend_pool

    backends = backend_pool(agent, params.providers)
    if cfg.pool is not None:
        backends = _cut_pool(backends, cfg.pool)
    return open_runtime(
        agent,
        params.tools,
        pages=cfg.kb(),
        media_root=cfg.media(),
        cache_dir=cfg.data_dir,
        backends=backends,
        max_turns=cfg.max_turns,
        seed=cfg.seed,
    )


class _Runner:
    """Runs tasks ``cfg.concurrency`` at a time, appending each item and its clock as it ends."""

    def __init__(self, cfg: EvalConfig, env: Any, policies: _Policies, judge: LLMJudge | None) -> None:
        self.cfg, self.env, self.policies, self.judge = cfg, env, policies, judge

    async def run(
        self,
        todo: Sequence[Task],
        done: dict[str, dict[str, Any]],
        total: int,
        on_item: Callable[[dict[str, Any], int, int], None] | None,
    ) -> None:
        gate = asyncio.Semaphore(self.cfg.concurrency)
        finished = [total - len(todo)]

        async def guarded(task: Task) -> None:
            async with gate:
                item, clock = await self.one(task)
            append_line(run_dir(self.cfg.out) / CLOCK_FILE, clock)  # first: an item on file has its clock
            append_line(self.cfg.out / ITEMS_FILE, item)
            done[str(task.id)] = item
            finished[0] += 1
            if on_item is not None:
                on_item(item, finished[0], total)

        await asyncio.gather(*(guarded(t) for t in todo))

    async def one(self, task: Task) -> tuple[dict[str, Any], dict[str, Any]]:
        """The scored item of ``task`` and its clock (:data:`CLOCK_FILE`)."""
        from orchestra.agent.systems import run_task

        cfg, judge = self.cfg, self.judge
        missing = _missing_media(task, cfg.media())
        if missing:
            return failed_item(task, f"media missing: {', '.join(missing)}", judge, cfg.samples), {
                "id": task.id
            }
        trajs = []
        try:
            for k in range(cfg.samples):
                policy = self.policies.get(task, k)
                trajs.append(await run_task(task, cfg.system, policy, self.env))  # type: ignore[arg-type]
        except OrchestraError as e:
            return failed_item(task, f"{type(e).__name__}: {e}", judge, cfg.samples), {"id": task.id}
        answers = [extract_answer(item_messages(t), t.answer) for t in trajs]
        first = trajs[0]
        path = cfg.out / "trajectories" / f"{_safe(task.id)}.json"
        data, clock = split_clock(record_dict(first))
        atomic_write_text(path, json.dumps(data, ensure_ascii=False) + "\n")
        item = base_item(task)
        item.update(
            predicted_answer=vote(answers) if cfg.samples > 1 else answers[0],
            tool_call_num=tool_calls(first),
            messages=item_messages(first),
            trajectory=str(path.relative_to(cfg.out)),
            tokens=sum(t.tokens for t in trajs),
            cost=sum(t.cost for t in trajs),
            error=first.error,
            not_run=None,
        )
        item = await asyncio.to_thread(scored, task, item, judge, answers)  # the judge is an HTTP call
        return item, {"id": task.id, "latency_s": first.latency_s, "trajectory": clock}


def _safe(task_id: Any) -> str:
    text = str(task_id)
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text) or "item"


def _cut_pool(backends: Any, n: int) -> Any:
    from orchestra.backends.base import BackendRegistry

    names = list(backends.names())
    if n < 1 or n > len(names):
        raise EvalError(f"--pool {n}: the pool has {len(names)} experts")
    return BackendRegistry(backends.get(name) for name in names[:n])
