"""The papers' tables on the embedded benchmark: ``benchmark_scores`` runs the ladder, ``report`` prints it.

``benchmark_scores`` (:mod:`orchestra.evaluation.ladder`) evaluates every row of :data:`LADDER` that
``eval.rows`` keeps (the same first ``eval.tasks`` tasks of the test split for each), shard by shard,
into ``data/benchmark_scores/`` (per row items, results.json, summary.json; ``scores.json``, every
row's summary) and ``data/benchmark_metrics.json`` (flat numbers: the DVC metrics). ``report``
turns them into ``report.md`` (overall with intervals, by Level, by category, linear vs orchestra
at equal policy), ``accuracy_by_level.png`` and ``reward_curves.png`` (read back from the MLflow
runs of the two GRPO recipes), and logs the numbers and files to an MLflow run.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestra.config import Params
from orchestra.data.store import (
    RUN_DIR,
    TIMING_FILE,
    model_dir,
    policy_stage,
    read_scores,
    run_dir,
    samples_file,
    scores_file,
    stage_dir,
)
from orchestra.errors import StageError
from orchestra.evaluation.scoring import CATEGORIES, CATEGORY_SHORT, LEVELS
from orchestra.io import atomic_dir, atomic_write_text, dir_digest, dump_json
from orchestra.stages import BENCHMARK_SCORES, REPORT

__all__ = ["BY_KEY", "LADDER", "Row", "build_report", "flat_metrics", "markdown_report"]


@dataclass(frozen=True)
class Row:
    """One row of the tables: a system driven by a policy (``oracle``, ``untrained`` or a recipe)."""

    key: str
    label: str
    system: str
    policy: str

    def policy_arg(self, root: Path) -> str:
        if self.policy in ("oracle", "untrained"):
            return self.policy
        path = model_dir(root, self.policy)
        if not (path / "config.json").is_file():
            stage = policy_stage(self.policy)
            raise StageError(f"row {self.key}: {path} has no model; materialize {stage} first")
        return f"checkpoint:{path}"


LADDER = (
    Row("react_oracle", "ReAct: one agent, every tool (oracle plan, one step a turn)", "react", "oracle"),
    Row("orchestra_untrained", "orchestra + untrained policy", "orchestra", "untrained"),
    Row("orchestra_sft", "orchestra + SFT", "orchestra", "sft"),
    Row("orchestra_grpo", "orchestra + SFT + outcome GRPO (Maestro's recipe)", "orchestra", "grpo"),
    Row("orchestra_dagrpo", "orchestra + SFT + DA-GRPO (Orchestra-o1)", "orchestra", "dagrpo"),
    Row("linear_dagrpo", "linear (one sub-task at a time) + DA-GRPO", "linear", "dagrpo"),
    Row("maestro_oracle", "Maestro system (oracle, one Model@@Skill search a turn)", "maestro", "oracle"),
    Row("linear_oracle", "linear + oracle", "linear", "oracle"),
    Row("orchestra_oracle", "orchestra + oracle (upper bound)", "orchestra", "oracle"),
)
BY_KEY = {r.key: r for r in LADDER}
#: the flat benchmark metrics DVC reads (``dvc metrics show``), beside the asset folders
METRICS_FILE = "benchmark_metrics.json"
#: the run's latencies beside report.md, in the report's run record
TIMING_REPORT = f"{RUN_DIR}/timing.md"


def in_ladder_order(scores: Mapping[str, Any]) -> dict[str, Any]:
    """The rows in :data:`LADDER` order (a JSON file's keys come back sorted), others after."""
    keys = [r.key for r in LADDER if r.key in scores] + sorted(k for k in scores if k not in BY_KEY)
    return {k: scores[k] for k in keys}


def flat_metrics(scores: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    """Per row: EM and its interval, judge (when run), per-Level EM, tool calls, tokens, cost (the
    numbers two runs of the same data and policy agree on; latencies stay in scores.json)."""
    out: dict[str, dict[str, float]] = {}
    for key, s in in_ladder_order(scores).items():
        em = s["accuracy"]["em"]
        m = {"em": em["mean"], "em_lo": em["ci"][0], "em_hi": em["ci"][1]}
        if s["accuracy"].get("judge"):
            m["judge"] = s["accuracy"]["judge"]["mean"]
        for lv in LEVELS:
            if lv in s["by_level"]:
                m[f"em_{lv.lower()}"] = s["by_level"][lv]["em"]["mean"]
        m.update(
            tool_calls=s["avg_tool_calls"],
            tokens_mean=s["tokens"]["mean"],
            cost_mean=s["cost"]["mean"],
            not_run=float(s["not_run"]["count"]),
        )
        out[key] = {k: round(float(v), 6) for k, v in m.items()}
    return out


def _pct(block: Mapping[str, Any] | None) -> str:
    if not block:
        return "-"
    lo, hi = block["ci"]
    return f"{100 * block['mean']:.1f} [{100 * lo:.1f}, {100 * hi:.1f}]"


def markdown_report(scores: Mapping[str, Any]) -> str:
    """The tables as Markdown (see the module docstring)."""
    if not scores:
        return "# Benchmark report\n\nNo rows were evaluated.\n"
    scores = in_ladder_order(scores)
    n = max(s["n"] for s in scores.values())
    out = [
        "# Benchmark report",
        "",
        f"The embedded benchmark (the test split of verified_samples), the first {n} tasks for every row. "
        "EM: OmniGAIA's exact match (case and whitespace only), in %, with a bootstrap 95% interval. "
        "The oracle rows replay each task's own program: an upper bound, not a policy. Everything here "
        f"follows from the data and the policies; the run's latencies are beside it in {TIMING_REPORT}.",
        "",
        "## Overall and by Level",
        "",
        "| row | system | policy | EM % [95% CI] | " + " | ".join(LEVELS) + " | judge % | tool calls | "
        "tokens | cost | not run |",
        "|---|---|---|---|" + "---|" * len(LEVELS) + "---|---|---|---|---|",
    ]
    for s in scores.values():
        levels = [_pct(s["by_level"].get(lv, {}).get("em")) if lv in s["by_level"] else "-" for lv in LEVELS]
        out.append(
            f"| {s['label']} | {s['system']} | {s['policy']} | {_pct(s['accuracy']['em'])} | "
            + " | ".join(levels)
            + f" | {_pct(s['accuracy'].get('judge'))} | {s['avg_tool_calls']:.1f} | "
            f"{s['tokens']['mean']:.0f} | {s['cost']['mean']:.4f} | {s['not_run']['count']} |"
        )
    cats = [c for c in CATEGORIES if any(c in s["by_category"] for s in scores.values())]
    cats += sorted({c for s in scores.values() for c in s["by_category"]} - set(cats))
    if cats:
        first = max(scores.values(), key=lambda s: s["n"])["by_category"]
        heads = [f"{CATEGORY_SHORT.get(c, c)} (n={first.get(c, {}).get('n', 0)})" for c in cats]
        out += ["", "## By category (EM %)", "", "| row | " + " | ".join(heads) + " |"]
        out.append("|---|" + "---|" * len(cats))
        for s in scores.values():
            got = s["by_category"]
            cells = [f"{100 * got[c]['em']['mean']:.1f}" if c in got else "-" for c in cats]
            out.append(f"| {s['label']} | " + " | ".join(cells) + " |")
    pairs = _linear_pairs(scores)
    if pairs:
        out += [
            "",
            "## Linear vs orchestra at equal policy",
            "",
            "| policy | linear EM % | orchestra EM % | linear tool calls | orchestra tool calls |",
            "|---|---|---|---|---|",
        ]
        for lin, orch in pairs:
            out.append(
                f"| {lin['policy']} | {100 * lin['accuracy']['em']['mean']:.1f} | "
                f"{100 * orch['accuracy']['em']['mean']:.1f} | {lin['avg_tool_calls']:.1f} | "
                f"{orch['avg_tool_calls']:.1f} |"
            )
    return "\n".join(out) + "\n"


def _linear_pairs(scores: Mapping[str, Any]) -> list[tuple[Mapping[str, Any], Mapping[str, Any]]]:
    """(linear row, orchestra row) pairs of the same policy."""
    return [
        (lin, orch)
        for lin in scores.values()
        for orch in scores.values()
        if lin["system"] == "linear" and orch["system"] == "orchestra" and lin["policy"] == orch["policy"]
    ]


def read_timing(root: Path) -> dict[str, Any]:
    """Each row's wall seconds and latency percentiles, as benchmark_scores' last merge measured them
    ({} when the scores came from elsewhere, e.g. ``dvc pull``: the clock is not part of the data)."""
    path = run_dir(stage_dir(root, BENCHMARK_SCORES)) / TIMING_FILE
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def timing_report(scores: Mapping[str, Any], timing: Mapping[str, Any]) -> str:
    """The run's clock beside the report: each row's latency percentiles and wall seconds, and linear
    vs orchestra at equal policy (``timing``: benchmark_scores' run record)."""
    scores = in_ladder_order(scores)
    out = [
        "# Benchmark timing (this run)",
        "",
        "Clock readings of the run that built the scores, not part of the data: another run of the same "
        "data differs. Measured with the perception cache on (a cached perception returns at once), so "
        "they show the policy's and the scheduler's time; bench/parallel_speedup.py compares linear and "
        "orchestra cold.",
        "",
        "| row | latency p50 / p95 s | wall s (all shards) |",
        "|---|---|---|",
    ]
    for key, s in scores.items():
        t = timing.get(key)
        cells = (
            f"{t['latency_s']['p50']:.2f} / {t['latency_s']['p95']:.2f} | {t['wall_s']:.1f}" if t else "- | -"
        )
        out.append(f"| {s['label']} | {cells} |")
    keys = {id(v): k for k, v in scores.items()}
    rows = [
        (lin, orch, timing.get(keys[id(lin)]), timing.get(keys[id(orch)]))
        for lin, orch in _linear_pairs(scores)
    ]
    if any(a and b for _, _, a, b in rows):
        out += [
            "",
            "## Linear vs orchestra at equal policy",
            "",
            "| policy | linear p50 s | orchestra p50 s | speed-up (p50) |",
            "|---|---|---|---|",
        ]
        for lin, _, a, b in rows:
            if a and b:
                x, y = a["latency_s"]["p50"], b["latency_s"]["p50"]
                out.append(f"| {lin['policy']} | {x:.2f} | {y:.2f} | {f'{x / y:.2f}x' if y > 0 else '-'} |")
    return "\n".join(out) + "\n"


def _level_plot(scores: Mapping[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    scores = in_ladder_order(scores)
    keys = list(scores)
    x = np.arange(len(LEVELS))
    width = 0.8 / max(1, len(keys))
    fig, ax = plt.subplots(figsize=(10, 4.5))
    for i, k in enumerate(keys):
        s = scores[k]["by_level"]
        ys = [100 * s[lv]["em"]["mean"] if lv in s else 0.0 for lv in LEVELS]
        ax.bar(x + i * width - 0.4 + width / 2, ys, width, label=k)
    ax.set_xticks(x, LEVELS)
    ax.set_ylabel("EM %")
    ax.set_ylim(0, 105)
    ax.set_title("Accuracy by Level per system and policy (embedded benchmark)")
    ax.legend(fontsize=7, ncol=3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def reward_histories(params: Params, root: Path) -> dict[str, dict[str, list[tuple[int, float]]]]:
    """The per-step reward metrics of the two GRPO recipes' MLflow runs (the run of the newest registered
    version made from the recipe's model): ``reward`` and every ``rewards/<part>/mean``."""
    import mlflow

    from orchestra.training.tracking import checkpoint_versions, tracking_uri

    client = mlflow.MlflowClient(tracking_uri(params, root))
    out: dict[str, dict[str, list[tuple[int, float]]]] = {}
    for recipe in ("dagrpo", "grpo"):
        model = model_dir(root, recipe)
        if not model.is_dir():
            continue
        versions = checkpoint_versions(client, params.tracking.registered_model, dir_digest(model))
        if not versions:
            continue
        run_id = versions[0].run_id
        run = client.get_run(run_id)
        keys = [
            k for k in run.data.metrics if k == "reward" or (k.startswith("rewards/") and k.endswith("/mean"))
        ]
        out[recipe] = {
            k: [(m.step, m.value) for m in sorted(client.get_metric_history(run_id, k), key=lambda m: m.step)]
            for k in sorted(keys)
        }
    return out


def _reward_plot(curves: Mapping[str, Mapping[str, Sequence[tuple[int, float]]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, max(1, len(curves)), figsize=(5 * max(1, len(curves)), 3.8), squeeze=False)
    for ax, (recipe, series) in zip(axes[0], curves.items(), strict=False):
        for name, points in series.items():
            if points:
                ax.plot([p[0] for p in points], [p[1] for p in points], marker=".", label=name)
        ax.set_title(f"{policy_stage(recipe)}: reward per step (MLflow)")
        ax.set_xlabel("step")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def build_report(params: Params, root: Path) -> dict[str, Any]:
    """report.md and the two plots from benchmark_scores and MLflow; logged to an MLflow run."""
    import mlflow

    from orchestra.training.common import file_digest
    from orchestra.training.tracking import recipe_run

    root = Path(root)
    scores = read_scores(root)
    curves = reward_histories(params, root)
    text = markdown_report(scores)
    tags = {
        "orchestra.benchmark_scores_sha256": file_digest(scores_file(root)),
        "orchestra.decision_samples_sha256": file_digest(samples_file(root)),
    }
    with atomic_dir(stage_dir(root, REPORT)) as tmp:
        atomic_write_text(tmp / "report.md", text)
        atomic_write_text(tmp / TIMING_REPORT, timing_report(scores, read_timing(root)))
        _level_plot(scores, tmp / "accuracy_by_level.png")
        _reward_plot(curves, tmp / "reward_curves.png")
        with recipe_run(params, root, "report", tags) as run_id:
            for key, m in flat_metrics(scores).items():
                mlflow.log_metrics({f"{key}.{k}": v for k, v in m.items()})
            for name in ("report.md", TIMING_REPORT, "accuracy_by_level.png", "reward_curves.png"):
                mlflow.log_artifact(str(tmp / name))
        meta = {"rows": len(scores), "reward_curves": sorted(curves)}
        atomic_write_text(tmp / "summary.json", dump_json(meta) + "\n")
    return {**meta, "run": {"mlflow_run_id": run_id}}
