"""Fast and careful variants of the audio tools: hard world audio tells them apart, honestly scored."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from orchestra.config import WorldParams
from orchestra.tools.audio import AudioDTMF, AudioMorse, AudioTones
from orchestra.tools.base import Tool
from orchestra.world import audio as waudio

TOOLS: list[Tool] = [AudioDTMF(), AudioTones(), AudioMorse()]


def _hard(tmp_path: Path, kind: str, seed: int, level: float = 0.7) -> tuple[Path, dict[str, Any]]:
    """A world file at a hard level (seeds picked where the fast variant misses)."""
    rng = np.random.default_rng(seed)
    if kind == "dtmf":
        x, truth = waudio.render_dtmf(rng, "40718", level)
    elif kind == "beeps":
        x, truth = waudio.render_beeps(rng, level, count=6)
    else:
        x, truth = waudio.render_morse(rng, "KAVO 73", level)
    path = tmp_path / f"{kind}{seed}.wav"
    waudio.save_wav(x, path)
    return path, truth


# (tool, kind, seed, result key, the truth's value); each file's difficulty is noted
CASES = [
    (AudioDTMF(), "dtmf", 4, "digits", "40718"),  # -11 dB recording, 45 ms keys: fast loses keys
    (AudioTones(), "beeps", 2, "count", 6),  # loud noise: fast's fixed threshold fires on it
    (AudioTones(), "beeps", 3, "count", 6),  # -17 dB recording, faded beeps: fast hears two
    (AudioMorse(), "morse", 2, "text", "KAVO 73"),  # -17 dB recording, fading: fast reads 'E E E'
]


@pytest.mark.parametrize(("tool", "kind", "seed", "key", "want"), CASES, ids=[f"{c[1]}{c[2]}" for c in CASES])
def test_careful_reads_hard_audio_that_fast_misses(
    tmp_path: Path, tool: Tool, kind: str, seed: int, key: str, want: Any
) -> None:
    path, truth = _hard(tmp_path, kind, seed)
    careful, fast = tool(path=str(path), mode="careful"), tool(path=str(path), mode="fast")
    assert careful.ok and fast.ok
    assert careful.data[key] == want and fast.data[key] != want
    assert careful.data["mode"] == "careful" and fast.data["mode"] == "fast"
    # honest confidence: the fast miss says it is unsure, the careful hit says it is sure
    assert fast.data["confidence"] < 0.6 <= careful.data["confidence"]
    assert truth["level"] == 0.7


@pytest.mark.parametrize("tool", TOOLS, ids=[t.name for t in TOOLS])
def test_fast_is_faster_on_the_same_file(
    tmp_path: Path, tool: Tool, best_latency: Callable[..., float]
) -> None:
    kind = {"audio_dtmf": "dtmf", "audio_tones": "beeps", "audio_morse": "morse"}[tool.name]
    path, _ = _hard(tmp_path, kind, 0, level=0.3)
    assert best_latency(tool, path, "fast") < best_latency(tool, path, "careful")


@pytest.mark.parametrize("tool", TOOLS, ids=[t.name for t in TOOLS])
def test_both_modes_read_clean_audio(tmp_path: Path, tool: Tool) -> None:
    kind, key, want = {
        "audio_dtmf": ("dtmf", "digits", "40718"),
        "audio_tones": ("beeps", "count", 6),
        "audio_morse": ("morse", "text", "KAVO 73"),
    }[tool.name]
    path, _ = _hard(tmp_path, kind, 0, level=0.05)
    for mode in ("fast", "careful"):
        obs = tool(path=str(path), mode=mode)
        assert obs.data[key] == want and obs.data["mode"] == mode
        assert 0.0 <= obs.data["confidence"] <= 1.0
    assert tool(path=str(path)).data["mode"] == "careful"  # absent = careful


@pytest.mark.parametrize("tool", TOOLS, ids=[t.name for t in TOOLS])
def test_mode_is_declared_and_validated(tmp_path: Path, tool: Tool) -> None:
    schema = tool.input_schema["properties"]["mode"]
    assert schema["type"] == "string" and schema["enum"] == ["fast", "careful"] and schema["description"]
    path, _ = _hard(tmp_path, "beeps", 0, level=0.05)
    bad = tool(path=str(path), mode="turbo")
    assert not bad.ok and "turbo" in (bad.error or "") and "fast, careful" in (bad.error or "")
    assert not tool(path=str(path), mode=3).ok


def test_levels_make_harder_audio_deterministically() -> None:
    def render(level: float, seed: int = 11) -> tuple[np.ndarray, dict[str, Any]]:
        return waudio.render_beeps(np.random.default_rng(seed), level, count=4, freq_hz=800)

    def between_beeps(x: np.ndarray, truth: dict[str, Any]) -> np.ndarray:
        gaps = np.ones(len(x), dtype=bool)
        for onset, dur in zip(truth["onsets_s"], truth["durations_s"], strict=True):
            gaps[int(onset * 16000) : int((onset + dur) * 16000) + 1] = False
        return x[gaps].astype(float)

    (a, ta), (b, _), (easy, te) = render(0.6), render(0.6), render(0.0)
    assert np.array_equal(a, b) and ta["level"] == 0.6 and te["level"] == 0.0  # same seed: same bytes
    assert ta["durations_s"][0] < te["durations_s"][0]  # shorter beeps when harder
    assert np.std(between_beeps(easy, te)) == 0 < np.std(between_beeps(a, ta))  # noise between them
    lo, hi = WorldParams().noise.audio
    assert 0.0 <= lo < hi <= 1.0  # the default range spreads files over levels
