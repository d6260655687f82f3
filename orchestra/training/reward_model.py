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

__all__ = ["LLMRubric", "RubricFn", "RubricReply", "credit_answer", "make_rubric", "sees_answer"]

#: what the trainer calls per policy output: (text, state, expert decision, format[, answer=]) -> scores;
#: ``answer`` (the task's labelled answer) only where :func:`sees_answer` says so
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
    "You judge one decision of a multi-modal orchestrator: the main agent that splits a question into "
    "sub-tasks for expert agents and tools, or answers it. The user message is a JSON object: "
    "'question', 'state' (the orchestrator's rendered state: the rules, the backend and tool pools, "
    "the question, the evidence so far), 'format' and 'format_rules' (how the decision must be "
    "written), 'reference' (the decision an expert made in this state: one good way, not the only "
    "one), 'decision' (the text the policy wrote) and, where known, 'answer' (the task's gold answer). "
    "Score in whole levels. 'format': 1 if the decision is well-formed in its format, else 0. "
    "'validity': 1 if the runtime can run it (known backends, skills and tools, acyclic dependencies, "
    "every #E/#M reference resolvable, a non-empty answer), else 0. 'tools', 0 to 3: 3 the tools and "
    "experts each sub-task needs, well scoped; 2 usable but with a missing or needless tool or a vague "
    "sub-task; 1 mostly unsuitable; 0 none where tools are needed, or irrelevant. 'decision', 0 to 3, "
    "the most important: does it move the task toward the gold answer? 3 it does the work the state "
    "still needs, as the reference does or by another sound route, or it answers correctly; 2 sound "
    "but with notable waste (needless, duplicated or needlessly chained sub-tasks) or a detour; 1 "
    "partly relevant but unlikely to lead to the correct answer (a wrong reading, a wrong operation, "
    "work that has been done); 0 a final answer that is wrong, or a decision irrelevant to the task. "
    "A final answer is judged by its value with references resolved through the evidence. A "
    "decision that is not well-formed scores 0 throughout."
)


class RubricReply(BaseModel):
    """The reward model's reply: the four rubric scores in whole levels."""

    model_config = ConfigDict(extra="forbid")

    format: int = Field(ge=0, le=1, description="1 if the decision is well-formed, else 0")
    validity: int = Field(ge=0, le=1, description="1 if the runtime can run it, else 0")
    tools: int = Field(ge=0, le=3, description="tool and expert choice, 0-3")
    decision: int = Field(ge=0, le=3, description="progress toward the gold answer, 0-3")


class LLMRubric:
    """The rubric scored by an ``openai`` provider, one request per policy output; callable like
    :func:`~orchestra.training.rewards.rubric`. The state is rendered verbose with the JSON rules
    (``state_tokens`` its budget); the reference is the expert's decision in JSON; the gold answer
    goes with it where given. The judge scores in whole levels (format and validity 0/1, tools and
    decision 0-3, as Orchestra-o1's judge does), so equal decisions tie; 0-3 reads as 0, 1/3, 2/3, 1."""

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
            "question": state.question,
            "state": "\n\n".join(m["content"] for m in messages),
            "format": fmt,
            "format_rules": _FORMATS[fmt],
            "reference": render_decision(expert, "maestro" if isinstance(expert, MaestroSearch) else "json"),
            "decision": text,
            **({} if answer is None else {"answer": answer}),
        }
        try:
            r = self.provider.ask(RubricReply, _TASK, item)
        except ReplyError as e:
            return RubricScores(0.0, 0.0, 0.0, 0.0, reason=f"reward model reply rejected: {e}")
        return RubricScores(float(r.format), float(r.validity), r.tools / 3, r.decision / 3)


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


def sees_answer(params: Params) -> bool:
    """Whether the rubric :func:`make_rubric` builds is given each task's labelled answer: with
    ``train.dagrpo.answer_credit``, and always by a reward model (the judge sees the gold answer)."""
    dg = params.train.dagrpo
    return (
        dg.answer_credit
        or stage_provider(params, dg.reward_provider, "train.dagrpo.reward_provider").kind != "builtin"
    )
