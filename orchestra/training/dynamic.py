"""DAPO's dynamic sampling in TRL's GRPOTrainer: groups whose rewards all tie are dropped and resampled.

A group of decisions that all score the same has advantage 0 throughout: it moves the policy only
through the KL term and dilutes the loss's normaliser. After TRL scores a generation batch, the
groups without spread are set aside and fresh prompts from a reserve are generated and scored in
their place, up to ``rounds`` times; what is still missing is filled with set-aside groups, so the
batch keeps its size. The reserve prompt a round draws depends only on the optimizer step, the round
and the slot, so a resumed run draws what the uninterrupted one drew.

With ``guides`` (a reference decision per prompt), a group without spread is first scored again with
the reference in place of its last sample (off-policy guidance, as LUFFY mixes expert traces into
GRPO's groups): where every sample is rejected no resampling finds a decision worth more, and the
group teaches nothing, so the state where the policy fails most is the one it never learns. The
guided group is kept when its rewards now spread and the reference scores highest; its other samples
are the ones drawn, scored again (a cached reward costs nothing). The reference is trained on as if
sampled (ratio 1 with one iteration), so its advantage weighs its likelihood.

Logged beside TRL's metrics (and so to MLflow): ``dynamic/no_signal_drawn`` (share of all groups
drawn that had no spread), ``dynamic/signal_trained`` (share of the groups trained on that have
spread), ``dynamic/guided`` (share of the groups trained on that carry the reference) and
``dynamic/groups_drawn``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from orchestra.errors import StageError

__all__ = ["dynamic_trainer", "merge_groups", "spread_groups"]

Output = dict[str, Any]
Pick = tuple[Output, int]  # a scored batch and a group index in it


def spread_groups(advantages: Any, n: int) -> list[bool]:
    """For each group of ``n`` consecutive rows: whether its rewards differ (TRL's advantages are the
    rewards less the group mean, over the group's spread: all 0 exactly when all rewards tie)."""
    per_group = advantages.detach().abs().view(-1, n).amax(dim=1)
    return [bool(v > 1e-6) for v in per_group]


def _pad(t: Any, width: int, left: bool, fill: float) -> Any:
    import torch.nn.functional as F

    gap = width - t.shape[1]
    return F.pad(t, (gap, 0) if left else (0, gap), value=fill) if gap else t


def merge_groups(picks: Sequence[tuple[Output, int]], n: int, pad_id: int) -> Output:
    """One generation batch of the groups ``picks`` names ((a scored batch, a group index in it)):
    prompt tensors left-padded, completion tensors right-padded (ids with ``pad_id``, masks and
    log-probabilities with 0), and ``num_items_in_batch`` recounted."""
    import torch

    out: Output = {}
    for key, first in picks[0][0].items():
        if key == "num_items_in_batch":
            continue
        if not isinstance(first, torch.Tensor):
            raise StageError(f"dynamic sampling cannot merge the generation batch's {key!r} ({type(first)})")
        parts = [o[key][g * n : (g + 1) * n] for o, g in picks]
        if first.dim() == 2:
            width = max(p.shape[1] for p in parts)
            fill = pad_id if key.endswith("_ids") else 0.0
            parts = [_pad(p, width, key.startswith("prompt"), fill) for p in parts]
        out[key] = torch.cat(parts)
    out["num_items_in_batch"] = out["completion_mask"].sum()
    return out


def _reserve_rows(
    reserve: Sequence[Mapping[str, Any]], step: int, round_: int, slots: int, n: int
) -> list[Any]:
    """``slots`` reserve prompts for ``round_`` at optimizer ``step``, each repeated ``n`` times."""
    base = (step * 7919 + round_ * 104729) % len(reserve)
    return [dict(reserve[(base + i) % len(reserve)]) for i in range(slots) for _ in range(n)]


def _drawn_ids(out: Output, row: int) -> list[int]:
    """The completion token ids row ``row`` of a scored batch drew (its end-of-text token included)."""
    return [int(t) for t in out["completion_ids"][row][out["completion_mask"][row].bool()]]


def _guide(
    first: Output,
    rows: Sequence[Mapping[str, Any]],
    aside: list[Pick],
    force: Callable[[list[Any], list[list[int]]], Output],
    guides: Callable[[str], list[int] | None],
    n: int,
) -> tuple[list[Pick], list[Pick]]:
    """Of ``first``'s groups ``aside`` (no spread), those with a reference, scored again in one batch
    with the reference as their last sample (module docstring): the guided groups to keep, and the
    groups still aside."""
    ref = {g: r for _, g in aside if (r := guides(str(rows[g * n]["sample_id"]))) is not None}
    todo = list(ref)
    if not todo:
        return [], aside
    ids: list[list[int]] = []
    for g in todo:
        ids += [*(_drawn_ids(first, g * n + i) for i in range(n - 1)), ref[g]]
    out = force([dict(rows[g * n + i]) for g in todo for i in range(n)], ids)
    spread = spread_groups(out["advantages"], n)
    good = {g for k, g in enumerate(todo) if spread[k] and float(out["advantages"][k * n + n - 1]) > 0}
    guided = [(out, k) for k, g in enumerate(todo) if g in good]
    return guided, [(o, g) for o, g in aside if g not in good]


def _fill(
    first: Output,
    score: Callable[[list[Any]], Output],
    reserve: Sequence[Mapping[str, Any]],
    step: int,
    rounds: int,
    n: int,
    pad_id: int,
    guided: Callable[[list[Pick]], tuple[list[Pick], list[Pick]]] | None = None,
) -> tuple[Output, dict[str, float]]:
    """``first`` with its groups without spread guided (``guided``: :func:`_guide` bound to the batch)
    or replaced by scored reserve groups (module docstring), and the round's counts."""
    groups = len(first["advantages"]) // n
    kept: list[Pick] = []
    aside: list[Pick] = []
    for g, ok in enumerate(spread_groups(first["advantages"], n)):
        (kept if ok else aside).append((first, g))
    with_ref, aside = guided(aside) if guided and aside else ([], aside)
    kept += with_ref
    drawn = groups
    for r in range(rounds):
        missing = groups - len(kept)
        if missing <= 0 or not reserve:
            break
        more = score(_reserve_rows(reserve, step, r, missing, n))
        drawn += missing
        for g, ok in enumerate(spread_groups(more["advantages"], n)):
            (kept if ok else aside).append((more, g))
    picks = (kept + aside)[:groups]
    signal = min(len(kept), groups)
    stats = {
        "dynamic/no_signal_drawn": (drawn - len(kept) + len(with_ref)) / drawn,
        "dynamic/signal_trained": signal / groups,
        "dynamic/guided": len(with_ref) / groups,
        "dynamic/groups_drawn": float(drawn),
    }
    same = drawn == groups and not with_ref
    return (first if same else merge_groups(picks, n, pad_id)), stats


def dynamic_trainer(
    reserve: Sequence[Mapping[str, Any]], rounds: int, guides: Mapping[str, str] | None = None
) -> type:
    """TRL's GRPOTrainer with dynamic sampling over ``reserve`` (dataset rows), ``rounds`` resampling
    rounds per generation batch (0: TRL's own behaviour, nothing dropped), and with ``guides`` (a
    reference decision's text per ``sample_id``) groups without spread guided first."""
    from functools import partial

    from trl import GRPOTrainer

    texts: Mapping[str, str] = guides or {}

    class DynamicGRPOTrainer(GRPOTrainer):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._forced: list[list[int]] | None = None
            self._refs: dict[str, list[int]] = {}
            if (rounds or guides) and self.accelerator.num_processes > 1:
                raise StageError("dynamic sampling (train.dagrpo.resample_rounds, guide) runs in one process")
            if guides and self.use_vllm:
                raise StageError("a guided group (train.dagrpo.guide) has no vLLM sampling log-probabilities")

        def _generate_single_turn(self, prompt_ids: Any, *args: Any, **kwargs: Any) -> Any:
            if self._forced is None:
                return super()._generate_single_turn(prompt_ids, *args, **kwargs)
            if len(self._forced) != len(prompt_ids):
                raise StageError("a forced batch needs one completion per prompt")
            return [list(c) for c in self._forced], None

        def _score_forced(self, rows: list[Any], ids: list[list[int]]) -> Output:
            self._forced = ids
            try:
                return super()._generate_and_score_completions(rows)
            finally:
                self._forced = None

        def _reference(self, sample_id: str) -> list[int] | None:
            """The reference's token ids and the end of text, tokenised once per prompt."""
            if sample_id not in self._refs and sample_id in texts:
                tok = self.processing_class
                ids = tok(texts[sample_id], add_special_tokens=False)["input_ids"]
                self._refs[sample_id] = [*ids, int(tok.eos_token_id)]
            return self._refs.get(sample_id)

        def _generate_and_score_completions(self, inputs: list[Any]) -> Output:
            out = super()._generate_and_score_completions(inputs)
            if not self.model.training or not (rounds or guides):
                return out
            n = self.num_generations
            guided = (
                partial(_guide, out, inputs, force=self._score_forced, guides=self._reference, n=n)
                if guides
                else None
            )
            out, stats = _fill(
                out,
                super()._generate_and_score_completions,
                reserve,
                self.state.global_step,
                rounds,
                n,
                int(self.processing_class.pad_token_id),
                guided,
            )
            for k, v in stats.items():
                self._metrics["train"][k].append(v)
            return out

    return DynamicGRPOTrainer
