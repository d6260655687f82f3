"""The builtin goal grammar: one table from world perception names to goal, tool, args and value reader.

Sub-task goals the builtin experts execute (``#M<n>`` names a modal input; ``#E<n>`` values are
substituted before the expert sees the goal):

- perception: ``<phrase> in #M<n>``, the phrases of :data:`PERCEPTIONS`, e.g.
  ``count the shapes of colour red and type any in #M1``, ``decode the morse text in #M2``
- search: ``search the wiki for the page titled "<title>"`` -> the URL of the result whose title
  equals ``<title>`` (case-insensitive; near-namesakes are rejected)
- browse: ``browse <url> and read the field <key>`` -> the value of the page's ``Label: value``
  fact whose label matches ``<key>`` (``prep_minutes`` ~ ``Preparation time (min)``)
- compute: ``compute <python expression>`` -> the value of the expression, run in the code sandbox

:func:`goal_phrases` lists every phrase by skill (the verbose prompt shows it); a goal outside the
grammar fails with the nearest accepted phrase named.

:func:`parse_goal` turns a goal into a :class:`Goal` (which skill, which tool, which arguments, how
to read the value from the tool's structured ``data``); :func:`perception_goal` and friends render
goals, so the oracle policy and the experts share one grammar.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rapidfuzz import fuzz, process

from orchestra.backends.perceptions import PERCEPTIONS, GoalError, PerceptionSpec
from orchestra.tools.webpage import text_facts

__all__ = [
    "ACTIONS",
    "PERCEPTIONS",
    "Goal",
    "GoalError",
    "PerceptionSpec",
    "browse_goal",
    "compute_goal",
    "goal_by_routine",
    "goal_phrases",
    "nearest_phrase",
    "match_field",
    "parse_goal",
    "perception_goal",
    "perception_tools",
    "search_goal",
    "skill_registry",
    "skill_tools",
    "tool_skill_profiles",
]


#: the non-perception sub-routines: kind -> (skill, tool)
ACTIONS: dict[str, tuple[str, str]] = {
    "search": ("search", "web_search"),
    "browse": ("browse", "page_browser"),
    "compute": ("code", "code_executor"),
}


def skill_registry() -> dict[str, list[str]]:
    """Maestro's two levels: Level-1 skill -> its Level-2 sub-routines (perception names or actions)."""
    out: dict[str, list[str]] = {}
    for spec in PERCEPTIONS.values():
        out.setdefault(spec.skill, []).append(spec.name)
    for kind, (skill, _) in ACTIONS.items():
        out.setdefault(skill, []).append(kind)
    return {k: sorted(v) for k, v in sorted(out.items())}


def skill_tools() -> dict[str, list[str]]:
    """Skill -> the tools its sub-routines call (what a sub-agent gets when only a skill is named)."""
    out: dict[str, set[str]] = {}
    for spec in PERCEPTIONS.values():
        out.setdefault(spec.skill, set()).add(spec.tool)
    for skill, tool in ACTIONS.values():
        out.setdefault(skill, set()).add(tool)
    return {k: sorted(v) for k, v in sorted(out.items())}


def tool_skill_profiles() -> dict[str, dict[str, float]]:
    """Tool -> {skill: 1.0} for every skill one of its sub-routines serves (default tool profiles)."""
    out: dict[str, dict[str, float]] = {}
    for skill, tools in skill_tools().items():
        for t in tools:
            out.setdefault(t, {})[skill] = 1.0
    return out


#: the tool that writes a video's sound track as a WAV the audio tools read (a muxed "video w/ audio")
EXTRACT_TOOL = "video_extract_audio"
#: the tools of the perceptions that read audio
AUDIO_TOOLS: frozenset[str] = frozenset(s.tool for s in PERCEPTIONS.values() if s.modality == "audio")


def perception_tools(spec: PerceptionSpec, modal_type: str | None) -> tuple[str, ...]:
    """The tools ``spec`` needs on a modal input of ``modal_type``: its own tool, after
    :data:`EXTRACT_TOOL` when it reads audio from a video (the video's sound track)."""
    if spec.modality == "audio" and modal_type == "video":
        return (EXTRACT_TOOL, spec.tool)
    return (spec.tool,)


_ACTION_PHRASES: dict[str, str] = {
    "search": 'search the wiki for the page titled "<title>"',
    "browse": "browse <url> and read the field <field>",
    "compute": "compute <python expression>",
}


def goal_phrases() -> dict[str, list[str]]:
    """Skill -> the goal phrases a builtin expert with that skill executes, generated from the
    grammar table (``<arg>`` marks a value to fill in, ``#M<n>`` a modal input): what the verbose
    prompt shows an LLM orchestrator."""
    out: dict[str, list[str]] = {}
    for spec in PERCEPTIONS.values():
        phrase = re.sub(r"\{(\w+)\}", r"<\1>", spec.phrase)
        out.setdefault(spec.skill, []).append(f"{phrase} in #M<n>")
    for kind, (skill, _) in ACTIONS.items():
        out.setdefault(skill, []).append(_ACTION_PHRASES[kind])
    return {k: sorted(v) for k, v in sorted(out.items())}


def nearest_phrase(goal: str) -> str:
    """The accepted goal phrase closest to ``goal`` (token-set similarity over every phrase)."""
    phrases = [p for ps in goal_phrases().values() for p in ps]
    match = process.extractOne(" ".join(goal.split()).lower(), phrases, scorer=fuzz.token_set_ratio)
    assert match is not None  # the table is never empty
    return str(match[0])


_SEARCH = re.compile(r'search the wiki for the page titled\s+"(?P<query>.*)"\s*', re.IGNORECASE | re.DOTALL)
_BROWSE = re.compile(r"browse\s+(?P<url>\S+)\s+and read the field\s+(?P<field>\S.*?)\s*", re.IGNORECASE)
_COMPUTE = re.compile(r"compute\s+(?P<expr>.+?)\s*", re.IGNORECASE | re.DOTALL)
_REF = re.compile(r"#?(M[1-9][0-9]*)")


def perception_goal(perception: str, args: Mapping[str, Any], ref: str) -> str:
    """The goal text of a world perception on modal input ``ref`` ('#M1')."""
    if perception not in PERCEPTIONS:
        raise GoalError(f"no builtin expert performs {perception!r}; known: {', '.join(sorted(PERCEPTIONS))}")
    return f"{PERCEPTIONS[perception].render(args)} in {ref}"


def search_goal(query: str) -> str:
    return f'search the wiki for the page titled "{query}"'


def browse_goal(url: str, field_key: str) -> str:
    return f"browse {url} and read the field {field_key}"


def compute_goal(expression: str) -> str:
    return f"compute {expression}"


@dataclass(frozen=True)
class Goal:
    """A parsed goal: its kind, the skill it needs, the tool, the tool arguments, and the modal key."""

    kind: str  # perceive | search | browse | compute
    skill: str
    tool: str
    args: dict[str, Any]
    modal: str | None = None  # 'M1' for perception goals
    perception: PerceptionSpec | None = None
    meta: dict[str, Any] = field(default_factory=dict)


def parse_goal(goal: str) -> Goal:
    """A goal in the builtin grammar (module docstring) as a :class:`Goal`; GoalError otherwise."""
    text = " ".join(goal.split()) if not goal.lstrip().lower().startswith("compute") else goal.strip()
    m = _SEARCH.fullmatch(text)
    if m:
        query = m.group("query").strip()
        if not query:
            raise GoalError("search goal has an empty title")
        return Goal("search", "search", "web_search", {"query": query}, meta={"title": query})
    m = _BROWSE.fullmatch(text)
    if m:
        return Goal(
            "browse", "browse", "page_browser", {"url": m.group("url")}, meta={"field": m.group("field")}
        )
    m = _COMPUTE.fullmatch(text)
    if m:
        expr = m.group("expr")
        try:
            ast.parse(expr, mode="eval")
        except SyntaxError as e:
            raise GoalError(f"compute goal is not a Python expression: {expr!r} ({e.msg})") from e
        return Goal("compute", "code", "code_executor", {"code": expr}, meta={"expression": expr})
    for spec in PERCEPTIONS.values():
        m = spec.pattern().fullmatch(text)
        if m:
            args = spec.args_from(m.groupdict())
            ref = _REF.fullmatch(m.group("ref"))
            assert ref is not None
            tool_args = {k: args[k] for k in spec.tool_args if k in args}
            return Goal(
                "perceive",
                spec.skill,
                spec.tool,
                tool_args,
                modal=ref.group(1),
                perception=spec,
                meta={"args": args},
            )
    raise GoalError(
        f"goal {goal[:120]!r} is not in the builtin grammar; nearest accepted phrase: "
        f"{nearest_phrase(goal)!r} (every phrase: orchestra.backends.goals.goal_phrases)"
    )


_QUOTED = re.compile(r"[\"'“‘]([^\"'”’]+)[\"'”’]")


def _routine_args(spec: PerceptionSpec, query: str) -> dict[str, Any]:
    """Arguments of a parametrised routine read off a free-form query: a colour and a shape word
    (counting), a quoted label (chart), a shape word as the object (colour change)."""
    from orchestra.tools.shapes import COLOURS, SHAPES

    words = _tokens(query)
    args: dict[str, Any] = {}
    if "color" in spec.phrase:
        colours = [w for w in words if w in COLOURS]
        shapes = [w.rstrip("s") for w in words if w.rstrip("s") in SHAPES]
        if colours:
            args["color"] = colours[0]
        if shapes:
            args["shape"] = shapes[0]
    if "{label}" in spec.phrase:
        quoted = _QUOTED.search(query)
        if not quoted:
            raise GoalError(f"{spec.name}: put the chart label in quotes, e.g. 'the value for \"Fiba\"'")
        args["label"] = quoted.group(1).strip()
    if "{object}" in spec.phrase:
        shapes = [w.rstrip("s") for w in words if w.rstrip("s") in SHAPES]
        if not shapes:
            raise GoalError(f"{spec.name}: name the object's shape (e.g. 'the circle')")
        args["object"] = shapes[0]
    return args


def goal_by_routine(query: str, skill: str, routines: Mapping[str, Sequence[str]]) -> Goal:
    """Maestro's Level-2 choice for a free-form query routed to ``skill``: the perception routine of
    the skill whose keywords the query hits most (ties: the first listed), on the ``#M<n>`` the query
    names; GoalError when no routine's keyword occurs or the query names no modal input."""
    text = " ".join(query.lower().split())
    hits = {
        name: sum(1 for k in kws if re.search(rf"\b{re.escape(k.lower())}\b", text))
        for name, kws in routines.items()
        if name in PERCEPTIONS and PERCEPTIONS[name].skill == skill
    }
    best = max(hits.values(), default=0)
    if best == 0:
        raise GoalError(
            f"no {skill!r} routine matches the query {query[:80]!r} (routines: {', '.join(routines)})"
        )
    spec = PERCEPTIONS[next(n for n, h in hits.items() if h == best)]
    ref = re.search(r"#(M[1-9][0-9]*)\b", query)
    if ref is None:
        raise GoalError(f"the query names no modal input (#M1, #M2, ...): {query[:80]!r}")
    args = _routine_args(spec, query)
    return Goal(
        "perceive",
        spec.skill,
        spec.tool,
        {k: args[k] for k in spec.tool_args if k in args},
        modal=ref.group(1),
        perception=spec,
        meta={"args": args, "routine": spec.name},
    )


_WORD = re.compile(r"[a-z0-9]+")


def _tokens(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def _field_score(key: str, label: str) -> float:
    if re.sub(r"[^a-z0-9]", "", key.lower()) == re.sub(r"[^a-z0-9]", "", label.lower()):
        return 100.0
    kt, lt = _tokens(key), _tokens(label)
    hits = 0.0
    for k in kt:
        for w in lt:
            if k == w or (min(len(k), len(w)) >= 3 and (w.startswith(k) or k.startswith(w))):
                hits += 1.0
                break
    return hits / max(len(kt), 1) + 0.01 * hits / max(len(lt), 1)


def match_field(page_facts: Sequence[Mapping[str, Any]] | str, key: str) -> tuple[str, str]:
    """The ``(label, value)`` of the page fact best matching field ``key``; GoalError if none does.

    ``page_facts`` is what page_browser puts in ``data["facts"]`` (``[{"label", "value"}]``); a
    ``str`` is a page's text, read with the browser's own text fallback
    (:func:`orchestra.tools.webpage.text_facts`) for a caller that holds only text.
    """
    rows = text_facts(page_facts) if isinstance(page_facts, str) else page_facts
    facts = [(str(f["label"]), str(f["value"])) for f in rows]
    if not facts:
        raise GoalError("the page has no 'Label: value' facts")
    scored = sorted(((_field_score(key, lab), i) for i, (lab, _) in enumerate(facts)), reverse=True)
    best, i = scored[0]
    if best < 0.5 or (len(scored) > 1 and scored[1][0] == best):
        labels = ", ".join(lab for lab, _ in facts)
        raise GoalError(f"no fact on the page clearly matches field {key!r}; labels: {labels}")
    return facts[i]


def literal(value: Any) -> Any:
    """A fact or sandbox value as a Python value: integers and floats parsed, anything else kept as text."""
    if not isinstance(value, str):
        return value
    s = value.strip()
    if re.fullmatch(r"-?\d+", s):
        return int(s)
    try:
        parsed = ast.literal_eval(s)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return s
    return parsed if isinstance(parsed, int | float | str | list | tuple | bool) else s
