"""The expert registry file: Level-1 skills with their Level-2 routines, and the experts (YAML, pydantic).

Maestro's two tiers: a policy routes a query to ``Model@@Skill`` (an expert and one of its
Level-1 skills); inside the skill the expert picks a Level-2 routine (by the builtin goal grammar,
else by the routine's keywords). Orchestra-o1 reads the same experts as the backend pool B and
matches a sub-task's demand against their skill vectors.

The file (``orchestra/resources/registry/experts.yaml`` ships with the project; ``agent.registry``
names another)::

    version: 1
    skills:                 # Level-1 skills: the builtin ones, plus any a user declares
      ocr: {description: ..., routines: {read_text: [text, name, sign], read_number: [number, digits]}}
      legal: {description: reads contracts, keywords: [contract, clause]}   # a new skill (LM experts)
    experts:                # the pool: BackendSpec entries (kind, provider, mode, skills, price, latency)
      vision_fast: {kind: builtin, mode: fast, skills: {ocr: 0.82}, price: {per_call: 0.001}, ...}
      my_gpt: {kind: openai, provider: gpt, skills: {legal: 0.9, reasoning: 0.9}}
    calibration: {...}      # what `orchestra backends calibrate` measured (world seed, items, date)

Skill levels of builtin experts are measured accuracies (``orchestra backends calibrate`` rewrites
them and each expert's ``measured`` table); ``agent.backends`` in params.yaml replaces or adds
experts by name on top of the file. Adding an expert or a skill is an edit of this file, no code.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, ValidationError, model_validator

from orchestra.backends.base import BackendError
from orchestra.config import SKILLS, AgentParams, BackendSpec, read_yaml
from orchestra.config.common import _Section
from orchestra.io import atomic_write_text
from orchestra.schemas import brief

__all__ = [
    "Registry",
    "SkillDef",
    "default_registry_path",
    "expert_specs",
    "load_registry",
    "registry_for",
    "write_registry",
]


class SkillDef(_Section):
    """A Level-1 skill: what it is, words that ask for it (demand inference for skills the builtin
    keyword table lacks), and its Level-2 routines with the words that pick each inside the skill."""

    description: str = ""
    keywords: list[str] = Field(default_factory=list)
    routines: dict[str, list[str]] = Field(default_factory=dict)


class Registry(_Section):
    """The registry file (module docstring)."""

    version: int = Field(1, ge=1, le=1)
    skills: dict[str, SkillDef] = Field(default_factory=dict)
    experts: dict[str, BackendSpec] = Field(default_factory=dict)
    calibration: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _known_skills(self) -> Registry:
        problem = self.unknown_skills(self.experts, "experts")
        if problem:
            raise ValueError(problem)
        return self

    def unknown_skills(self, experts: dict[str, BackendSpec], where: str) -> str | None:
        """Why one of ``experts`` names a skill this registry does not know, or None."""
        known = self.skill_names()
        for name, spec in experts.items():
            unknown = sorted(set(spec.skills) - known)
            if unknown:
                return (
                    f"{where}.{name}: unknown skills {unknown}; declare them under skills: "
                    f"(known: {', '.join(sorted(known))})"
                )
        return None

    def skill_names(self) -> set[str]:
        return set(SKILLS) | set(self.skills)

    def routines(self) -> dict[str, dict[str, list[str]]]:
        """Level-2 routine keywords by Level-1 skill (what a builtin expert picks a routine with)."""
        return {k: {r: list(w) for r, w in v.routines.items()} for k, v in self.skills.items() if v.routines}

    def keywords(self) -> dict[str, list[str]]:
        """Demand keywords of the skills this file declares (added to the builtin keyword table)."""
        return {k: list(v.keywords) for k, v in self.skills.items() if v.keywords}


def default_registry_path() -> Path:
    """The registry that ships with the project (the calibrated builtin pool)."""
    return Path(str(resources.files("orchestra") / "resources" / "registry" / "experts.yaml"))


def load_registry(path: str | Path | None = None) -> Registry:
    """Read and validate a registry file (``None``: the shipped one); one clear BackendError otherwise."""
    p = Path(path) if path is not None else default_registry_path()
    try:
        data = read_yaml(p.read_text(encoding="utf-8"))
    except OSError as e:
        raise BackendError(f"{p}: cannot read the expert registry: {e.strerror or e}") from e
    except yaml.YAMLError as e:
        raise BackendError(f"{p}: the expert registry is not valid YAML: {e}") from e
    try:
        return Registry.model_validate(data or {})
    except ValidationError as e:
        raise BackendError(f"{p}: invalid expert registry: {brief(e, 8)}") from e


def write_registry(path: str | Path, registry: Registry, header: str = "") -> None:
    """Write ``registry`` as YAML (keys in file order, atomically), with a comment header."""
    data = registry.model_dump(mode="json", exclude_defaults=True)
    text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=110, default_flow_style=None)
    lines = "".join(f"# {h}\n" if h else "#\n" for h in header.splitlines())
    atomic_write_text(Path(path), lines + text)


def registry_for(agent: AgentParams) -> Registry:
    """The registry ``agent.registry`` names (the shipped one by default)."""
    return load_registry(agent.registry)


def expert_specs(agent: AgentParams, registry: Registry | None = None) -> dict[str, BackendSpec]:
    """The pool B by name: the registry's experts, replaced or extended by ``agent.backends``."""
    reg = registry if registry is not None else registry_for(agent)
    specs = {**reg.experts, **agent.backends}
    if not specs:
        raise BackendError("the expert pool is empty: no experts in the registry nor in agent.backends")
    problem = reg.unknown_skills(agent.backends, "agent.backends")
    if problem:
        raise BackendError(problem)
    return specs
