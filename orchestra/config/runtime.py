"""Params sections of the runtime: the backend pool and orchestrator limits (agent), and the action tools."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from orchestra.config.common import SKILLS, Fraction, _Section


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


class SkillMeasure(_Section):
    """What calibration measured for one expert and skill."""

    accuracy: Fraction
    p50_s: float = Field(ge=0)
    n: int = Field(ge=1)
    tools: dict[str, float] = Field(
        default_factory=dict,
        description="p50 seconds per tool the skill's sub-tasks called (a skill's tools can differ tenfold: "
        "video_text and video_events)",
    )


class BackendSpec(_Section):
    """One expert of the pool B: its kind, skill vector, price and latency profile (a registry entry).

    Skill names are checked against the registry's skills when the pool is built (a registry may
    declare new ones)."""

    kind: Literal["builtin", "openai", "transformers"] = Field(
        "builtin", description="builtin = expert running real tool programs; openai/transformers = an LM"
    )
    provider: str | None = Field(None, description="openai/transformers: a key of `providers`")
    mode: Literal["fast", "careful"] | None = Field(
        None, description="builtin: the perception tool variant it runs (null: the tools' default, careful)"
    )
    description: str = Field("", description="one line shown to the orchestrator")
    skills: dict[str, Fraction] = Field(min_length=1, description="skill -> proficiency in [0, 1]")
    price: PriceSpec = PriceSpec()
    latency: LatencySpec = LatencySpec()
    measured: dict[str, SkillMeasure] = Field(
        default_factory=dict, description="per skill: calibrated accuracy, p50 latency, items (calibrate)"
    )

    @model_validator(mode="after")
    def _valid(self) -> BackendSpec:
        if self.kind != "builtin" and self.mode is not None:
            raise ValueError(f"mode is for builtin experts; kind '{self.kind}' has none")
        if self.kind != "builtin" and not self.provider:
            raise ValueError(f"kind '{self.kind}' needs provider (a key of `providers`)")
        return self


class AgentParams(_Section):
    """The orchestrator: backend pool, price table, scheduler limits, memory and stopping rule."""

    registry: str | None = Field(
        None,
        description="expert registry file (YAML: skills and experts); null = the shipped, calibrated pool "
        "(orchestra/resources/registry/experts.yaml)",
    )
    backends: dict[str, BackendSpec] = Field(
        default_factory=dict, description="experts replacing or adding to the registry's, by name"
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
        0.8,
        description="memory.sufficiency at which the loop ends: shown to the policy each turn, and once "
        "reached, an unusable decision or the last turn ends the run with the evidence's answer",
    )
    state_tokens: int = Field(
        3072,
        ge=64,
        le=1_048_576,
        description="THE state budget: tokens a rendered state may take, counted by the reading policy's "
        "tokenizer (regex counter without one); capped at the reader's context minus decision_tokens",
    )
    decision_tokens: int = Field(
        384,
        ge=16,
        le=131072,
        description="THE decision budget: tokens a policy may generate per decision (bench/state_size.py: "
        "the world's largest expert decision is 293 BPE tokens)",
    )
    evidence_tokens: int = Field(
        512, ge=16, le=131072, description="part of state_tokens the compressed evidence c_t may take at most"
    )
    cost_weight: float = Field(0.3, ge=0, le=10, description="lambda: cost penalty in backend selection")
    latency_weight: float = Field(0.1, ge=0, le=10, description="mu: latency penalty in backend selection")
    escalation_confidence: Fraction = Field(
        0.6,
        description="a perception result below this confidence is re-delegated to a stronger expert "
        "(the expert's escalation rule; tool confidences are scaled so >= 0.6 is right >= 97% of the time)",
    )
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


class SpeechToolParams(_Section):
    """audio_speech: the embedded template recogniser, or an OpenAI-compatible transcription endpoint."""

    backend: Literal["builtin", "openai"] = Field(
        "builtin",
        description="builtin = MFCC/DTW number recogniser; openai = POST {base_url}/audio/transcriptions",
    )
    base_url: str | None = Field(None, description="openai: endpoint, e.g. http://localhost:8000/v1")
    model: str | None = Field(None, description="openai: model name, e.g. whisper-1")
    api_key_env: str | None = Field(None, description="openai: environment variable with the API key")
    timeout_s: float = Field(60.0, gt=0, le=600)

    @model_validator(mode="after")
    def _needs(self) -> SpeechToolParams:
        if self.backend == "openai" and not (self.base_url and self.model):
            raise ValueError("tools.speech.backend 'openai' needs base_url and model")
        return self


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
    """Configuration of the action tools, the perception workers and the perception cache."""

    search: SearchToolParams = SearchToolParams()
    speech: SpeechToolParams = SpeechToolParams()
    browser: BrowserToolParams = BrowserToolParams()
    sandbox: SandboxToolParams = SandboxToolParams()
    workers: int | None = Field(
        None,
        ge=0,
        le=256,
        description="perception tools run in this many worker processes, so parallel sub-agents use every "
        "core (null = the cores this process may use; 0 = in the calling thread)",
    )
    cache: bool = Field(
        True,
        description="stages serve perception observations from the on-disk cache keyed by (tool, args, media "
        "SHA-256, tool version); cached observations keep their measured latency and cost; benches run cold",
    )
    cache_path: str = Field(
        "cache/perception.sqlite",
        min_length=1,
        description="the perception cache's SQLite file, relative to paths.data_dir (absolute: kept as is)",
    )
