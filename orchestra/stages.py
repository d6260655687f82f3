"""The one stage table: every pipeline stage's function, inputs, params, code, checks and description.

The runner (:mod:`orchestra.pipeline.run`), the lineage records (:mod:`orchestra.lineage`), the
Dagster assets and their checks (``dagster_project/assets.py``), ``dvc.yaml``
(:mod:`orchestra.pipeline.dvc`, checked equal by a test) and the reference docs all read this table;
a stage is added here, as one row, plus its function. Functions are named ``module:function`` and
imported when the stage runs, so reading the table imports no stage code.

A stage function takes ``(params, root)`` — the params scoped to the sections the row declares
(reading any other one raises :class:`orchestra.pipeline.scope.UndeclaredParams`) and the data folder
— writes ``root/<name>/`` and returns its metadata; a ``sharded`` stage also takes the shards to run
and the digest of its inputs.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from orchestra.errors import StageError

__all__ = ["CODE_ROOT", "STAGES", "Check", "Stage", "code_paths", "get_stage"]

#: the project folder source paths are relative to (the orchestra package's parent)
CODE_ROOT = Path(__file__).resolve().parent.parent

#: the stages' names, which are their folders' names under the data folder (orchestra/data/store.py)
SEED_TASKS = "seed_tasks"
ANCHOR_FACTS = "anchor_facts"
REWRITE_CANDIDATES = "rewrite_candidates"
VERIFIED_SAMPLES = "verified_samples"
EXPERT_TRAJECTORIES = "expert_trajectories"
DECISION_SAMPLES = "decision_samples"
POLICY_SFT = "policy_sft"
POLICY_DAGRPO = "policy_dagrpo"
POLICY_GRPO = "policy_grpo"
BENCHMARK_SCORES = "benchmark_scores"
REPORT = "report"


@dataclass(frozen=True)
class Check:
    """A blocking data check of a stage's output: ``fn`` (``module:function``) of the data root, and of
    the stage's scoped params when ``with_params``, returns ``(passed, detail)``."""

    name: str
    fn: str
    description: str
    with_params: bool = False


@dataclass(frozen=True)
class Stage:
    """One row of the table."""

    name: str
    fn: str  #: ``module:function`` writing ``root/<name>/``
    upstream: tuple[str, ...]  #: stage outputs it reads
    params: tuple[str, ...]  #: params sections or dotted keys it reads (nothing else is readable)
    rows: str  #: what a row of its output is, for the log
    description: str
    group: str = "data"  #: data | training | evaluation (the Dagster jobs select by group)
    kinds: tuple[str, ...] = ("python", "jsonl")
    sharded: bool = False  #: partitioned by ``eval.shards`` (one Dagster partition a shard)
    all_cores: bool = False  #: trains with torch on every core: such stages run one at a time
    resumable: bool = False  #: keeps checkpoints that a killed run resumes from (DVC ``persist``)
    inputs: tuple[str, ...] = ()  #: paths under the data folder outside any stage's output it reads
    metrics: tuple[str, ...] = ()  #: files under the data folder it writes as DVC metrics
    checks: tuple[Check, ...] = ()
    #: more paths whose change makes its output stale, besides its code (:func:`code_paths`: its
    #: function's module, everything that imports, and the data files those modules read)
    code: tuple[str, ...] = ()


_TRAINING = dict(group="training", kinds=("pytorch", "mlflow"), all_cores=True, resumable=True)
#: what a recipe that rolls the start policy out on train tasks reads besides its own section (SFT's and
#: DA-GRPO's policy states), and its MLflow store
_ROLLOUTS = ("agent", "tools", "eval.max_turns", "eval.concurrency", "tracking")

_ROWS: tuple[Stage, ...] = (
    Stage(
        SEED_TASKS,
        "orchestra.data.seeds:seed_tasks_stage",
        upstream=(),
        params=("seed",),
        rows="seed tasks",
        description="Seed tasks in OmniGAIA format (+ media, + the world's pages) under data/seed_tasks/.",
        kinds=("python", "json"),
        inputs=("incoming",),
    ),
    Stage(
        ANCHOR_FACTS,
        "orchestra.data.anchors:build_anchor_facts",
        upstream=(SEED_TASKS,),
        params=("anchors", "agent", "tools", "providers"),
        rows="anchor facts",
        description="Per seed, the facts its answer rests on (perceived, looked up, computed), each "
        "recovered by the real tools; material (other values its media hold); seeds set aside with reasons.",
    ),
    Stage(
        REWRITE_CANDIDATES,
        "orchestra.data.candidates:build_rewrite_candidates",
        upstream=(SEED_TASKS, ANCHOR_FACTS),
        params=("rewrite", "verify.similarity_metric", "verify.max_lexical_similarity", "agent", "tools")
        + ("providers",),
        rows="candidates",
        description="Rewrite candidates: five strategies x three levels over each seed's anchors and "
        "material, each with its own replayable solution program.",
    ),
    Stage(
        VERIFIED_SAMPLES,
        "orchestra.data.verified:build_verified_samples",
        upstream=(SEED_TASKS, ANCHOR_FACTS, REWRITE_CANDIDATES),
        params=("verify", "decisions.split", "decisions.seed", "tools", "providers"),
        rows="verified samples",
        description="Candidates that pass the five checks (anchor coverage, lexical similarity, modality "
        "bypass, numeric re-derivation, judge), validated by a Great Expectations suite; rejects with "
        "reasons; the split by seed; the test split as the embedded benchmark (OmniGAIA format + media).",
        kinds=("python", "jsonl", "great_expectations"),
        checks=(
            Check(
                "verified_samples_are_clean",
                "orchestra.data.verified:check_verified",
                "Only fully verified, seed-split data.",
            ),
            Check(
                "verified_samples_pass_the_suite",
                "orchestra.data.verified:check_kept_with_suite",
                "The Great Expectations suite of the five checks holds on every kept sample.",
                with_params=True,
            ),
        ),
    ),
    Stage(
        EXPERT_TRAJECTORIES,
        "orchestra.data.trajectories:build_expert_trajectories",
        upstream=(SEED_TASKS, VERIFIED_SAMPLES),
        params=("agent", "tools", "providers"),
        rows="trajectories",
        description="The expert's successful runs of the orchestra system on the train and val samples.",
    ),
    Stage(
        DECISION_SAMPLES,
        "orchestra.data.trajectories:build_decision_samples",
        upstream=(VERIFIED_SAMPLES, EXPERT_TRAJECTORIES),
        params=("decisions", "agent"),
        rows="decision samples",
        description="Decision-level samples: the state before each expert decision, structured, "
        "and the decision; on train also off-path states and re-renderings labelled by the stateless "
        "expert.",
        checks=(
            Check(
                "decision_samples_are_valid",
                "orchestra.data.trajectories:check_decision_samples",
                "Every label parses and is valid in its state.",
            ),
        ),
    ),
    Stage(  # train.sft.states both: the start policy's rollouts, relabelled
        POLICY_SFT,
        "orchestra.training.run:policy_sft",
        upstream=(SEED_TASKS, VERIFIED_SAMPLES, DECISION_SAMPLES),
        params=("train.seed", "train.policy", "train.sft", *_ROLLOUTS),
        rows="training samples",
        description="The SFT policy: a Qwen3 trained from scratch (TRL SFTTrainer) on the decision samples "
        "(or continued from train.sft.init, with its own states relabelled: DAgger); exact, structural, "
        "parse and validity rates on the val split; the MLflow run.",
        **_TRAINING,
    ),
    Stage(  # train.dagrpo.states policy/both: the same; answer_credit: the labels
        POLICY_DAGRPO,
        "orchestra.training.run:policy_dagrpo",
        upstream=(SEED_TASKS, VERIFIED_SAMPLES, DECISION_SAMPLES, POLICY_SFT),
        params=("train.seed", "train.dagrpo", "providers", *_ROLLOUTS),
        rows="decision prompts",
        description="DA-GRPO from the SFT policy: groups of decisions per state (the expert's, the policy's "
        "own relabelled by the expert, or both: train.dagrpo.states) scored by the rubric reward against "
        "the expert's decision; no sub-agent runs in training.",
        **_TRAINING,
    ),
    Stage(
        POLICY_GRPO,
        "orchestra.training.run:policy_grpo",
        upstream=(SEED_TASKS, VERIFIED_SAMPLES, DECISION_SAMPLES, POLICY_SFT),
        params=("train.seed", "train.grpo", "agent", "tools", "tracking"),
        rows="rollout prompts",
        description="Outcome GRPO (Maestro's recipe) from the SFT policy: full orchestrator rollouts with "
        "real tools on the train tasks, reward = answer correctness + format.",
        **_TRAINING,
    ),
    Stage(
        BENCHMARK_SCORES,
        "orchestra.evaluation.ladder:build_benchmark_scores",
        upstream=(SEED_TASKS, VERIFIED_SAMPLES, POLICY_SFT, POLICY_DAGRPO, POLICY_GRPO),
        params=("eval", "agent", "tools", "train.seed", "providers"),
        rows="rows",
        description="The papers' ablation ladder on the embedded benchmark (the test split), partitioned by "
        "benchmark shard (merged once every shard is in): react, orchestra with the untrained, SFT, "
        "outcome-GRPO and DA-GRPO policies, linear at equal policy, the Maestro system and the oracle "
        "upper bound; per row OmniGAIA-format items, results.json and summary.json (EM with bootstrap "
        "intervals, by Level, category, task type; tool calls, latency, tokens, cost).",
        group="evaluation",
        kinds=("python", "json"),
        sharded=True,
        metrics=("benchmark_metrics.json",),
    ),
    Stage(
        REPORT,
        "orchestra.evaluation.report:build_report",
        upstream=(BENCHMARK_SCORES, DECISION_SAMPLES, POLICY_DAGRPO, POLICY_GRPO),
        params=("tracking",),
        rows="rows",
        description="The tables as Markdown (overall, by Level, by category, linear vs orchestra), "
        "accuracy-by-Level and reward-curve plots (read back from MLflow), logged to an MLflow run.",
        group="evaluation",
        kinds=("python", "mlflow"),
    ),
)

#: every stage by name, in lineage order (each after everything it reads)
STAGES: dict[str, Stage] = {s.name: s for s in _ROWS}


def get_stage(name: str) -> Stage:
    try:
        return STAGES[name]
    except KeyError:
        raise StageError(f"unknown stage {name!r}; valid stages: {', '.join(STAGES)}") from None


#: the data files a module reads (shipped with the package): part of the code of every stage that imports it
_RESOURCES = {
    "orchestra.backends.registry": "orchestra/resources/registry",  # the expert registry
    "orchestra.data.seeds": "orchestra/resources/omnigaia",  # the shipped OmniGAIA metadata
}
#: modules whose change cannot change a stage's output by itself: the params model (the params a stage
#: reads are digested by value, defaults included), the error messages, this table and the lineage
_NOT_CODE = ("orchestra.config", "orchestra.errors", "orchestra.stages", "orchestra.lineage")


@functools.cache
def _imports() -> object:
    import grimp

    return grimp.build_graph("orchestra", cache_dir=None)


def _module_file(module: str) -> Path:
    base = CODE_ROOT / module.replace(".", "/")
    return base / "__init__.py" if base.is_dir() else base.with_suffix(".py")


def _collapsed(files: set[Path]) -> list[str]:
    """``files`` as paths, a package's folder standing for its files when every one of them is in."""
    out: list[str] = []
    todo = sorted(files)
    for folder in sorted({f.parent for f in files}, key=lambda d: len(d.parts)):
        if any(Path(o) in folder.parents or CODE_ROOT / o == folder for o in out if not o.endswith(".py")):
            continue
        inside = {f for f in folder.rglob("*.py") if "__pycache__" not in f.parts}
        if inside and inside <= files and folder != CODE_ROOT / "orchestra":
            out.append(folder.relative_to(CODE_ROOT).as_posix())
    covered = [CODE_ROOT / o for o in out]
    out += [f.relative_to(CODE_ROOT).as_posix() for f in todo if not any(d in f.parents for d in covered)]
    return sorted(out)


def code_paths(stage: Stage) -> tuple[str, ...]:
    """A stage's code: the module of its function and every orchestra module it imports, directly or
    not, inside functions too (grimp's import graph), but :data:`_NOT_CODE`; the data files those
    modules read (:data:`_RESOURCES`); then the row's ``code``. Paths relative to :data:`CODE_ROOT`, a
    package's folder for all its modules."""
    module = stage.fn.partition(":")[0]
    graph = _imports()
    if module not in graph.modules:  # type: ignore[attr-defined]
        return tuple(stage.code)
    mods = {module} | graph.find_upstream_modules(module)  # type: ignore[attr-defined]
    keep = {
        m for m in mods if m != "orchestra" and not any(m == x or m.startswith(x + ".") for x in _NOT_CODE)
    }
    data = sorted(path for mod, path in _RESOURCES.items() if mod in keep)
    return (*_collapsed({_module_file(m) for m in keep}), *data, *stage.code)
