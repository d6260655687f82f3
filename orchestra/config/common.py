"""Shared pieces of the params model: the section base class, bounded types and the closed vocabularies."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

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
    "entity_obfuscation",
    "multi_hop_chaining",
    "numeric_composition",
    "cross_modal_fusion",
    "constraint_scoping",
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
