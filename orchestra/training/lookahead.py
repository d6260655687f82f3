"""The lookahead value: what a decision is worth, found by running it.

The decision runs on the real runtime from the state it was written in (:func:`run_task` with
``start``), and the task is finished after it by a finisher (the expert, or a policy); the value is
the outcome less what reaching it cost::

    value = right - TURN_COST * turns - CALL_COST * sub-task calls

where ``turns`` and ``calls`` count the decision's own turn and everything after it. A decision that
does not parse or that the runtime rejects loses its turn (the finisher then decides in the same
state), so it is worth one turn less than the finisher's own decision there.

The reward (:func:`lookahead_reward`) keeps the value where the run ends right and pays the floor
(:data:`~orchestra.training.rewards.REJECTED`) for the rest: text the runtime rejects (run, it is
worth as much as a partial plan, but in evaluation the policy, not the expert, writes the next
decision) and a lost task however cheaply it was lost (priced by its turns, a wrong finish cost 0.05
against the rejected text's floor, and RL learnt to finish with whatever text it had:
``=redo ?1 video_expert``).

The reward probe (``bench/reward_probe.py``) labels sampled decisions this way (finished by the
expert and by the start policy); ``train.dagrpo.reward: lookahead`` trains on the expert-finished
value (cf. SWEET-RL and GiGPO: a step reward grounded in the episode's outcome).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from orchestra.agent.decision import Format
from orchestra.agent.policies import OraclePolicy, Policy, PolicyReply, ScriptedPolicy
from orchestra.agent.runtime import Environment
from orchestra.agent.state import OrchestraState
from orchestra.answers import answers_equal
from orchestra.config import AgentParams
from orchestra.schemas import Task, Trajectory
from orchestra.training.rewards import REJECTED, runtime_action

__all__ = ["CALL_COST", "TURN_COST", "Outcome", "ScriptThen", "finish_after", "lookahead_reward"]

TURN_COST, CALL_COST = 0.05, 0.01


@dataclass(frozen=True)
class Outcome:
    """How a run ended from a decision on: the right answer or not, the turns and sub-task calls."""

    right: bool
    turns: int
    calls: int

    @property
    def value(self) -> float:
        return float(self.right) - TURN_COST * self.turns - CALL_COST * self.calls

    @classmethod
    def of(cls, trajectory: Trajectory, task: Task, after: int = 0) -> Outcome:
        """The outcome of ``trajectory``'s steps from index ``after`` on."""
        steps = trajectory.steps[after:]
        right = trajectory.answer is not None and answers_equal(str(trajectory.answer), task.answer)
        return cls(right, len(steps), sum(len(s.results) for s in steps))


class ScriptThen(Policy):
    """A policy that writes ``script`` (raw texts in ``fmt``, parsed as a policy's output is) and then
    is ``then``; it renders every state as ``then`` does, so ``then`` sees its own view."""

    def __init__(self, script: Sequence[str], fmt: Format, then: Policy) -> None:
        self.scripted, self.then, self.left = ScriptedPolicy(list(script), fmt=fmt), then, len(script)
        self.name, self.fmt, self.style, self.blocking = then.name, then.fmt, then.style, then.blocking
        self.context_tokens = then.context_tokens

    def render(self, state: OrchestraState, agent: AgentParams) -> list[dict[str, str]]:
        return self.then.render(state, agent)

    def decide(self, state: OrchestraState) -> Any:
        return self.respond(state, []).action

    def respond(self, state: OrchestraState, messages: list[dict[str, str]]) -> PolicyReply:
        if self.left:
            self.left -= 1
            return self.scripted.respond(state, messages)
        return self.then.respond(state, messages)


def finish_after(
    text: str, state: OrchestraState, task: Task, fmt: Format, finisher: Policy, env: Environment
) -> Outcome:
    """Run ``text`` (a decision in ``fmt``) in ``state`` of ``task`` and let ``finisher`` finish the
    task within the environment's turn budget."""
    from orchestra.agent.systems import run_task_sync

    system = "maestro" if fmt == "maestro" else "orchestra"
    return Outcome.of(run_task_sync(task, system, ScriptThen([text], fmt, finisher), env, start=state), task)


def lookahead_reward(
    text: str, state: OrchestraState, task: Task, fmt: Format, env: Environment, agent: AgentParams
) -> float:
    """The lookahead value of ``text`` in ``state``, the expert finishing (the reward
    ``train.dagrpo.reward: lookahead`` trains on); the floor where the runtime rejects ``text`` or
    the task ends without the right answer (module docstring)."""
    if runtime_action(text, state, fmt) is None:
        return REJECTED
    out = finish_after(text, state, task, fmt, OraclePolicy(task, agent), env)
    return out.value if out.right else REJECTED
