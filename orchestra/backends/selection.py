"""Cost-aware backend matching and a sparse, low-redundancy tool cover for a sub-task's skill demand."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol, TypeVar

from orchestra.backends.base import BackendError
from orchestra.config import SKILLS
from orchestra.tools.base import Tool

__all__ = [
    "KEYWORDS",
    "MODALITY_PRIORS",
    "Profiled",
    "infer_demand",
    "match_score",
    "rank_backends",
    "score_terms",
    "select_backend",
    "select_tools",
    "tool_profiles",
]


class _Estimates(Protocol):
    def estimate(self, tokens: int = ...) -> float: ...


class Profiled(Protocol):
    """Anything with a name, a skill vector and cost/latency estimates (a Backend is one)."""

    name: str
    skills: Mapping[str, float]

    @property
    def cost(self) -> _Estimates: ...

    @property
    def latency(self) -> _Estimates: ...


P = TypeVar("P", bound=Profiled)


def match_score(skills: Mapping[str, float], demand: Mapping[str, float]) -> float:
    """``cosine(s, d) * coverage(s, d)`` in [0, 1].

    ``cosine`` rewards a skill profile shaped like the demand (a specialist beats a generalist on
    its speciality); ``coverage = sum_k d_k * min(s_k, 1) / sum_k d_k`` is the share of the demand
    the backend is proficient in. Zero when either vector is zero.
    """
    keys = set(skills) | set(demand)
    dot = sum(skills.get(k, 0.0) * demand.get(k, 0.0) for k in keys)
    ns = math.sqrt(sum(v * v for v in skills.values()))
    nd = math.sqrt(sum(v * v for v in demand.values()))
    total = sum(demand.values())
    if ns == 0 or nd == 0 or total <= 0:
        return 0.0
    coverage = sum(d * min(skills.get(k, 0.0), 1.0) for k, d in demand.items()) / total
    return dot / (ns * nd) * coverage


def score_terms(
    demand: Mapping[str, float],
    backends: Sequence[P],
    cost_weight: float = 0.3,
    latency_weight: float = 0.0,
) -> list[dict[str, float | str]]:
    """Per backend, best first: ``{backend, match, cost, latency, score}`` — the terms of

    ``score(b) = match_score(s_b, d) - cost_weight * c_b / max_b' c_b' - latency_weight * l_b / max_b' l_b'``

    (``cost``/``latency`` are the two penalties as subtracted) with ``c_b``/``l_b`` the backend's
    estimated price/latency for one call. Ties go to the lower estimated price, then the name, so
    the ranking is deterministic. What ``orchestra answer`` prints for each node.
    """
    if not backends:
        raise BackendError("no backends to choose from")
    bad = {k: v for k, v in demand.items() if v < 0}
    if bad:
        raise BackendError(f"demand weights must be >= 0, got {bad}")
    costs = {b.name: b.cost.estimate() for b in backends}
    lats = {b.name: b.latency.estimate() for b in backends}
    cmax = max(costs.values()) or 1.0
    lmax = max(lats.values()) or 1.0
    rows: list[dict[str, float | str]] = []
    for b in backends:
        match = match_score(b.skills, demand)
        cost = cost_weight * costs[b.name] / cmax
        lat = latency_weight * lats[b.name] / lmax
        rows.append(
            {"backend": b.name, "match": match, "cost": cost, "latency": lat, "score": match - cost - lat}
        )
    rows.sort(key=lambda r: (-float(r["score"]), costs[str(r["backend"])], str(r["backend"])))
    return rows


def rank_backends(
    demand: Mapping[str, float],
    backends: Sequence[P],
    cost_weight: float = 0.3,
    latency_weight: float = 0.0,
) -> list[tuple[P, float]]:
    """Backends with their scores, best first (the terms: :func:`score_terms`)."""
    by_name = {b.name: b for b in backends}
    return [
        (by_name[str(r["backend"])], float(r["score"]))
        for r in score_terms(demand, backends, cost_weight, latency_weight)
    ]


def select_backend(
    demand: Mapping[str, float],
    backends: Sequence[P],
    cost_weight: float = 0.3,
    latency_weight: float = 0.0,
) -> P:
    """The backend maximising the cost-aware matching score of :func:`rank_backends`."""
    return rank_backends(demand, backends, cost_weight, latency_weight)[0][0]


def select_tools(
    demand: Mapping[str, float],
    tools: Mapping[str, Mapping[str, float]],
    max_tools: int = 3,
    redundancy_penalty: float = 0.5,
    eps: float = 1e-9,
) -> list[str]:
    """A sparse tool subset covering ``demand`` (greedy weighted set cover with redundancy penalty).

    With residual demand ``r`` (initially ``d``) and covered demand ``c = d - r``, each round picks
    the tool maximising ``gain(t) = sum_k min(r_k, s_tk) - rho * sum_k min(s_tk, c_k)`` (new
    coverage minus re-coverage of what earlier picks already cover), then sets
    ``r_k <- max(0, r_k - s_tk)``. It stops after ``max_tools`` picks, when the residual is
    exhausted, or when no tool has positive gain. Ties go to the tool name. Returns names in pick order.
    """
    residual = {k: float(v) for k, v in demand.items() if v > 0}
    picked: list[str] = []
    while len(picked) < max_tools and sum(residual.values()) > eps:
        best: tuple[float, str] | None = None
        for name in sorted(tools):
            if name in picked:
                continue
            prof = tools[name]
            new = sum(min(r, prof.get(k, 0.0)) for k, r in residual.items())
            again = sum(min(prof.get(k, 0.0), demand[k] - r) for k, r in residual.items())
            gain = new - redundancy_penalty * again
            if gain > eps and (best is None or gain > best[0] + eps):
                best = (gain, name)
        if best is None:
            break
        picked.append(best[1])
        prof = tools[best[1]]
        residual = {k: max(0.0, r - prof.get(k, 0.0)) for k, r in residual.items()}
    return picked


def tool_profiles(
    tools: Iterable[Tool], overrides: Mapping[str, Mapping[str, float]] | None = None
) -> dict[str, dict[str, float]]:
    """Skill profile per tool: a tool class's ``skills`` attribute (``{skill: level}``; tools that
    declare none get ``{}``), replaced by ``overrides[name]`` (``params.agent.tool_skills``)."""
    overrides = overrides or {}
    out: dict[str, dict[str, float]] = {}
    for tool in tools:
        prof = overrides.get(tool.name, getattr(tool, "skills", None) or {})
        out[tool.name] = {k: float(v) for k, v in prof.items()}
    return out


#: Demand every modality adds on its own (before any keyword): image, audio, video.
MODALITY_PRIORS: dict[str, dict[str, float]] = {
    "image": {"ocr": 0.5, "counting": 0.3, "chart": 0.3},
    "audio": {"audio_signal": 0.6, "speech": 0.4},
    "video": {"video_temporal": 0.7, "audio_signal": 0.3},
}

#: Words/phrases in a goal that add 1.0 to a skill's demand (whole-word match, lowercase).
KEYWORDS: dict[str, tuple[str, ...]] = {
    "ocr": ("read", "text", "written", "label", "sign", "title", "word", "letters", "caption", "ocr"),
    "counting": ("how many", "count", "number of", "shapes"),
    "chart": ("chart", "bar", "bars", "plot", "graph", "axis", "tallest", "shortest"),
    "audio_signal": ("tone", "tones", "beep", "beeps", "dtmf", "frequency", "hz", "morse", "pitch", "dialed"),
    "speech": ("spoken", "speech", "speaker", "voice", "said", "announced", "pronounced"),
    "video_temporal": ("frame", "frames", "first", "last", "before", "after", "appears", "order", "moment"),
    "search": ("search", "look up", "find", "who", "which", "entity"),
    "browse": ("page", "url", "article", "browse", "field", "founded", "population", "born"),
    "code": (
        "compute",
        "calculate",
        "sum",
        "difference",
        "product",
        "multiply",
        "add",
        "subtract",
        "divide",
        "ratio",
        "percent",
        "average",
        "plus",
        "minus",
        "times",
    ),
    "reasoning": ("compare", "combine", "deduce", "infer", "whether", "therefore"),
}

_PATTERNS = {
    skill: re.compile(r"\b(?:" + "|".join(re.escape(w) for w in words) + r")\b")
    for skill, words in KEYWORDS.items()
}


def infer_demand(goal: str, modal_types: Iterable[str] = (), skill: str | None = None) -> dict[str, float]:
    """A demand vector for a sub-task, scaled so its largest weight is 1.

    If ``skill`` is named (Maestro's ``Model@@Skill``) the demand is ``{skill: 1}``. Otherwise each
    allowed modality adds :data:`MODALITY_PRIORS`, each :data:`KEYWORDS` hit in the goal adds 1 to
    its skill, and ``reasoning`` gets a floor of 0.1 so an empty goal still asks for something.
    """
    if skill is not None:
        if skill not in SKILLS:
            raise BackendError(f"unknown skill {skill!r}; known skills: {', '.join(SKILLS)}")
        return {skill: 1.0}
    demand: dict[str, float] = {s: 0.0 for s in SKILLS}
    for mtype in sorted(set(modal_types)):
        for k, v in MODALITY_PRIORS.get(mtype, {}).items():
            demand[k] += v
    text = goal.lower()
    for sk, pat in _PATTERNS.items():
        demand[sk] += float(len(pat.findall(text)))
    demand["reasoning"] = max(demand["reasoning"], 0.1)
    top = max(demand.values())
    return {k: round(v / top, 6) for k, v in demand.items() if v > 0}
