"""The ``openai`` providers of data synthesis: one validated JSON object per call; extractor, rewriter.

:class:`JsonProvider` asks an OpenAI-compatible endpoint for one JSON object of a pydantic model:
a system prompt that states the task and the model's JSON schema, the item as a JSON user message,
``response_format`` = that schema (strict), temperature 0, one request at a time. The reply's content
(a ```json fence is stripped) must parse as JSON and validate against the model; otherwise it raises
:class:`~orchestra.errors.ReplyError` saying what was wrong and quoting the reply's start, and the
stage sets that one item aside with the reason. A call that fails (transport, timeout, an HTTP
error status after the client's retries, a body that is not a completion) is a StageError naming
the provider: the stage stops rather than going on without its model.

The openai extractor (:func:`state_facts`) is sent each seed's media (the kinds its provider takes,
as content parts after the JSON item) and states one atomic fact per program step and the other
facts the media show (``orchestra.data.anchors`` still has the tools recover every one). The openai rewriter
(:func:`rephrase_candidates`) rephrases the question the builtin grammar drafted for each
candidate; the program, the answer and the media stay the grammar's, so the candidate stays
replayable and grounded. It is sent the draft, the strategy and the level, never the answer.
(Its own candidates are ``orchestra.data.candidates``': :func:`check_written` checks their questions.)
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from orchestra.agent.refs import modal_key
from orchestra.config import Params, ProviderSpec
from orchestra.errors import ReplyError, StageError
from orchestra.lm.chat import LMError
from orchestra.lm.clients import openai_client
from orchestra.schemas import RewriteCandidate, SolutionStep, Task, brief

__all__ = [
    "ExtractorReply",
    "JsonProvider",
    "MediaFact",
    "Rephrase",
    "Statements",
    "check_rephrase",
    "check_written",
    "parse_reply",
    "program_steps",
    "rephrase_candidates",
    "stage_provider",
    "state_facts",
]

M = TypeVar("M", bound=BaseModel)

#: completion cap of a JSON reply when the provider sets no max_new_tokens
JSON_TOKENS = 1024
#: how much of a rejected reply its reason quotes
QUOTE_CHARS = 120
#: the longest rephrased question the rewriter may return
MAX_QUESTION_CHARS = 600

_FENCE = re.compile(r"\A\s*```(?:json|JSON)?[ \t]*\n(.*?)\n?[ \t]*```\s*\Z", re.DOTALL)


def stage_provider(params: Params, key: str, what: str) -> ProviderSpec:
    """The provider ``what`` (e.g. ``anchors.provider``) names; a kind the stage has no model for
    (only ``builtin`` and ``openai`` are built) is a StageError naming it."""
    spec = params.providers[key]
    if spec.kind not in ("builtin", "openai"):
        raise StageError(
            f"{what} {key!r} is a {spec.kind!r} provider; this stage runs kind 'builtin' or 'openai' only"
        )
    return spec


class JsonProvider:
    """An ``openai`` provider asked for JSON replies; ``name`` is its key in params' providers."""

    def __init__(self, spec: ProviderSpec, name: str, what: str) -> None:
        if spec.kind != "openai":
            raise StageError(f"{what} {name!r} is a {spec.kind!r} provider, not an 'openai' one")
        client = openai_client(spec, JSON_TOKENS, temperature=0.0)
        self.spec, self.client, self.name = spec, client, name
        self.label = f"{what} {name!r} ({client.base_url})"

    def ask(
        self, model: type[M], task: str, item: Mapping[str, Any], parts: Sequence[Mapping[str, Any]] = ()
    ) -> M:
        """One request: ``task`` and ``model``'s schema as the system prompt, ``item`` as JSON, followed
        by ``parts`` (media content parts, :mod:`orchestra.lm.media`) when there are any."""
        schema = model.model_json_schema()
        system = (
            f"{task}\n\nReply with exactly one JSON object and nothing else. It must match this JSON "
            f"schema:\n{json.dumps(schema, sort_keys=True)}"
        )
        text = json.dumps(item, sort_keys=True, ensure_ascii=False, default=str)
        user: Any = [{"type": "text", "text": text}, *map(dict, parts)] if parts else text
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        fmt = {
            "type": "json_schema",
            "json_schema": {"name": model.__name__, "schema": schema, "strict": True},
        }
        try:
            res = self.client.chat(messages, response_format=fmt)
        except LMError as e:
            raise StageError(f"{self.label} failed: {e}") from e
        return parse_reply(res.content, model)


def parse_reply(text: str, model: type[M]) -> M:
    """``text`` (optionally in a ```json fence) as a ``model``; a ReplyError quoting its start if not."""
    fenced = _FENCE.match(text)
    body = fenced.group(1) if fenced else text
    quoted = repr(text[:QUOTE_CHARS]) + ("..." if len(text) > QUOTE_CHARS else "")
    try:
        data = json.loads(body)
    except json.JSONDecodeError as e:
        raise ReplyError(f"the reply is not JSON ({e.msg} at char {e.pos}): {quoted}") from e
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise ReplyError(
            f"the reply does not match the {model.__name__} schema ({brief(e, 3)}): {quoted}"
        ) from e


def program_steps(steps: Sequence[SolutionStep]) -> list[dict[str, Any]]:
    """A solution program as sent to a model: each step's out, op, arguments and recorded value."""
    return [
        {
            "out": s.out,
            "op": s.op,
            "arguments": s.model_dump(mode="json", exclude={"out", "op", "value"}),
            "value": s.value,
        }
        for s in steps
    ]


# -- the openai extractor ----------------------------------------------------------------------------


class StatedFact(BaseModel):
    """One fact of the extractor's reply."""

    model_config = ConfigDict(extra="forbid")

    step: str = Field(description="the program step it states, by its out (e.g. 'v1')")
    statement: str = Field(description="one atomic, checkable sentence stating that step's recorded value")


class MediaFact(BaseModel):
    """Something else a modal input shows, stated by the extractor and checked by a perception sub-task."""

    model_config = ConfigDict(extra="forbid")

    goal: str = Field(description="a sub-task goal that reads it off one modal input, naming it as #M<n>")
    value: str | int | float = Field(description="what that sub-task returns: a number as a number")
    statement: str = Field(description="one atomic, checkable sentence stating it")


class ExtractorReply(BaseModel):
    """The openai extractor's reply: one fact per program step, and what else the media show."""

    model_config = ConfigDict(extra="forbid")

    facts: list[StatedFact]
    media_facts: list[MediaFact]


_EXTRACT = (
    "You extract the atomic facts a question's answer rests on. The user message is a JSON object: a "
    "question, its answer, its modal inputs (ref #M<n>, id, type) and its solution program, each step with "
    "its out (a variable name), op, arguments and the value it recorded; the media you can see follow it. "
    "Write exactly one fact per step: one atomic, checkable sentence that states the step's recorded value "
    "and where it comes from (which modal input, which wiki page and field, or which calculation). Then, "
    "under media_facts, state other facts the modal inputs show that a question could be built on (a "
    "count, a number or a name read off one input), each with the sub-task goal that reads it and the "
    "value it returns; each is kept only when that sub-task, run again by the tools, returns the value. "
    "Write the goal in this grammar where it fits (#M<n> names the input):\n"
)


def extractor_prompt() -> str:
    """The extractor's task with the builtin goal grammar (what the perception experts execute)."""
    from orchestra.backends.goals import goal_phrases

    skills = {"ocr", "counting", "chart", "audio_signal", "speech", "video_temporal"}
    lines = [f"- {p}" for k, ps in goal_phrases().items() if k in skills for p in ps]
    return _EXTRACT + "\n".join(lines)


class Statements:
    """What the openai extractor stated: per seed, its statements by step and its facts about the media,
    or why its reply was set aside."""

    def __init__(self, by: str) -> None:
        self.by = by
        self.facts: dict[str, dict[str, str]] = {}
        self.media: dict[str, list[MediaFact]] = {}
        self.rejected: dict[str, str] = {}


def _statements(reply: ExtractorReply, outs: list[str]) -> dict[str, str]:
    got: dict[str, str] = {}
    for f in reply.facts:
        if f.step not in outs:
            raise ReplyError(f"a fact names step {f.step!r}, which is not a step of the program {outs}")
        if f.step in got:
            raise ReplyError(f"two facts name step {f.step}")
        if not f.statement.strip():
            raise ReplyError(f"the fact for step {f.step} is empty")
        got[f.step] = f.statement.strip()
    missing = [o for o in outs if o not in got]
    if missing:
        raise ReplyError(f"no fact for step {', '.join(missing)}")
    return got


def state_facts(
    tasks: list[Task], provider: JsonProvider, max_facts: int, media_root: Path | None = None
) -> Statements:
    """The openai extractor's statements for every seed with a program of at most ``max_facts`` steps
    (``orchestra.data.anchors`` sets the others aside anyway), asked in task order, one at a time, each
    sent the seed's media the provider takes (``inputs``; under ``media_root``)."""
    from orchestra.lm.media import content_parts
    from orchestra.tools.media import MediaError

    out = Statements(provider.name)
    prompt = extractor_prompt()
    for task in tasks:
        program = task.solution_program or []
        if not program or len(program) > max_facts:
            continue
        keyed = [(modal_key(i), m) for i, m in enumerate(task.omni_modal_input)]
        item = {
            "question": task.question,
            "answer": task.answer,
            "modal_inputs": [{"ref": f"#{k}", "id": m.id, "type": m.type} for k, m in keyed],
            "steps": program_steps(program),
        }
        try:
            parts = content_parts(keyed, media_root, provider.spec, provider.client)
            reply = provider.ask(ExtractorReply, prompt, item, parts)
            out.facts[str(task.id)] = _statements(reply, [s.out for s in program])
            out.media[str(task.id)] = list(reply.media_facts)
        except ReplyError as e:
            out.rejected[str(task.id)] = f"extractor reply rejected: {e}"
        except MediaError as e:
            out.rejected[str(task.id)] = f"extractor media unreadable: {e}"
    return out


# -- the openai rewriter -----------------------------------------------------------------------------


class Rephrase(BaseModel):
    """The rewriter's reply."""

    model_config = ConfigDict(extra="forbid")

    question: str = Field(description="the question, rephrased")


_REPHRASE = (
    "You rephrase questions of a multi-modal question-answering benchmark. The user message is a JSON "
    "object: a draft question, the rewriting strategy it was built with and its difficulty level. Write "
    "the same question in new words: ask for exactly the same thing, over the same attached media and "
    "the same wiki facts, with every filter and every operation kept. Keep every number and every quoted "
    "name exactly as written. Do not answer it, do not add facts or hints, and keep it under "
    f"{MAX_QUESTION_CHARS} characters."
)
_QUOTED = re.compile(r"\"([^\"\n]+)\"|“([^”\n]+)”|‘([^’\n]+)’|(?<!\w)'([^'\n]+)'(?!\w)")
_NUMBER = re.compile(r"(?<![\d.])\d+(?:\.\d+)?(?![\d])")


def check_written(question: str, answer: str, *, draft: str = "", what: str = "question") -> str:
    """A question a model wrote, stripped: non-empty, at most :data:`MAX_QUESTION_CHARS`, and not
    writing a name ``answer`` (unless the ``draft`` it rephrases writes it); else a ReplyError."""
    q = question.strip()
    if not q:
        raise ReplyError(f"the {what} is empty")
    if len(q) > MAX_QUESTION_CHARS:
        raise ReplyError(f"the {what} has {len(q)} characters > {MAX_QUESTION_CHARS}")
    a = answer.strip().casefold()
    if a and not _NUMBER.fullmatch(a) and a in q.casefold() and a not in draft.casefold():
        raise ReplyError(f"the {what} writes the answer")
    return q


def check_rephrase(draft: str, question: str, answer: str) -> str:
    """``question`` stripped, when it may replace ``draft``: :func:`check_written`'s rules, not the
    draft, and every quoted span and number of the draft kept verbatim; else a ReplyError."""
    q = check_written(question, answer, draft=draft, what="rephrased question")
    if " ".join(q.split()) == " ".join(draft.split()):
        raise ReplyError("the rephrased question is the draft unchanged")
    spans = [next(g for g in m.groups() if g is not None) for m in _QUOTED.finditer(draft)]
    lost = [s for s in spans if s not in q]
    if lost:
        raise ReplyError(f"the rephrased question drops the quoted {lost[0]!r}: {q[:QUOTE_CHARS]!r}")
    have = set(_NUMBER.findall(q))
    gone = [n for n in _NUMBER.findall(draft) if n not in have]
    if gone:
        raise ReplyError(f"the rephrased question drops the number {gone[0]}: {q[:QUOTE_CHARS]!r}")
    return q


def rephrase_candidates(
    candidates: Sequence[RewriteCandidate], provider: JsonProvider
) -> tuple[list[RewriteCandidate], list[dict[str, str]]]:
    """(the candidates whose rephrasing passed :func:`check_rephrase`, with the new question and
    template ``openai:<builtin template>``; ``{candidate_id, seed_id, reason}`` for the others),
    one request per candidate in their order."""
    kept: list[RewriteCandidate] = []
    rejected: list[dict[str, str]] = []
    for c in candidates:
        item = {"question": c.task.question, "strategy": c.strategy, "level": c.level}
        try:
            reply = provider.ask(Rephrase, _REPHRASE, item)
            question = check_rephrase(c.task.question, reply.question, c.task.answer)
        except ReplyError as e:
            reason = f"rewriter reply rejected: {e}"
            rejected.append({"candidate_id": c.candidate_id, "seed_id": c.seed_id, "reason": reason})
            continue
        task = c.task.model_copy(update={"question": question})
        kept.append(c.model_copy(update={"task": task, "template": f"openai:{c.template}"}))
    return kept, rejected
