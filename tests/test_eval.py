"""The evaluation harness: `orchestra eval` on real benchmarks, resume after SIGKILL, the report tables."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from orchestra.config import Params
from orchestra.errors import OrchestraError
from orchestra.evaluation.items import load_items
from orchestra.evaluation.report import LADDER, flat_metrics, markdown_report, timing_report
from orchestra.evaluation.runner import EvalConfig, EvalError, run_eval
from orchestra.evaluation.scoring import extract_answer
from orchestra.io import atomic_write_text

ROOT = Path(__file__).resolve().parents[1]
METADATA = ROOT / "orchestra" / "resources" / "omnigaia" / "test_metadata.json"
#: what two runs of the same deterministic evaluation agree on (latencies are measured, so differ)
STABLE = ("n", "accuracy", "by_level", "by_category", "by_task_type", "avg_tool_calls", "non_empty_ratio")
STABLE += ("not_run",)


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestra.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=600
    )


def _params(tmp_path: Path) -> Path:
    path = tmp_path / "params.yaml"
    path.write_text("paths: {data_dir: data}\n")
    return path


def test_eval_on_the_omnigaia_metadata_without_media_reports_every_item(tmp_path: Path) -> None:
    out = tmp_path / "out"
    res = _cli(
        "eval", "--benchmark", str(METADATA), "--media-root", str(tmp_path / "no_media"),
        "--out", str(out), "--params", str(_params(tmp_path)), cwd=tmp_path,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    line = json.loads(res.stdout.strip().splitlines()[-1])
    assert line["n"] == 360 and line["not_run"] == 360 and line["em"] == 0.0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["n"] == 360 and summary["accuracy"]["em"]["mean"] == 0.0
    reasons = {i["reason"].split(":")[0] for i in summary["not_run"]["items"]}
    assert reasons == {"media missing"}
    results = json.loads((out / "results.json").read_text())  # the list OmniGAIA's re-evaluation reads
    assert [r["id"] for r in results] == list(range(1, 361))
    first = results[0]
    for key in ("question", "answer", "Level", "category", "task_type", "predicted_answer", "em_score",
                "llm_equal", "tool_call_num", "messages"):  # fmt: skip
        assert key in first
    assert sum(summary["by_level"][lv]["n"] for lv in summary["by_level"]) == 360


def _benchmark(built: tuple[Path, str]) -> Path:
    return built[0] / "verified_samples" / "benchmark" / "tasks.json"


def test_oracle_eval_scores_every_item_and_keeps_its_chat(built: tuple[Path, str], tmp_path: Path) -> None:
    cfg = EvalConfig(benchmark=_benchmark(built), out=tmp_path / "o", concurrency=2)
    summary = run_eval(Params(), cfg)
    n = len(json.loads(_benchmark(built).read_text()))
    assert summary["n"] == n > 0 and summary["accuracy"]["em"]["mean"] == 1.0
    items = load_items(tmp_path / "o")
    for item in items.values():
        assert item["em_score"] == 1 and item["tool_call_num"] > 0 and item["not_run"] is None
        assert extract_answer(item["messages"]) == item["predicted_answer"] == item["answer"]
        assert (tmp_path / "o" / item["trajectory"]).is_file()
    # another run in the same folder is refused, not mixed in
    with pytest.raises(EvalError, match="another run"):
        run_eval(Params(), EvalConfig(benchmark=_benchmark(built), out=tmp_path / "o", system="linear"))
    # the pool cut to two experts: the same items, fewer right (perception needs experts it lost)
    cut = run_eval(Params(), EvalConfig(benchmark=_benchmark(built), out=tmp_path / "cut", pool=2))
    assert cut["n"] == n and cut["accuracy"]["em"]["mean"] < 1.0
    # self-consistency: the oracle is deterministic, so pass@1 = sc@3 = pass@3
    sc = run_eval(Params(), EvalConfig(benchmark=_benchmark(built), out=tmp_path / "sc", samples=3, limit=3))
    assert sc["self_consistency"] == {"k": 3, "pass_at_1": 1.0, "sc_at_3": 1.0, "pass_at_3": 1.0}


def test_a_killed_eval_resumes_to_the_summary_of_an_uninterrupted_one(
    built: tuple[Path, str], tmp_path: Path
) -> None:
    bench = _benchmark(built)
    whole = run_eval(Params(), EvalConfig(benchmark=bench, out=tmp_path / "whole", system="react"))
    n = whole["n"]
    out = tmp_path / "killed"
    args = ["eval", "-b", str(bench), "-o", str(out), "-s", "react", "--params", str(_params(tmp_path))]
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestra.cli", *args], cwd=tmp_path, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if len(load_items(out)) >= 2:
            break
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    got = len(load_items(out))
    assert 2 <= got < n, f"killed after {got} of {n} items"
    assert not (out / "summary.json").exists()
    with (out / "items.jsonl").open("a") as f:
        f.write('{"id": "cut sho')  # a line a kill cut short is dropped and trimmed
    res = _cli(*args, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    resumed = json.loads((out / "summary.json").read_text())
    assert {k: resumed[k] for k in STABLE} == {k: whole[k] for k in STABLE}
    lines = (out / "items.jsonl").read_text().splitlines()
    assert len(lines) == n and sorted(json.loads(x)["id"] for x in lines) == sorted(
        json.loads(x)["id"] for x in (tmp_path / "whole" / "items.jsonl").read_text().splitlines()
    )


def _scores() -> dict[str, Any]:
    def summary(em: float, system: str, policy: str, label: str) -> dict[str, Any]:
        block = {"mean": em, "ci": [max(0.0, em - 0.1), min(1.0, em + 0.1)]}
        lv = {"n": 2, "em": block, "judge": None, "numeric": block}
        return {
            "label": label, "system": system, "policy": policy, "n": 4,
            "accuracy": {"em": block, "judge": None, "numeric": block},
            "by_level": {"Easy": lv, "Hard": lv}, "by_category": {"Sports": lv, "Technology": lv},
            "by_task_type": {}, "avg_tool_calls": 3.0, "non_empty_ratio": 1.0,
            "tokens": {"total": 40, "mean": 10.0},
            "cost": {"total": 0.04, "mean": 0.01}, "not_run": {"count": 0, "items": []},
        }  # fmt: skip

    return {
        "linear_oracle": summary(1.0, "linear", "oracle", "linear + oracle"),
        "orchestra_oracle": summary(1.0, "orchestra", "oracle", "orchestra + oracle (upper bound)"),
        "orchestra_sft": summary(0.25, "orchestra", "sft", "orchestra + SFT"),
    }


def test_the_report_tables_show_every_row_with_intervals_levels_and_the_speedup() -> None:
    text = markdown_report(_scores())
    assert "| orchestra + SFT | orchestra | sft | 25.0 [15.0, 35.0] | 25.0 [15.0, 35.0] | - |" in text
    assert "Tech. (n=2)" in text and "Sport (n=2)" in text
    assert text.index("Tech. (n=2)") < text.index("Sport (n=2)")  # OmniGAIA's column order
    assert "| oracle | 100.0 | 100.0 | 3.0 | 3.0 |" in text and "upper bound" in text
    assert "latency" not in text.split("\n\n", 2)[2]  # the clock is in the run record's timing page
    timing = {
        "linear_oracle": {"wall_s": 9.0, "latency_s": {"p50": 3.0, "p95": 6.0}},
        "orchestra_oracle": {"wall_s": 6.0, "latency_s": {"p50": 2.0, "p95": 4.0}},
    }
    page = timing_report(_scores(), timing)
    assert "| linear + oracle | 3.00 / 6.00 | 9.0 |" in page and "| orchestra + SFT | - | - |" in page
    assert "| oracle | 3.00 | 2.00 | 1.50x |" in page
    flat = flat_metrics(_scores())
    assert flat["orchestra_sft"]["em"] == 0.25 and flat["orchestra_sft"]["em_easy"] == 0.25
    assert "em_medium" not in flat["orchestra_sft"]
    assert [r.key for r in LADDER] == list(Params().eval.rows)


def test_eval_items_append_survives_a_cut_line(tmp_path: Path) -> None:
    atomic_write_text(tmp_path / "items.jsonl", '{"id": 1, "x": 2}\n{"id": 2, "x"')
    assert list(load_items(tmp_path)) == ["1"]
    assert (tmp_path / "items.jsonl").read_text() == '{"id": 1, "x": 2}\n'


def test_an_openai_policy_is_evaluated_over_real_http(
    built: tuple[Path, str], tmp_path: Path, serve_process: Any
) -> None:
    """``--policy openai:MODEL``: the oracle's own decisions, replayed by `orchestra serve --script`."""
    from orchestra.agent.decision import render_decision
    from orchestra.schemas import Trajectory

    bench = _benchmark(built)
    oracle = run_eval(Params(), EvalConfig(benchmark=bench, out=tmp_path / "oracle", limit=1))
    assert oracle["accuracy"]["em"]["mean"] == 1.0
    item = next(iter(load_items(tmp_path / "oracle").values()))
    traj = json.loads((tmp_path / "oracle" / item["trajectory"]).read_text())
    steps = Trajectory.model_validate(traj).steps
    script = tmp_path / "replies.jsonl"
    script.write_text(
        "".join(json.dumps({"content": render_decision(s.decision, "json")}) + "\n" for s in steps)
    )
    with serve_process(script) as (_, url):
        params = Params.model_validate(
            {
                "providers": {
                    "builtin": {"kind": "builtin"},
                    "openai": {"kind": "openai", "base_url": url, "model": "x"},
                }
            }
        )
        got = run_eval(
            params, EvalConfig(benchmark=bench, out=tmp_path / "lm", policy="openai:demo", limit=1)
        )
    assert got["accuracy"]["em"]["mean"] == 1.0 and got["tokens"]["total"] > 0
    lm_item = next(iter(load_items(tmp_path / "lm").values()))
    assert lm_item["messages"][-1] == {"role": "assistant", "content": f"<answer>{item['answer']}</answer>"}


def _ladder_root(built: tuple[Path, str], tmp_path: Path, name: str) -> Path:
    root = tmp_path / name
    shutil.copytree(built[0], root)
    return root


def test_the_partition_that_completes_the_shards_merges_under_the_stage_lock(
    built: tuple[Path, str], tmp_path: Path
) -> None:
    """On a cluster each shard is a partition in its own process, and two that finish together both find
    every shard in: the merge (and the folder's hash, the lineage record) waits for the stage's lock, so
    no partition walks a row folder another is replacing (a cluster run failed on the temp folder of a
    merged row that vanished under the other partition's walk)."""
    from concurrent.futures import ThreadPoolExecutor

    from orchestra.data.store import SCORES_FILE, stage_lock
    from orchestra.evaluation.ladder import build_benchmark_scores, shard_dir

    ev = {"rows": ["react_oracle"], "tasks": 4, "max_turns": 8, "concurrency": 1, "shards": 2, "workers": 1}
    params = Params.model_validate({"eval": ev})
    root = _ladder_root(built, tmp_path, "locked")
    out = root / "benchmark_scores"
    assert not build_benchmark_scores(params, root, [0], key="k")["complete"]
    assert not (out / "react_oracle").exists()
    with ThreadPoolExecutor(1) as pool:
        with stage_lock(root, "benchmark_scores"):  # another partition holds it
            job = pool.submit(build_benchmark_scores, params, root, [1], "k")
            deadline = time.monotonic() + 120
            while not (shard_dir(root, 1) / "shard.json").exists() and time.monotonic() < deadline:
                time.sleep(0.1)
            time.sleep(1.0)
            assert (shard_dir(root, 1) / "shard.json").exists(), "shard 1 was not built"
            assert not job.done() and not (out / "react_oracle").exists() and not (out / SCORES_FILE).exists()
        meta = job.result(timeout=120)
    assert meta["complete"] and meta["tasks"] == 4 and (out / "react_oracle" / "results.json").is_file()


def test_ladder_units_in_worker_processes_match_one_process_and_a_failing_row_keeps_the_shards(
    built: tuple[Path, str], tmp_path: Path
) -> None:
    """benchmark_scores runs its (shard, row) units in eval.workers spawned processes: the same items as
    in one process; a row that fails in a worker fails the stage and leaves the shards that were there."""
    from orchestra.evaluation.ladder import build_benchmark_scores, eval_workers, shard_dir

    rows = ["react_oracle", "linear_oracle", "orchestra_oracle"]
    ev = {"rows": rows, "tasks": 4, "max_turns": 8, "concurrency": 1, "shards": 2}
    outs = {}
    for workers in (1, 2):
        params = Params.model_validate({"eval": {**ev, "workers": workers}})
        assert eval_workers(params, 6) == workers
        root = _ladder_root(built, tmp_path, f"w{workers}")
        meta = build_benchmark_scores(params, root, key="k")
        assert meta["complete"] and meta["run"]["shards_run"] == [0, 1] and meta["tasks"] == 4
        assert set(meta["run"]["timing"]) == set(rows)  # each row's latency, in the run record
        outs[workers] = {
            r: [
                (i["id"], i["predicted_answer"], i["em_score"])
                for i in json.loads((root / "benchmark_scores" / r / "results.json").read_text())
            ]
            for r in rows
        }
    assert outs[1] == outs[2] and len(outs[2]["orchestra_oracle"]) == 4
    assert all(em == 1 for _, _, em in outs[2]["orchestra_oracle"])

    # a benchmark whose ids repeat: every unit fails in its worker with the runner's error
    bench = root / "verified_samples" / "benchmark" / "tasks.json"
    tasks = json.loads(bench.read_text())
    bench.write_text(json.dumps([tasks[0], *tasks]))
    before = {k: (shard_dir(root, k) / "shard.json").read_bytes() for k in (0, 1)}
    with pytest.raises(OrchestraError, match="task ids repeat"):
        build_benchmark_scores(params, root, key="k2")
    assert {k: (shard_dir(root, k) / "shard.json").read_bytes() for k in (0, 1)} == before
    assert not list((root / "benchmark_scores").glob(".shard-*.tmp"))
