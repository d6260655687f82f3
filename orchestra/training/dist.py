"""Several training processes (``torchrun`` or ``accelerate launch``: gloo on CPU, NCCL on GPUs): the main
process alone does what must happen once (checkpoint folders, MLflow, collecting states, validation,
publishing); the others wait for it. TRL's data loader gives each process its own share of the prompts.

One process (no launcher) is the same code with every check true and every wait a no-op.
"""

from __future__ import annotations

from typing import Any

__all__ = ["agree", "barrier", "is_main", "world_size"]


def _state() -> Any:
    """Accelerate's process state, as the trainers will make it (CPU unless an accelerator is present)."""
    import torch
    from accelerate import PartialState

    return PartialState(cpu=not torch.cuda.is_available())


def is_main() -> bool:
    return bool(_state().is_main_process)


def world_size() -> int:
    return int(_state().num_processes)


def barrier() -> None:
    """Wait until every process gets here."""
    _state().wait_for_everyone()


def agree(flag: bool) -> bool:
    """True on every process when ``flag`` is true on any (a stop decision all of them take together:
    a process that stopped alone would leave the others waiting in a collective)."""
    state = _state()
    if state.num_processes == 1:
        return flag
    import torch
    import torch.distributed as dist

    t = torch.tensor([1.0 if flag else 0.0], device=state.device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item() > 0)
