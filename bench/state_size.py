"""Sizes of the rendered orchestrator state, verbose vs compact, for the world's seed tasks.

Usage: python bench/state_size.py [--world DIR] [--n-seeds N] [--vocab 1400] [--decision-tokens N]
                                  [--max-length 1024]

For every seed task the expert's trajectory is simulated without running tools: the fresh state,
the expert's delegate, evidence holding the program's recorded values (goals substituted as the
scheduler does), the state after it and the expert's finish. Each state is rendered verbose
(LLM policies) and compact (the trained policy), with no budget cut, and counted two ways: the
regex counter, and a byte-level BPE trained on the rendered texts of the first 80 % of the tasks
(the trained-tokenizer stand-in, ``orchestra.training.tokenizer``), measured on the other 20 %.

Prints p50 / p95 / max of state tokens (largest state per task), decision tokens (largest decision
per task) and characters, then ``RESULT compact_p95_tokens=N`` (compact state, BPE); passes when
``N + decision_tokens <= max_length`` (decision_tokens: ``agent.decision_tokens`` by default), the
largest compact state + its decision fits too, and the largest decision fits ``decision_tokens``.
Without --world a world of --n-seeds seeds (default world params otherwise) is generated in a
temporary folder.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from orchestra.agent.decision import Action, render_decision
from orchestra.agent.expert import expert_decision
from orchestra.agent.memory import Evidence, sufficiency
from orchestra.agent.refs import modal_key, substitute
from orchestra.agent.state import STYLES, OrchestraState, ToolCard, history_from_evidence, render_state
from orchestra.backends.pool import builtin_backends
from orchestra.config import AgentParams, WorldParams
from orchestra.schemas import Delegate, Task, read_tasks_json
from orchestra.text import count_tokens, format_value
from orchestra.tools.registry import default_registry
from orchestra.training.tokenizer import train_tokenizer

Counter = Callable[[str], int]


def trajectory(task: Task, base: OrchestraState, agent: AgentParams) -> list[tuple[OrchestraState, Action]]:
    """(state, expert decision) pairs of the expert's run, with recorded values as the evidence."""
    program = task.solution_program or []
    s0 = base.model_copy(update={"question": task.question, "modal_inputs": list(task.omni_modal_input)})
    d0 = expert_decision(s0, program, agent=agent)
    assert isinstance(d0, Delegate) and len(d0.subtasks) == len(program)
    values: dict[str, object] = {modal_key(i): f"#{modal_key(i)}" for i in range(len(task.omni_modal_input))}
    evidence = []
    for st, step in zip(d0.subtasks, program, strict=True):
        goal = substitute(st.goal, values)
        values[st.id] = step.value
        evidence.append(
            Evidence(
                id=st.id,
                goal=goal,
                status="ok",
                value=step.value,
                claim=f"{goal}: {format_value(step.value)}",
                backend=st.backend,
                tools=list(st.tools),
                depends_on=list(st.depends_on),
            )
        )
    s1 = s0.model_copy(
        update={
            "context": evidence,
            "history": history_from_evidence(evidence),
            "turn": 1,
            "sufficiency": sufficiency(task.question, evidence),
        }
    )
    return [(s0, d0), (s1, expert_decision(s1, program, agent=agent))]


def texts(state: OrchestraState, style: str) -> str:
    msgs = render_state(state, 10**7, style=style)  # type: ignore[arg-type]
    return "\n".join(m["content"] for m in msgs)


def pct(xs: Sequence[int], q: float) -> int:
    ys = sorted(xs)
    return ys[min(len(ys) - 1, int(round(q * (len(ys) - 1))))]


def row(label: str, states: list[int], decisions: list[int], chars: list[int], both: list[int]) -> str:
    def three(xs: Sequence[int]) -> str:
        return f"{statistics.median(xs):>6.0f} {pct(xs, 0.95):>6} {max(xs):>6}"

    return f"{label:<22} {three(states)}   {three(decisions)}   {three(chars)}   {max(both):>6}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world", type=Path, default=None)
    ap.add_argument("--n-seeds", type=int, default=300)
    ap.add_argument("--vocab", type=int, default=1400)
    ap.add_argument("--decision-tokens", type=int, default=AgentParams().decision_tokens)
    ap.add_argument("--max-length", type=int, default=1024)
    args = ap.parse_args()

    tmp = None
    world = args.world
    if world is None:
        from orchestra.world import generate_world

        tmp = tempfile.TemporaryDirectory(prefix="state-size-world-")
        world = Path(tmp.name)
        generate_world(WorldParams(n_seeds=args.n_seeds), world)
    tasks = [t for t in read_tasks_json(world / "tasks.json") if t.solution_program]
    agent = AgentParams()
    with default_registry(world) as tools:
        cards = [ToolCard.from_tool(t, agent.tool_skills.get(t.name)) for t in tools]
    base = OrchestraState(
        question="",
        backends=builtin_backends(agent).cards(),
        tools=cards,
        max_turns=8,
        threshold=agent.sufficiency_threshold,
    )
    runs = [trajectory(t, base, agent) for t in tasks]
    if tmp is not None:
        tmp.cleanup()
    cut = max(1, int(len(runs) * 0.8))
    corpus = [texts(s, style) for run in runs[:cut] for s, _ in run for style in STYLES]
    corpus += [render_decision(d) for run in runs[:cut] for _, d in run]
    bpe = train_tokenizer(corpus, args.vocab)

    def bpe_count(text: str) -> int:
        return len(bpe(text, add_special_tokens=False)["input_ids"])

    held = runs[cut:] or runs
    print(
        f"{len(tasks)} tasks; BPE (vocab {len(bpe)}) trained on {cut}, measured on {len(held)}; "
        "per task the largest state and the largest decision"
    )
    print(
        f"{'style / counter':<22} {'state p50':>6} {'p95':>6} {'max':>6}   {'dec p50':>6} {'p95':>6} "
        f"{'max':>6}   {'chars p50':>6} {'p95':>6} {'max':>6}   {'st+dec max':>6}"
    )
    result: dict[str, tuple[int, int, int]] = {}
    counters: list[tuple[str, Counter]] = [("regex", count_tokens), ("bpe", bpe_count)]
    for style in STYLES:
        for cname, count in counters:
            st, dec, ch, both = [], [], [], []
            for run in held:
                sizes = [count(texts(s, style)) for s, _ in run]
                dsizes = [count(render_decision(d)) for _, d in run]
                st.append(max(sizes))
                dec.append(max(dsizes))
                ch.append(max(len(texts(s, style)) for s, _ in run))
                both.append(max(a + b for a, b in zip(sizes, dsizes, strict=True)))
            print(row(f"{style} / {cname}", st, dec, ch, both))
            result[f"{style}/{cname}"] = (pct(st, 0.95), max(both), max(dec))
    p95, worst, longest = result["compact/bpe"]
    fits = longest <= args.decision_tokens
    passed = p95 + args.decision_tokens <= args.max_length and worst <= args.max_length and fits
    print(
        f"compact p95 state {p95} + decision budget {args.decision_tokens} = {p95 + args.decision_tokens} "
        f"<= {args.max_length}; largest compact state + its decision = {worst}; "
        f"largest decision {longest} {'<=' if fits else '>'} decision budget {args.decision_tokens}"
    )
    print(
        f"RESULT compact_p95_tokens={p95} pass={str(passed).lower()} "
        f"verbose_p95_tokens={result['verbose/bpe'][0]} compact_max_state_plus_decision={worst} "
        f"max_decision_tokens={longest} tasks={len(held)}"
    )
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
