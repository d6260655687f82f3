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

from dataclasses import dataclass

from orchestra.errors import StageError

__all__ = ["STAGES", "Check", "Stage", "get_stage"]


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
    code: tuple[str, ...]  #: source paths whose change makes its output stale
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


_AGENT = ("orchestra/agent", "orchestra/backends", "orchestra/tools", "orchestra/lm", "orchestra/answers.py")
_EVAL_CODE = ("orchestra/evaluation", *_AGENT)
#: a recipe that runs a policy end to end (outcome rollouts, the policy's own states relabelled)
_ROLLOUT_CODE = (
    "orchestra/training",
    *_AGENT,
    "orchestra/data/decisions.py",
    "orchestra/data/trajectories.py",
)
_TRAINING = dict(group="training", kinds=("pytorch", "mlflow"), all_cores=True, resumable=True)

_ROWS: tuple[Stage, ...] = (
    Stage(
        "seed_tasks",
        "orchestra.data.seeds:seed_tasks_stage",
        upstream=(),
        params=("seed",),
        code=("orchestra/data/seeds.py", "orchestra/data/sources.py", "orchestra/schemas.py")
        + ("orchestra/resources/omnigaia", "orchestra/world"),
        rows="seed tasks",
        description="Seed tasks in OmniGAIA format (+ media, + the world's pages) under data/seed_tasks/.",
        kinds=("python", "json"),
        inputs=("incoming",),
    ),
    Stage(
        "anchor_facts",
        "orchestra.data.anchors:build_anchor_facts",
        upstream=("seed_tasks",),
        params=("anchors", "agent", "tools", "providers"),
        code=(
            "orchestra/data/anchors.py",
            "orchestra/data/recheck.py",
            "orchestra/data/reference.py",
            "orchestra/data/llm.py",
            "orchestra/agent",
            "orchestra/answers.py",
            "orchestra/backends",
            "orchestra/tools",
            "orchestra/lm",
            "orchestra/resources/registry",
        ),
        rows="anchor facts",
        description="Per seed, the facts its answer rests on (perceived, looked up, computed), each "
        "recovered by the real tools; material (other values its media hold); seeds set aside with reasons.",
    ),
    Stage(
        "rewrite_candidates",
        "orchestra.data.candidates:build_rewrite_candidates",
        upstream=("seed_tasks", "anchor_facts"),
        params=("rewrite", "verify.similarity_metric", "verify.max_lexical_similarity", "agent", "tools")
        + ("providers",),
        code=(
            "orchestra/data/candidates.py",
            "orchestra/data/recheck.py",
            "orchestra/data/rewrite.py",
            "orchestra/data/reference.py",
            "orchestra/data/program.py",
            "orchestra/data/phrases.py",
            "orchestra/data/report.py",
            "orchestra/data/llm.py",
            "orchestra/resources/registry",
        ),
        rows="candidates",
        description="Rewrite candidates: five strategies x three levels over each seed's anchors and "
        "material, each with its own replayable solution program.",
    ),
    Stage(
        "verified_samples",
        "orchestra.data.verified:build_verified_samples",
        upstream=("seed_tasks", "anchor_facts", "rewrite_candidates"),
        params=("verify", "decisions.split", "decisions.seed", "tools", "providers"),
        code=(
            "orchestra/data/verified.py",
            "orchestra/data/reference.py",
            "orchestra/data/verify.py",
            "orchestra/data/verify_bypass.py",
            "orchestra/data/verify_judge.py",
            "orchestra/data/llm.py",
            "orchestra/data/verify_rederive.py",
            "orchestra/data/expectations.py",
        ),
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
        "expert_trajectories",
        "orchestra.data.trajectories:build_expert_trajectories",
        upstream=("seed_tasks", "verified_samples"),
        params=("agent", "tools", "providers"),
        code=("orchestra/data/trajectories.py", "orchestra/agent", "orchestra/backends")
        + ("orchestra/lm", "orchestra/resources/registry"),
        rows="trajectories",
        description="The expert's successful runs of the orchestra system on the train and val samples.",
    ),
    Stage(
        "decision_samples",
        "orchestra.data.trajectories:build_decision_samples",
        upstream=("verified_samples", "expert_trajectories"),
        params=("decisions", "agent"),
        code=("orchestra/data/decisions.py", "orchestra/data/trajectories.py"),
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
        "policy_sft",
        "orchestra.training.run:policy_sft",
        upstream=("seed_tasks", "verified_samples", "decision_samples"),
        params=("train.seed", "train.policy", "train.sft", "agent", "tools", "eval.max_turns")
        + ("eval.concurrency", "tracking"),
        code=_ROLLOUT_CODE,
        rows="training samples",
        description="The SFT policy: a Qwen3 trained from scratch (TRL SFTTrainer) on the decision samples "
        "(or continued from train.sft.init, with its own states relabelled: DAgger); exact, structural, "
        "parse and validity rates on the val split; the MLflow run.",
        **_TRAINING,
    ),
    Stage(  # train.dagrpo.states policy/both: the same; answer_credit: the labels
        "policy_dagrpo",
        "orchestra.training.run:policy_dagrpo",
        upstream=("seed_tasks", "verified_samples", "decision_samples", "policy_sft"),
        params=("train.seed", "train.dagrpo", "agent", "providers", "tools", "eval.max_turns")
        + ("eval.concurrency", "tracking"),
        code=_ROLLOUT_CODE,
        rows="decision prompts",
        description="DA-GRPO from the SFT policy: groups of decisions per state (the expert's, the policy's "
        "own relabelled by the expert, or both: train.dagrpo.states) scored by the rubric reward against "
        "the expert's decision; no sub-agent runs in training.",
        **_TRAINING,
    ),
    Stage(
        "policy_grpo",
        "orchestra.training.run:policy_grpo",
        upstream=("seed_tasks", "verified_samples", "decision_samples", "policy_sft"),
        params=("train.seed", "train.grpo", "agent", "tools", "tracking"),
        code=_ROLLOUT_CODE,
        rows="rollout prompts",
        description="Outcome GRPO (Maestro's recipe) from the SFT policy: full orchestrator rollouts with "
        "real tools on the train tasks, reward = answer correctness + format.",
        **_TRAINING,
    ),
    Stage(
        "benchmark_scores",
        "orchestra.evaluation.ladder:build_benchmark_scores",
        upstream=("seed_tasks", "verified_samples", "policy_sft", "policy_dagrpo", "policy_grpo"),
        params=("eval", "agent", "tools", "train.seed", "providers"),
        code=_EVAL_CODE,
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
        "report",
        "orchestra.evaluation.report:build_report",
        upstream=("benchmark_scores", "decision_samples", "policy_dagrpo", "policy_grpo"),
        params=("tracking",),
        code=("orchestra/evaluation",),
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
