"""The procedural omni-modal world: a generated wiki, media renderers and machine-checkable seed tasks.

Import-light: ``generate_world`` loads the renderers (numpy, Pillow, OpenCV) only when called.
Replay lives in ``orchestra.world.replay.replay``; renderers in ``image``, ``audio`` and ``video``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from orchestra.config import WorldParams

__all__ = ["generate_world"]


def generate_world(params: WorldParams, out_dir: Path) -> dict[str, Any]:
    """Generate a world into ``out_dir`` (see orchestra.world.generate.generate_world)."""
    from orchestra.world.generate import generate_world as _generate

    return _generate(params, out_dir)
