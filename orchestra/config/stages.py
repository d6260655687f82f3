"""Params sections of the pipeline stages: providers, paths, seed world, synthesis, training, eval."""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field, field_validator, model_validator

from orchestra.config.common import CATEGORIES, LEVELS, REWRITE_STRATEGIES, Fraction, Seed, _Section

_VLLM_GONE = (
    "kind 'vllm' is not a provider kind: serve the model with `vllm serve MODEL --enable-auto-tool-choice "
    "--tool-call-parser hermes` and name it as kind 'openai' with base_url http://HOST:8000/v1 "
    "(docs/how-to/own-data.md)"
)


class ProviderSpec(_Section):
    """Where a component gets its model from (DESIGN.md, Model providers)."""

    kind: Literal["builtin", "openai", "transformers"] = Field(
        "builtin", description="builtin = embedded default (no network, no weights)"
    )
    model: str | None = Field(None, description="model name (openai) or model directory (transformers)")
    base_url: str | None = Field(
        None,
        description="OpenAI-compatible endpoint, e.g. http://localhost:8000/v1 (vllm serve, a hosted API)",
    )
    api_key_env: str | None = Field(None, description="name of the environment variable holding the API key")
    timeout_s: float = Field(60.0, gt=0, le=3600)
    max_retries: int = Field(
        2,
        ge=0,
        le=10,
        description="extra attempts after a transport error, HTTP 429 or 5xx (backoff, jitter)",
    )
    backoff_s: float = Field(
        1.0,
        ge=0,
        le=600,
        description="first wait before a retry, doubled each time (jittered; Retry-After wins)",
    )
    max_new_tokens: int | None = Field(
        None,
        ge=1,
        le=131072,
        description="completion cap per call; null = agent.decision_tokens for a policy, 512 for a sub-agent",
    )
    token_param: Literal["max_tokens", "max_completion_tokens"] = Field(
        "max_tokens",
        description="the request field the completion cap is sent in (newer hosted APIs: "
        "max_completion_tokens)",
    )
    seed: int | None = Field(None, ge=0, description="sent as the request's seed (reproducible sampling)")
    inputs: list[Literal["image", "audio", "video"]] = Field(
        default_factory=list,
        description="media the model takes as content parts (a sub-agent's modal inputs, the extractor's "
        "media); the others it reads through tools",
    )
    image_max_side: int = Field(
        1024, ge=16, le=8192, description="images sent with a longer side are scaled down"
    )
    video_frames: int = Field(
        8, ge=1, le=256, description="frames sampled evenly from a video sent as images"
    )
    audio_via: Literal["input_audio", "transcriptions"] = Field(
        "input_audio",
        description="input_audio = the WAV as an input_audio part; transcriptions = the text of the "
        "provider's /audio/transcriptions endpoint",
    )
    transcription_model: str = Field("whisper-1", description="audio_via transcriptions: the model asked")
    decision_format: Literal["json", "lines"] = Field(
        "json", description="what a policy on this provider writes in the orchestra system"
    )
    state_style: Literal["verbose", "compact", "minimal", "bare", "marked"] = Field(
        "verbose",
        description="how a policy reads states: verbose (LLM) | compact | minimal | bare | marked (trained)",
    )

    @model_validator(mode="before")
    @classmethod
    def _no_vllm(cls, data: object) -> object:
        if isinstance(data, dict) and data.get("kind") == "vllm":
            raise ValueError(_VLLM_GONE)
        return data

    @model_validator(mode="after")
    def _needs(self) -> ProviderSpec:
        if self.kind == "openai" and not (self.base_url and self.model):
            raise ValueError("kind 'openai' needs base_url and model")
        if self.kind == "transformers" and not self.model:
            raise ValueError("kind 'transformers' needs model (a model directory)")
        if self.inputs and self.kind != "openai":
            raise ValueError(
                f"inputs (media as content parts) is for kind 'openai'; kind '{self.kind}' has none"
            )
        return self


class PathsParams(_Section):
    data_dir: str = Field(
        "data", description="where every asset writes data/<asset>/ (relative to params.yaml)"
    )


class TaskMix(_Section):
    """Relative weights of the seed task types the world generates."""

    image: float = Field(0.15, ge=0)
    audio: float = Field(0.10, ge=0)
    image_audio: float = Field(0.40, ge=0, description='"image + audio" tasks')
    video_audio: float = Field(0.35, ge=0, description='"video w/ audio" tasks')

    @model_validator(mode="after")
    def _positive(self) -> TaskMix:
        if self.image + self.audio + self.image_audio + self.video_audio <= 0:
            raise ValueError("at least one task type needs a positive weight")
        return self


Level = tuple[Fraction, Fraction]


class NoiseParams(_Section):
    """Per-file difficulty ranges ``[lo, hi]``: each media file draws its level uniformly from its
    modality's range (a single number means ``[x, x]``: every file at that level). The drawn level
    is recorded in ``truth/`` only, never in what the agent sees."""

    image: Level = Field((0.0, 0.5), description="0 = clean renders, 1 = heavy blur/rotation/JPEG noise")
    audio: Level = Field(
        (0.0, 0.8), description="0 = clean; 1 = loud noise, hum, fading, quiet gain, rapid jittery timing"
    )
    video: Level = Field(
        (0.4, 1.0), description="0 = clean; 1 = brief captions and events, fast motion, heavy frame noise"
    )

    @field_validator("image", "audio", "video", mode="before")
    @classmethod
    def _range(cls, v: object) -> object:
        return (v, v) if isinstance(v, int | float) else v

    @model_validator(mode="after")
    def _ordered(self) -> NoiseParams:
        for k in ("image", "audio", "video"):
            lo, hi = getattr(self, k)
            if lo > hi:
                raise ValueError(f"noise.{k}: [lo, hi] needs lo <= hi, got [{lo}, {hi}]")
        return self

    def draw(self, rng: np.random.Generator, modality: str) -> float:
        """A file's level: ``lo`` when the range is a point (no rng draw), else uniform in ``[lo, hi]``."""
        lo, hi = getattr(self, modality)
        return float(lo) if lo == hi else round(float(rng.uniform(lo, hi)), 4)


class WorldParams(_Section):
    seed: Seed = 7
    n_entities: int = Field(300, ge=20, le=20000)
    n_seeds: int = Field(300, ge=1, le=20000)
    distractors_per_entity: Fraction = Field(0.3, description="share of entities with a near-namesake page")
    categories: list[str] = Field(default_factory=lambda: list(CATEGORIES), min_length=1)
    task_mix: TaskMix = TaskMix()
    noise: NoiseParams = NoiseParams()
    speech: bool = Field(
        False,
        description="say half the audio numbers, years and names aloud (espeak-ng; params.yaml turns it on)",
    )
    video_seconds: float = Field(4.0, gt=0.5, le=60)
    video_fps: int = Field(8, ge=1, le=60)
    video_size: tuple[int, int] = (192, 144)
    video_audio_track: Literal["separate", "muxed"] = Field(
        "separate",
        description='how a "video w/ audio" task carries its sound: separate = a silent MP4 plus a WAV '
        "(two modal inputs); muxed = one MP4 whose PCM audio track is that sound (one modal input, "
        "as OmniGAIA's videos; read with video_extract_audio, then the audio tools)",
    )

    @model_validator(mode="after")
    def _known_categories(self) -> WorldParams:
        unknown = [c for c in self.categories if c not in CATEGORIES]
        if unknown:
            raise ValueError(f"unknown categories {unknown}; allowed: {list(CATEGORIES)}")
        return self


class SeedLimits(_Section):
    """Bounds on a seed task, checked by seed_tasks for every source (data/seed_checks.py); the defaults
    are far above the public OmniGAIA file's largest (question 1,867 characters, answer 1,140, 5 media)."""

    question_chars: int = Field(16_000, ge=1)
    answer_chars: int = Field(4_000, ge=1)
    media_per_task: int = Field(32, ge=0)
    media_bytes: int = Field(4 * 2**30, ge=1, description="largest media file, in bytes")
    id_chars: int = Field(128, ge=1)


class SeedParams(_Section):
    source: Literal["world", "omnigaia", "omnigaia_file", "coco", "finevideo", "longvideobench"] = Field(
        "world",
        description="world = procedural offline world; omnigaia = the shipped OmniGAIA metadata; coco, "
        "finevideo, longvideobench = a local copy of that dataset at seed.path (data/sources.py)",
    )
    path: str | None = Field(
        None,
        description="omnigaia_file: an OmniGAIA-format JSON file (media beside it); coco, finevideo, "
        "longvideobench: the dataset's local folder",
    )
    split: str | None = Field(
        None, description="coco: val2017 (default) | train2017; longvideobench: val (default)"
    )
    limit: int | None = Field(None, ge=1, description="keep only the first N seed tasks")
    incoming: str | None = Field(
        "incoming",
        description="a folder under the data root whose OmniGAIA-format JSON files (media in its media/) "
        "join the seeds; the Dagster sensor starts data_job when one appears; null = off",
    )
    world: WorldParams = WorldParams()
    limits: SeedLimits = SeedLimits()

    @model_validator(mode="after")
    def _source_inputs(self) -> SeedParams:
        if self.source in ("omnigaia_file", "coco", "finevideo", "longvideobench") and not self.path:
            raise ValueError(f"source {self.source!r} needs seed.path")
        return self


class AnchorParams(_Section):
    provider: str = Field(
        "builtin",
        description="a key of `providers`: the extractor (builtin: the reference solution's steps; openai: "
        "also states what the media show, each fact kept only when a perception sub-task recovers it)",
    )
    max_facts: int = Field(8, ge=1, le=64)
    expert: str | None = Field(
        None,
        description="solves the seeds that carry no solution program: a key of `providers` (an "
        "OpenAI-compatible orchestrator on the verbose state, or a transformers model) or checkpoint:DIR "
        "(e.g. data/policy_sft/model); its cheapest answer-verified trajectory becomes the seed's "
        "reference solution. null: such seeds are set aside",
    )
    attempts: int = Field(
        3, ge=1, le=32, description="expert runs per seed at most: the first greedy, the others sampled"
    )
    temperature: float = Field(
        0.7, gt=0, le=5, description="the expert's sampling temperature after the first run"
    )
    seed: Seed = Field(19, description="attempt k samples with seed + k")
    max_turns: int = Field(8, ge=1, le=64, description="decisions per expert run")


class RewriteParams(_Section):
    provider: str = "builtin"
    per_seed: int = Field(5, ge=1, le=50)
    strategies: list[str] = Field(default_factory=lambda: list(REWRITE_STRATEGIES), min_length=1)
    levels: list[str] = Field(default_factory=lambda: list(LEVELS), min_length=1)
    seed: Seed = 11

    @model_validator(mode="after")
    def _known(self) -> RewriteParams:
        bad = [s for s in self.strategies if s not in REWRITE_STRATEGIES]
        if bad:
            raise ValueError(f"unknown strategies {bad}; allowed: {list(REWRITE_STRATEGIES)}")
        bad = [lv for lv in self.levels if lv not in LEVELS]
        if bad:
            raise ValueError(f"unknown levels {bad}; allowed: {list(LEVELS)}")
        return self


class VerifyParams(_Section):
    judge_provider: str = Field(
        "builtin",
        description="a key of `providers`: kind builtin = programmatic judge, openai = an LLM judge",
    )
    min_anchor_coverage: Fraction = 1.0
    max_lexical_similarity: Fraction = 0.85
    # token_sort_ratio: word order does not matter (reordering clauses is no paraphrase) but every added or
    # dropped word counts, so a rewrite that extends the seed with a new hop is not scored as a copy the way
    # token_set_ratio / partial_ratio / WRatio score any superset or substring at 1.0; ratio is fooled by
    # mere reordering.
    similarity_metric: Literal["token_set_ratio", "token_sort_ratio", "ratio", "partial_ratio", "WRatio"] = (
        Field("token_sort_ratio", description="rapidfuzz scorer of the lexical-similarity check (0-1)")
    )
    modality_bypass: bool = Field(True, description="run the text-only solver (false: the check is skipped)")
    sandbox_timeout_s: float = Field(
        5.0, gt=0, le=120, description="wall-clock limit of one re-derivation sandbox call"
    )


OFF_PATH_KINDS: tuple[str, ...] = (
    "branch_failed",
    "branch_timed_out",
    "useless_subtask",
    "renumbered",
    "partial_batch",
    "evidence_order",
    "backend_order",
)


class DecisionParams(_Section):
    split: dict[Literal["train", "val", "test"], Fraction] = Field(
        default_factory=lambda: {"train": 0.8, "val": 0.1, "test": 0.1},
        description="by seed: no seed's samples in two splits; test is the embedded benchmark",
    )
    seed: Seed = 13
    off_path: dict[str, int] = Field(
        default_factory=lambda: dict.fromkeys(OFF_PATH_KINDS, 1),
        description="train only: per verified sample, how many off-path states / re-renderings of each kind",
    )

    @field_validator("off_path")
    @classmethod
    def _kinds(cls, v: dict[str, int]) -> dict[str, int]:
        bad = [k for k in v if k not in OFF_PATH_KINDS]
        if bad:
            raise ValueError(f"unknown off-path kinds {bad}; allowed: {list(OFF_PATH_KINDS)}")
        if any(n < 0 or n > 20 for n in v.values()):
            raise ValueError("off-path counts must be between 0 and 20")
        return v

    @model_validator(mode="after")
    def _sums(self) -> DecisionParams:
        if abs(sum(self.split.values()) - 1.0) > 1e-6:
            raise ValueError(f"split fractions must sum to 1, got {sum(self.split.values())}")
        return self


#: the rows of the papers' tables (orchestra.evaluation.report.LADDER), in table order
EVAL_ROWS = (
    "react_oracle",
    "orchestra_untrained",
    "orchestra_sft",
    "orchestra_grpo",
    "orchestra_dagrpo",
    "linear_dagrpo",
    "maestro_oracle",
    "linear_oracle",
    "orchestra_oracle",
)


class EvalParams(_Section):
    rows: list[str] = Field(
        default_factory=lambda: list(EVAL_ROWS), min_length=1, description="benchmark_scores rows"
    )
    tasks: int | None = Field(
        40, ge=1, description="the first N tasks of the embedded benchmark for every row; null = all"
    )
    concurrency: int = Field(2, ge=1, le=64, description="tasks run at once within a row")
    workers: int | None = Field(
        None, ge=1, le=64, description="processes running (shard, row) units at once; null = the usable cores"
    )
    judge_provider: str | None = Field(None, description="optional LLM judge on top of exact match")
    sc_k: int = Field(1, ge=1, le=64, description="Maestro self-consistency samples")
    max_turns: int = Field(8, ge=1, le=64)
    untrained_tasks: int = Field(
        4, ge=1, description="the untrained row's tasks: each try of it is decision_tokens of noise"
    )
    untrained_turns: int = Field(1, ge=1, le=64, description="the untrained row's turn budget")
    shards: int = Field(
        2, ge=1, le=256, description="benchmark shards: Dagster partitions of benchmark_scores"
    )

    @field_validator("rows")
    @classmethod
    def _known_rows(cls, v: list[str]) -> list[str]:
        bad = [r for r in v if r not in EVAL_ROWS]
        if bad:
            raise ValueError(f"unknown rows {bad}; allowed: {list(EVAL_ROWS)}")
        return v


class ScheduleParams(_Section):
    retrain: bool = Field(False, description="the weekly retraining schedule runs (off by default)")
    cron: str = Field("0 3 * * 1", description="when it runs (Dagster cron, UTC)")
    sensor_interval_s: int = Field(30, ge=5, description="how often the incoming-seeds sensor looks")


class TrackingParams(_Section):
    mlflow_uri: str = Field(
        "sqlite:///mlflow.db", description="MLflow 3.17 needs a database URI, not a folder"
    )
    experiment: str = "orchestra"
    ui_url: str = Field(
        "http://127.0.0.1:5000", description="the MLflow UI (make mlflow-ui) run links point at"
    )
    registered_model: str = Field(
        "orchestra-policy",
        pattern=r"^[A-Za-z0-9][\w.-]*$",
        description="the MLflow registered model each published policy is a version of (alias: its recipe)",
    )

    @model_validator(mode="after")
    def _not_file_store(self) -> TrackingParams:
        uri = self.mlflow_uri
        if "://" not in uri or uri.startswith("file:"):
            raise ValueError(f"mlflow_uri {uri!r}: use a database or server URI such as sqlite:///mlflow.db")
        return self
