"""Params: the pydantic model of params.yaml, and a loader that turns failures into one clear error."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from orchestra.errors import ConfigError

CATEGORIES: tuple[str, ...] = (
    "Geography & Travel",
    "History & Society",
    "Technology",
    "Sports",
    "Arts & Culture",
    "Movies",
    "Science & Nature",
    "Finance & Commerce",
    "Food & Nutrition",
)
LEVELS: tuple[str, ...] = ("Easy", "Medium", "Hard")
REWRITE_STRATEGIES: tuple[str, ...] = (
    "paraphrase",
    "entity_obfuscation",
    "multi_hop_extension",
    "numeric_composition",
    "cross_modal_binding",
)

SKILLS: tuple[str, ...] = (
    "ocr",
    "counting",
    "chart",
    "audio_signal",
    "speech",
    "video_temporal",
    "search",
    "browse",
    "code",
    "reasoning",
)

Fraction = Annotated[float, Field(ge=0.0, le=1.0)]
Seed = Annotated[int, Field(ge=0, le=2**32 - 1)]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ProviderSpec(_Section):
    """Where a component gets its model from (DESIGN.md, Model providers)."""

    kind: Literal["builtin", "openai", "transformers", "vllm"] = Field(
        "builtin", description="builtin = embedded default (no network, no weights)"
    )
    model: str | None = Field(None, description="model name (openai/vllm) or model directory (transformers)")
    base_url: str | None = Field(
        None, description="OpenAI-compatible endpoint, e.g. http://localhost:8000/v1"
    )
    api_key_env: str | None = Field(None, description="name of the environment variable holding the API key")
    timeout_s: float = Field(60.0, gt=0, le=3600)
    max_retries: int = Field(2, ge=0, le=10)

    @model_validator(mode="after")
    def _needs(self) -> ProviderSpec:
        if self.kind == "openai" and not (self.base_url and self.model):
            raise ValueError("kind 'openai' needs base_url and model")
        if self.kind in ("transformers", "vllm") and not self.model:
            raise ValueError(f"kind '{self.kind}' needs model (a model directory or name)")
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


class NoiseParams(_Section):
    image: Fraction = Field(0.3, description="0 = clean renders, 1 = heavy blur/rotation/JPEG noise")
    audio: Fraction = Field(0.1, description="relative noise amplitude added to audio")
    video: Fraction = Field(0.2, description="frame noise level")


class WorldParams(_Section):
    seed: Seed = 7
    n_entities: int = Field(300, ge=20, le=20000)
    n_seeds: int = Field(300, ge=1, le=20000)
    distractors_per_entity: Fraction = Field(0.3, description="share of entities with a near-namesake page")
    categories: list[str] = Field(default_factory=lambda: list(CATEGORIES), min_length=1)
    task_mix: TaskMix = TaskMix()
    noise: NoiseParams = NoiseParams()
    speech: bool = Field(False, description="add espeak-ng speech as an extra audio channel when available")
    video_seconds: float = Field(4.0, gt=0.5, le=60)
    video_fps: int = Field(8, ge=1, le=60)
    video_size: tuple[int, int] = (192, 144)

    @model_validator(mode="after")
    def _known_categories(self) -> WorldParams:
        unknown = [c for c in self.categories if c not in CATEGORIES]
        if unknown:
            raise ValueError(f"unknown categories {unknown}; allowed: {list(CATEGORIES)}")
        return self


class SeedParams(_Section):
    source: Literal["world", "omnigaia", "omnigaia_file"] = Field(
        "world", description="world = procedural offline world; omnigaia = the shipped OmniGAIA metadata"
    )
    path: str | None = Field(
        None, description="omnigaia_file: an OmniGAIA-format JSON file (media beside it)"
    )
    limit: int | None = Field(None, ge=1, description="keep only the first N seed tasks")
    world: WorldParams = WorldParams()

    @model_validator(mode="after")
    def _source_inputs(self) -> SeedParams:
        if self.source == "omnigaia_file" and not self.path:
            raise ValueError("source 'omnigaia_file' needs seed.path")
        return self


class AnchorParams(_Section):
    provider: str = Field("builtin", description="a key of `providers`")
    max_facts: int = Field(8, ge=1, le=64)


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
    judge_provider: str = "builtin"
    min_anchor_coverage: Fraction = 1.0
    max_lexical_similarity: Fraction = 0.85
    modality_bypass: bool = True
    sandbox_timeout_s: float = Field(5.0, gt=0, le=120)


class DecisionParams(_Section):
    split: dict[Literal["train", "val", "test"], Fraction] = Field(
        default_factory=lambda: {"train": 0.8, "val": 0.1, "test": 0.1}
    )
    max_context_tokens: int = Field(2048, ge=128, le=131072)
    seed: Seed = 13

    @model_validator(mode="after")
    def _sums(self) -> DecisionParams:
        if abs(sum(self.split.values()) - 1.0) > 1e-6:
            raise ValueError(f"split fractions must sum to 1, got {sum(self.split.values())}")
        return self


class PolicyInit(_Section):
    provider: str = Field(
        "tiny", description="'tiny' = a small policy built from scratch, or a key of `providers`"
    )
    hidden_size: int = Field(128, ge=16, le=8192)
    layers: int = Field(2, ge=1, le=64)
    heads: int = Field(4, ge=1, le=64)
    max_length: int = Field(1024, ge=64, le=131072)


class SFTParams(_Section):
    epochs: float = Field(1.0, gt=0, le=100)
    learning_rate: float = Field(5e-4, gt=0, le=1)
    batch_size: int = Field(8, ge=1, le=1024)
    max_steps: int = Field(-1, ge=-1)


class GRPOParams(_Section):
    learning_rate: float = Field(1e-5, gt=0, le=1)
    num_generations: int = Field(4, ge=2, le=64)
    steps_per_generation: int = Field(1, ge=1, le=64)
    per_device_batch_size: int = Field(4, ge=1, le=1024)
    beta: float = Field(0.04, ge=0, le=10, description="KL weight to the reference policy (TRL default is 0)")
    epsilon: float = Field(0.2, gt=0, le=1, description="PPO-style clip range")
    loss_type: Literal["grpo", "dapo", "dr_grpo", "bnpo"] = "grpo"
    max_steps: int = Field(50, ge=1)
    max_completion_length: int = Field(256, ge=8, le=32768)
    temperature: float = Field(1.0, gt=0, le=5)

    @model_validator(mode="after")
    def _divides(self) -> GRPOParams:
        if (self.per_device_batch_size * self.steps_per_generation) % self.num_generations:
            raise ValueError(
                "per_device_batch_size * steps_per_generation must be a multiple of num_generations"
            )
        return self


class RubricWeights(_Section):
    format: float = Field(1.0, ge=0)
    validity: float = Field(1.0, ge=0)
    tools: float = Field(1.0, ge=0)
    decision: float = Field(2.0, ge=0)


class DAGRPOParams(GRPOParams):
    reward_provider: str = "builtin"
    rubric: RubricWeights = RubricWeights()


class TrainParams(_Section):
    seed: Seed = 17
    policy: PolicyInit = PolicyInit()
    sft: SFTParams = SFTParams()
    grpo: GRPOParams = GRPOParams()
    dagrpo: DAGRPOParams = DAGRPOParams()


class EvalParams(_Section):
    systems: list[Literal["orchestra", "linear", "react", "maestro"]] = Field(
        default_factory=lambda: ["orchestra", "linear", "react", "maestro"], min_length=1
    )
    judge_provider: str | None = Field(None, description="optional LLM judge on top of exact match")
    sc_k: int = Field(1, ge=1, le=64, description="Maestro self-consistency samples")
    max_parallel: int = Field(4, ge=1, le=256)
    max_turns: int = Field(8, ge=1, le=64)


class TrackingParams(_Section):
    mlflow_uri: str = Field(
        "sqlite:///mlflow.db", description="MLflow 3.17 needs a database URI, not a folder"
    )
    experiment: str = "orchestra"

    @model_validator(mode="after")
    def _not_file_store(self) -> TrackingParams:
        uri = self.mlflow_uri
        if "://" not in uri or uri.startswith("file:"):
            raise ValueError(f"mlflow_uri {uri!r}: use a database or server URI such as sqlite:///mlflow.db")
        return self


class PriceSpec(_Section):
    """What one call costs (price table entry; USD or any consistent unit)."""

    per_call: float = Field(0.0, ge=0, description="flat price per call")
    per_1k_input_tokens: float = Field(0.0, ge=0, description="price per 1000 prompt tokens")
    per_1k_output_tokens: float = Field(0.0, ge=0, description="price per 1000 completion tokens")


class LatencySpec(_Section):
    """Expected wall time of one call: base + per_1k_tokens * tokens / 1000."""

    base_s: float = Field(0.0, ge=0, le=3600, description="fixed seconds per call")
    per_1k_tokens_s: float = Field(0.0, ge=0, le=3600, description="seconds per 1000 tokens processed")


def _check_skills(skills: dict[str, float], where: str) -> None:
    unknown = sorted(set(skills) - set(SKILLS))
    if unknown:
        raise ValueError(f"{where}: unknown skills {unknown}; allowed: {list(SKILLS)}")


class BackendSpec(_Section):
    """One sub-agent backend of the pool B: its kind, skill vector, price and latency profile."""

    kind: Literal["builtin", "openai", "transformers"] = Field(
        "builtin", description="builtin = expert running real tool programs; openai/transformers = an LM"
    )
    provider: str | None = Field(None, description="openai/transformers: a key of `providers`")
    description: str = Field("", description="one line shown to the orchestrator")
    skills: dict[str, Fraction] = Field(min_length=1, description="skill -> proficiency in [0, 1]")
    price: PriceSpec = PriceSpec()
    latency: LatencySpec = LatencySpec()

    @model_validator(mode="after")
    def _valid(self) -> BackendSpec:
        _check_skills(self.skills, "skills")
        if self.kind != "builtin" and not self.provider:
            raise ValueError(f"kind '{self.kind}' needs provider (a key of `providers`)")
        return self


def _expert(description: str, price: float, base_s: float, skills: dict[str, float]) -> BackendSpec:
    return BackendSpec(
        description=description,
        skills=skills,
        price=PriceSpec(per_call=price),
        latency=LatencySpec(base_s=base_s, per_1k_tokens_s=0.05),
    )


def _default_backends() -> dict[str, BackendSpec]:
    """The embedded expert pool: builtin experts with different skill profiles (Maestro-style)."""
    everything = {s: 0.5 for s in SKILLS} | {"search": 0.6, "browse": 0.6, "code": 0.6, "reasoning": 0.8}
    return {
        "vision_expert": _expert(
            "reads images: text, shapes, charts",
            0.002,
            0.5,
            {"ocr": 0.9, "counting": 0.85, "chart": 0.8, "reasoning": 0.3},
        ),
        "audio_expert": _expert(
            "listens: tones, DTMF, Morse, speech",
            0.002,
            0.5,
            {"audio_signal": 0.9, "speech": 0.8, "reasoning": 0.2},
        ),
        "video_expert": _expert(
            "watches video: events over time, its audio track",
            0.004,
            1.0,
            {"video_temporal": 0.9, "counting": 0.6, "audio_signal": 0.6, "ocr": 0.4},
        ),
        "web_expert": _expert(
            "searches and browses the knowledge base",
            0.001,
            0.3,
            {"search": 0.9, "browse": 0.9, "reasoning": 0.4},
        ),
        "code_expert": _expert(
            "computes in a Python sandbox", 0.001, 0.2, {"code": 0.95, "reasoning": 0.7, "chart": 0.2}
        ),
        "generalist": _expert("a bit of everything, slower and dearer", 0.01, 2.0, everything),
    }


class AgentParams(_Section):
    """The orchestrator: backend pool, price table, scheduler limits, memory and stopping rule."""

    backends: dict[str, BackendSpec] = Field(
        default_factory=_default_backends, min_length=1, description="the backend pool B, by name"
    )
    tool_prices: dict[str, PriceSpec] = Field(
        default_factory=dict, description="price table for tools by name (unlisted: the tool's own)"
    )
    tool_skills: dict[str, dict[str, Fraction]] = Field(
        default_factory=dict, description="skill profile per tool name, overriding the tool's own"
    )
    policy_price: PriceSpec = Field(PriceSpec(), description="price of one orchestrator (policy) call")
    max_parallel: int = Field(4, ge=1, le=256, description="sub-tasks running at once (1 = linear)")
    cost_budget: float | None = Field(
        None, gt=0, description="estimated sub-task cost allowed per task run; null = unlimited"
    )
    max_retries: int = Field(1, ge=0, le=10, description="extra attempts for a failed or timed-out sub-task")
    subagent_max_steps: int = Field(6, ge=1, le=64, description="ReAct steps per sub-agent")
    subagent_timeout_s: float = Field(30.0, gt=0, le=3600, description="wall time per sub-task attempt")
    sufficiency_threshold: Fraction = Field(
        0.8, description="evidence-sufficiency score at which the loop stops (memory.sufficiency)"
    )
    evidence_tokens: int = Field(
        512, ge=16, le=131072, description="token budget of the compressed evidence context c_t"
    )
    cost_weight: float = Field(0.3, ge=0, le=10, description="lambda: cost penalty in backend selection")
    latency_weight: float = Field(0.1, ge=0, le=10, description="mu: latency penalty in backend selection")
    max_tools: int = Field(3, ge=1, le=32, description="tools per sub-task chosen by the sparse cover")
    redundancy_penalty: Fraction = Field(0.5, description="rho: penalty on a tool re-covering covered demand")

    @model_validator(mode="after")
    def _valid(self) -> AgentParams:
        for name, profile in self.tool_skills.items():
            _check_skills(profile, f"tool_skills.{name}")
        return self


class SearchToolParams(_Section):
    """web_search: where results come from."""

    backend: Literal["local", "brave"] = Field(
        "local", description="local = SQLite FTS5/BM25 over the world's pages; brave = Brave Search API"
    )
    api_key_env: str = Field("BRAVE_SEARCH_API_KEY", description="brave: environment variable with the key")
    endpoint: str = Field("https://api.search.brave.com/res/v1/web/search", description="brave: API URL")
    timeout_s: float = Field(10.0, gt=0, le=120)
    default_k: int = Field(5, ge=1, le=20, description="results per query when the caller gives no k")


class BrowserToolParams(_Section):
    """page_browser: live fetching is off by default; the world's pages are always readable."""

    allow_http: bool = Field(False, description="fetch real http(s) pages (allowlisted public hosts only)")
    allow_hosts: list[str] = Field(default_factory=list, description="host names (and their subdomains)")
    max_bytes: int = Field(2_000_000, ge=1024, le=100_000_000, description="cap on a fetched page's size")
    timeout_s: float = Field(10.0, gt=0, le=120, description="cap on one fetch, redirects included")
    max_chars: int = Field(6000, ge=200, le=200_000, description="characters of page text per call")


class SandboxToolParams(_Section):
    """code_executor: limits of one snippet run (a fresh confined process each time)."""

    cpu_s: float = Field(5.0, gt=0, le=600, description="CPU seconds (rounded up to whole seconds)")
    wall_s: float = Field(10.0, gt=0, le=3600, description="wall-clock seconds")
    mem_mb: int = Field(512, ge=64, le=65536, description="address-space limit per process")
    max_output: int = Field(20_000, ge=100, le=10_000_000, description="bytes of stdout/stderr kept")
    max_procs: int = Field(32, ge=1, le=4096, description="RLIMIT_NPROC of the sandbox user")
    disk_mb: int = Field(64, ge=1, le=65536, description="size of the private temp folder / largest file")
    pool_size: int = Field(2, ge=0, le=32, description="workers kept started ahead of calls")
    uid: int = Field(65534, ge=1, le=2**31 - 1, description="user the sandbox runs as when started by root")
    gid: int = Field(65534, ge=1, le=2**31 - 1)
    namespaces: bool = Field(True, description="use pid/net/mount (and user) namespaces if the kernel allows")
    require_landlock: bool = Field(True, description="refuse to run when Landlock cannot confine file writes")


class ToolParams(_Section):
    """Configuration of the action tools (perception tools need none)."""

    search: SearchToolParams = SearchToolParams()
    browser: BrowserToolParams = BrowserToolParams()
    sandbox: SandboxToolParams = SandboxToolParams()


def _default_providers() -> dict[str, ProviderSpec]:
    return {"builtin": ProviderSpec()}


class Params(_Section):
    """The whole of params.yaml."""

    paths: PathsParams = PathsParams()
    seed: SeedParams = SeedParams()
    anchors: AnchorParams = AnchorParams()
    rewrite: RewriteParams = RewriteParams()
    verify: VerifyParams = VerifyParams()
    decisions: DecisionParams = DecisionParams()
    train: TrainParams = TrainParams()
    eval: EvalParams = EvalParams()
    tracking: TrackingParams = TrackingParams()
    agent: AgentParams = AgentParams()
    tools: ToolParams = ToolParams()
    providers: dict[str, ProviderSpec] = Field(default_factory=_default_providers)

    @model_validator(mode="after")
    def _providers_exist(self) -> Params:
        refs = {
            "anchors.provider": self.anchors.provider,
            "rewrite.provider": self.rewrite.provider,
            "verify.judge_provider": self.verify.judge_provider,
            "train.dagrpo.reward_provider": self.train.dagrpo.reward_provider,
            "eval.judge_provider": self.eval.judge_provider,
        }
        for name, spec in self.agent.backends.items():
            if spec.provider is not None:
                refs[f"agent.backends.{name}.provider"] = spec.provider
        if self.train.policy.provider != "tiny":
            refs["train.policy.provider"] = self.train.policy.provider
        for key, name in refs.items():
            if name is not None and name not in self.providers:
                raise ValueError(f"{key} = {name!r} is not a key of providers {sorted(self.providers)}")
        return self


def _describe(err: dict[str, Any]) -> str:
    loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
    if err["type"] == "extra_forbidden":
        return f"{loc}: unknown key (misspelled?)"
    msg = err["msg"].removeprefix("Value error, ")
    ctx = err.get("ctx") or {}
    bound = [f"{k} {v}" for k, v in ctx.items() if k in ("ge", "gt", "le", "lt", "min_length", "max_length")]
    if "expected" in ctx:
        bound.append(f"allowed: {ctx['expected']}")
    return f"{loc}: {msg}" + (f" ({', '.join(bound)})" if bound and "allowed" not in msg else "")


def parse_params(data: Any, origin: str = "params") -> Params:
    """Validate already-loaded YAML data; one ConfigError lists every problem by key path."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{origin}: expected a mapping at the top level, got {type(data).__name__}")
    try:
        return Params.model_validate(data)
    except ValidationError as e:
        lines = "\n".join(f"  - {_describe(err)}" for err in e.errors())
        raise ConfigError(f"{origin}: invalid params:\n{lines}") from e


def load_params(path: str | Path = "params.yaml") -> Params:
    """Load and validate a params file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"{path}: cannot read params file: {e.strerror or e}") from e
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from e
    return parse_params(data, str(path))


def data_root(params_path: str | Path, params: Params) -> Path:
    """The data folder: ``paths.data_dir`` resolved against the params file's folder."""
    return (Path(params_path).resolve().parent / params.paths.data_dir).resolve()
