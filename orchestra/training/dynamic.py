"""DAPO's dynamic sampling in TRL's GRPOTrainer: groups whose rewards all tie are dropped and resampled.

A group of decisions that all score the same has advantage 0 throughout: it moves the policy only
through the KL term and dilutes the loss's normaliser. After TRL scores a generation batch, the
groups without spread are set aside and fresh prompts from a reserve are generated and scored in
their place, up to ``rounds`` times; what is still missing is filled with set-aside groups, so the
batch keeps its size. The reserve prompt a round draws depends only on the optimizer step, the round
and the slot, so a resumed run draws what the uninterrupted one drew.

Logged beside TRL's metrics (and so to MLflow): ``dynamic/no_signal_drawn`` (share of all groups
drawn that had no spread), ``dynamic/signal_trained`` (share of the groups trained on that have
spread) and ``dynamic/groups_drawn``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from orchestra.errors import StageError

__all__ = ["dynamic_trainer", "merge_groups", "spread_groups"]

Output = dict[str, Any]


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


def _fill(
    first: Output,
    score: Callable[[list[Any]], Output],
    reserve: Sequence[Mapping[str, Any]],
    step: int,
    rounds: int,
    n: int,
    pad_id: int,
) -> tuple[Output, dict[str, float]]:
    """``first`` with its groups without spread replaced by scored reserve groups (module docstring),
    and the round's counts."""
    groups = len(first["advantages"]) // n
    kept, aside = [], []
    for g, ok in enumerate(spread_groups(first["advantages"], n)):
        (kept if ok else aside).append((first, g))
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
        "dynamic/no_signal_drawn": (drawn - len(kept)) / drawn,
        "dynamic/signal_trained": signal / groups,
        "dynamic/groups_drawn": float(drawn),
    }
    return (first if drawn == groups else merge_groups(picks, n, pad_id)), stats


def dynamic_trainer(reserve: Sequence[Mapping[str, Any]], rounds: int) -> type:
    """TRL's GRPOTrainer with dynamic sampling over ``reserve`` (dataset rows), ``rounds`` resampling
    rounds per generation batch (0: TRL's own behaviour, nothing dropped)."""
    from trl import GRPOTrainer

    class DynamicGRPOTrainer(GRPOTrainer):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            if rounds and self.accelerator.num_processes > 1:
                raise StageError("dynamic sampling (train.dagrpo.resample_rounds) runs in one process")

        def _generate_and_score_completions(self, inputs: list[Any]) -> Output:
            out = super()._generate_and_score_completions(inputs)
            if not self.model.training or not rounds:
                return out
            out, stats = _fill(
                out,
                super()._generate_and_score_completions,
                reserve,
                self.state.global_step,
                rounds,
                self.num_generations,
                int(self.processing_class.pad_token_id),
            )
            for k, v in stats.items():
                self._metrics["train"][k].append(v)
            return out

    return DynamicGRPOTrainer
