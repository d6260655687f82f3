"""Params: the pydantic model of params.yaml, and a loader that turns failures into one clear error.

The sections live in ``common`` (base class, vocabularies), ``stages`` (pipeline stages), ``training``
(the ``train`` section) and ``runtime`` (agent and tools); everything is re-exported here, so
``from orchestra.config import X``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, ValidationError, model_validator

from orchestra.config.common import (
    CATEGORIES,
    LEVELS,
    REWRITE_STRATEGIES,
    SKILLS,
    Fraction,
    Seed,
    _Section,
)
from orchestra.config.runtime import (
    AgentParams,
    BackendSpec,
    BrowserToolParams,
    LatencySpec,
    PriceSpec,
    SandboxToolParams,
    SearchToolParams,
    SkillMeasure,
    ToolParams,
)
from orchestra.config.stages import (
    AnchorParams,
    DecisionParams,
    EvalParams,
    NoiseParams,
    PathsParams,
    ProviderSpec,
    RewriteParams,
    ScheduleParams,
    SeedParams,
    TaskMix,
    TrackingParams,
    VerifyParams,
    WorldParams,
)
from orchestra.config.training import (
    DAGRPOParams,
    GRPOParams,
    OutcomeGRPOParams,
    PolicyInit,
    RubricWeights,
    SFTParams,
    TrainParams,
)
from orchestra.errors import ConfigError

__all__ = [
    "read_yaml",
    "CATEGORIES",
    "LEVELS",
    "REWRITE_STRATEGIES",
    "SKILLS",
    "AgentParams",
    "AnchorParams",
    "BackendSpec",
    "BrowserToolParams",
    "DAGRPOParams",
    "DecisionParams",
    "EvalParams",
    "Fraction",
    "GRPOParams",
    "OutcomeGRPOParams",
    "LatencySpec",
    "NoiseParams",
    "Params",
    "PathsParams",
    "PolicyInit",
    "PriceSpec",
    "ProviderSpec",
    "RewriteParams",
    "RubricWeights",
    "SandboxToolParams",
    "SearchToolParams",
    "Seed",
    "SkillMeasure",
    "SeedParams",
    "SFTParams",
    "TaskMix",
    "ToolParams",
    "ScheduleParams",
    "TrackingParams",
    "TrainParams",
    "VerifyParams",
    "WorldParams",
    "data_root",
    "load_params",
    "parse_params",
]


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
    schedule: ScheduleParams = ScheduleParams()
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
        expert = self.anchors.expert
        if expert is not None and not expert.startswith("checkpoint:"):
            refs["anchors.expert"] = expert
            if expert in self.providers and self.providers[expert].kind == "builtin":
                raise ValueError(
                    f"anchors.expert = {expert!r} is a builtin provider: name an openai or transformers "
                    "provider, or checkpoint:DIR"
                )
        if self.agent.decision_tokens >= self.train.policy.max_length:
            raise ValueError(
                f"agent.decision_tokens ({self.agent.decision_tokens}) leaves the trained policy no room for "
                f"a state: it must be below train.policy.max_length ({self.train.policy.max_length})"
            )
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


class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.safe_load`` that refuses a key given twice in one mapping (YAML keeps the last one
    silently, so a second ``speech:`` further down would undo the first without a word)."""


def _unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> Any:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, (str, int, float, bool)):
            continue  # a complex key: YAML's own rules apply
        if key in seen:
            where, problem = "while reading a mapping", f"found the key {key!r} twice"
            raise yaml.constructor.ConstructorError(where, node.start_mark, problem, key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)


def read_yaml(text: str) -> Any:
    """``text`` parsed as YAML like ``yaml.safe_load``, but a key repeated in a mapping is an error."""
    return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass


#: the key an overlay names its base params file with (a path relative to the overlay)
EXTENDS = "extends"


def _merge(base: Any, over: Any) -> Any:
    """``over`` on top of ``base``: mappings merge key by key, anything else is replaced."""
    if isinstance(base, dict) and isinstance(over, dict):
        return {**base, **{k: _merge(base.get(k), v) for k, v in over.items()}}
    return over


def _read(path: Path, chain: tuple[Path, ...] = ()) -> Any:
    """A params file's data, its ``extends`` base (recursively) merged under it."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"{path}: cannot read params file: {e.strerror or e}") from e
    try:
        data = read_yaml(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from e
    if not isinstance(data, dict) or EXTENDS not in data:
        return data
    base = path.parent / str(data.pop(EXTENDS))
    if base.resolve() in chain or base.resolve() == path.resolve():
        raise ConfigError(f"{path}: {EXTENDS}: {base} extends this file again (a cycle)")
    return _merge(_read(base, (*chain, path.resolve())), data)


def load_params(path: str | Path = "params.yaml") -> Params:
    """Load and validate a params file. A file with ``extends: BASE`` is an overlay: BASE (relative to
    it) is read first and the overlay's keys merged on top, mapping by mapping (``configs/``); the
    data folder stays relative to the overlay (:func:`data_root`)."""
    path = Path(path)
    return parse_params(_read(path), str(path))


def data_root(params_path: str | Path, params: Params) -> Path:
    """The data folder: ``paths.data_dir`` resolved against the params file's folder."""
    return (Path(params_path).resolve().parent / params.paths.data_dir).resolve()
