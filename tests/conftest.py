"""Shared fixtures: a small generated world every test module may reuse (read-only)."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestra.config import WorldParams

SMALL_WORLD = WorldParams(n_seeds=24, n_entities=60)


@pytest.fixture(scope="session")
def small_world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 24-seed, 60-entity world (seed 7) generated once per session; do not modify its files."""
    from orchestra.world import generate_world

    out = tmp_path_factory.mktemp("small_world")
    generate_world(SMALL_WORLD, out)
    return out
