"""The ``openai`` DA-GRPO reward model: an LLM scores the rubric in one call; and the rubric params choose.

:class:`LLMRubric` sends an OpenAI-compatible endpoint (through
:class:`~orchestra.data.llm.JsonProvider`: JSON schema in the prompt and as ``response_format``,
temperature 0) the rendered state, the expert's decision for it (the reference) and the policy's
decision text, and reads back the four rubric scores. A reply that is not such an object (not JSON,
off schema, a score outside [0, 1]) scores 0 throughout with the reason in ``RubricScores.reason``;
a failed call is a StageError naming the provider, as in every stage that uses a model.
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel, ConfigDict, Field

from orchestra.agent.decision import Action, Format, ParseError, parse_decision, render_decision, resolve
from orchestra.agent.refs import ReferenceError_
from orchestra.agent.state import OrchestraState, render_state, validation_context
from orchestra.answers import answers_equal
from orchestra.config import Params
from orchestra.data.llm import JsonProvider, stage_provider
from orchestra.errors import ReplyError
from orchestra.schemas import Finish, MaestroSearch
from orchestra.training.rewards import RubricScores, resolve_answer, rubric

__all__ = ["LLMRubric", "RubricFn", "RubricReply", "credit_answer", "make_rubric"]

#: what the trainer calls per policy output: (text, state, expert decision, format[, answer=]) -> scores;
#: ``answer`` (the task's labelled answer) only where ``train.dagrpo.answer_credit`` is on
RubricFn = Callable[..., RubricScores]

_FORMATS = {
    "json": "one JSON object, as the state's rules describe",
    "lines": (
        "one line per sub-task: 'id backend tools modalities depends_on goal' (backend '-' or "
        "'backend@skill', lists joined by ',' or '-' for none, the goal to the end of the line), or a "
        "finish written '= answer'"
    ),
    "maestro": "<search> Model@@Skill: Query </search> or <answer>...</answer>",
}

_TASK = (
    "You score one decision of a multi-modal orchestrator against a reference decision an expert "
    "made in the same state. The user message is a JSON object: 'state' (the orchestrator's rendered "
    "state: the rules, the backend and tool pools, the question, the evidence so far), 'format' and "
    "'format_rules' (how the decision must be written), 'reference' (the expert's decision, in JSON "
    "or Maestro tags) and 'decision' (the text the policy wrote). Score each in [0, 1]: 'format' 1 if "
    "the decision is well-formed in its format, else 0; 'validity' 1 if it is valid in the state "
    "(known backends, skills and tools, acyclic dependencies, every #E/#M reference resolvable, a "
    "non-empty answer), else 0; 'tools' how well the sub-tasks' tools cover what the work needs, "
    "without unneeded or duplicated tools or sub-tasks; 'decision' how good the decision is next to "
    "the reference: the same sub-tasks and dependencies score 1, a sound different decomposition "
    "partial credit, independent sub-tasks chained needlessly less; a final answer 1 if it equals "
    "the reference answer (references resolved through the evidence), else 0. A decision that is "
    "not well-formed scores 0 throughout."
)
_ANSWER = (
    " The item also holds 'answer', the task's labelled answer: a final answer equal to it (references "
    "resolved) scores 1 for 'tools' and 'decision' even where the reference decision goes on."
)


class RubricReply(BaseModel):
    """The reward model's reply: the four rubric scores."""

    model_config = ConfigDict(extra="forbid")

    format: float = Field(ge=0, le=1, description="1 if the decision is well-formed, else 0")
    validity: float = Field(ge=0, le=1, description="1 if it is valid in the state, else 0")
    tools: float = Field(ge=0, le=1, description="tool reasonableness, 0-1")
    decision: float = Field(ge=0, le=1, description="decision quality next to the reference, 0-1")


class LLMRubric:
    """The rubric scored by an ``openai`` provider, one request per policy output; callable like
    :func:`~orchestra.training.rewards.rubric`. The state is rendered verbose with the JSON rules
    (``state_tokens`` its budget); the reference is the expert's decision in JSON."""

    def __init__(self, provider: JsonProvider, state_tokens: int = 3072) -> None:
        self.provider, self.state_tokens = provider, state_tokens

    def __call__(
        self,
        text: str,
        state: OrchestraState,
        expert: Action,
        fmt: Format = "lines",
        answer: str | None = None,
    ) -> RubricScores:
        messages = render_state(state, self.state_tokens, fmt="json", style="verbose")
        item = {
            "state": "\n\n".join(m["content"] for m in messages),
            "format": fmt,
            "format_rules": _FORMATS[fmt],
            "reference": render_decision(expert, "maestro" if isinstance(expert, MaestroSearch) else "json"),
            "decision": text,
            **({} if answer is None else {"answer": answer}),
        }
        try:
            r = self.provider.ask(RubricReply, _TASK + ("" if answer is None else _ANSWER), item)
        except ReplyError as e:
            return RubricScores(0.0, 0.0, 0.0, 0.0, reason=f"reward model reply rejected: {e}")
        return RubricScores(r.format, r.validity, r.tools, r.decision)


def credit_answer(score: RubricFn) -> RubricFn:
    """``score`` that, given the task's labelled ``answer``, gives a valid finish whose answer equals it
    full tools and decision credit (a correct early finish; Orchestra-o1's judge sees the answer);
    without ``answer`` it is ``score``. The reward model sees the answer too (:class:`LLMRubric`)."""

    def scored(
        text: str, state: OrchestraState, expert: Action, fmt: Format = "lines", answer: str | None = None
    ) -> RubricScores:
        seen = isinstance(score, LLMRubric) and answer is not None  # the reward model sees it too
        out = score(text, state, expert, fmt, answer=answer) if seen else score(text, state, expert, fmt)
        if answer is None or out.validity < 1:
            return out
        action = parse_decision(text, fmt=fmt)
        if isinstance(action, ParseError):
            return out
        action = resolve(action, validation_context(state))
        if not isinstance(action, Finish):
            return out
        try:
            got = resolve_answer(action.answer, state)
        except ReferenceError_:
            return out
        return RubricScores(out.format, out.validity, 1.0, 1.0) if answers_equal(got, answer) else out

    return scored


def make_rubric(params: Params) -> RubricFn:
    """The rubric ``train.dagrpo.reward_provider`` names: kind ``builtin`` is the programmatic
    :func:`~orchestra.training.rewards.rubric`, kind ``openai`` an :class:`LLMRubric` on that
    endpoint; another kind is a StageError. With ``train.dagrpo.answer_credit`` it also credits a
    correct early finish (:func:`credit_answer`)."""
    name = params.train.dagrpo.reward_provider
    what = "train.dagrpo.reward_provider"
    spec = stage_provider(params, name, what)
    score: RubricFn = (
        rubric
        if spec.kind == "builtin"
        else LLMRubric(JsonProvider(spec, name, what), params.agent.state_tokens)
    )
    return credit_answer(score) if params.train.dagrpo.answer_credit else score
