"""Speech: spoken numbers in the world (espeak-ng), the embedded template recogniser, and its answers."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from orchestra.config import WorldParams
from orchestra.errors import ToolError, WorldError
from orchestra.world import audio, generate_world
from orchestra.world.speech import WORLD_LANGS, WORLD_VARIANTS, number_words, year_words

needs_espeak = pytest.mark.skipif(not audio.speech_available(), reason="espeak-ng is not installed")
SPEECH_WORLD = WorldParams(
    seed=5,
    n_seeds=14,
    n_entities=40,
    speech=True,
    task_mix={"audio": 1, "image": 0, "image_audio": 0, "video_audio": 0},
)


def test_number_and_year_words() -> None:
    assert number_words(412) == ["four", "hundred", "twelve"]
    assert number_words(412, british=True) == ["four", "hundred", "and", "twelve"]
    assert number_words(20_019, british=True) == ["twenty", "thousand", "and", "nineteen"]
    assert year_words(1984) == ["nineteen", "eighty", "four"]
    assert year_words(1905) == ["nineteen", "oh", "five"]
    assert year_words(1900) == ["nineteen", "hundred"]
    assert year_words(2007, british=True) == ["two", "thousand", "and", "seven"]
    assert year_words(2010) == ["twenty", "ten"]
    with pytest.raises(WorldError):
        number_words(1_000_000)
    with pytest.raises(WorldError):
        year_words(999)


def test_words_to_number_inverts_the_world_for_every_year_and_many_numbers() -> None:
    from orchestra.tools.speech_words import words_to_number

    for n in [*range(0, 2100), *range(2100, 1_000_000, 7919)]:
        for british in (False, True):
            assert words_to_number(number_words(n, british)) == n
    for y in range(1000, 2100):
        for british in (False, True):
            assert words_to_number(year_words(y, british)) == y
    for bad in (["hundred"], ["four", "four"], ["five", "twenty"], ["and"], ["oh", "five"], ["banana"]):
        with pytest.raises(ToolError):
            words_to_number(bad)


@needs_espeak
def test_render_speech_is_seeded_and_records_what_was_said() -> None:
    a, ta = audio.render_speech(np.random.default_rng(3), 1905, 0.5, year=True)
    b, tb = audio.render_speech(np.random.default_rng(3), 1905, 0.5, year=True)
    assert a.tobytes() == b.tobytes() and ta == tb
    assert ta["text"] == "1905" and ta["words"] == ["nineteen", "oh", "five"]
    lang = next(lang for lang in sorted(WORLD_LANGS, key=len, reverse=True) if ta["voice"].startswith(lang))
    assert ta["voice"][len(lang) :] in WORLD_VARIANTS
    assert ta["snr_db"] == pytest.approx(36 - 20 * 0.5)
    voices = {audio.render_speech(np.random.default_rng(s), 7, 0.0)[1]["voice"] for s in range(12)}
    assert len(voices) >= 4  # the seeded rng picks among several speakers
    with pytest.raises(WorldError):
        audio.render_speech(np.random.default_rng(0), "12a", 0.0)


@pytest.fixture(scope="module")
def speech_world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("speech_world")
    generate_world(SPEECH_WORLD, out)
    return out


def _digest(folder: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(p for p in folder.rglob("*") if p.is_file()):
        h.update(f.relative_to(folder).as_posix().encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


@needs_espeak
def test_speech_world_has_spoken_numbers_and_same_params_give_same_bytes(
    speech_world: Path, tmp_path: Path
) -> None:
    media = [json.loads(line) for line in (speech_world / "truth" / "media.jsonl").read_text().splitlines()]
    spoken = [m for m in media if m["kind"] == "speech"]
    assert spoken, "a speech world has speech tasks"
    for m in spoken:
        f = m["facts"]
        said = year_words(int(f["text"]), "and" in f["words"]) if f["year"] else None
        assert f["words"] == (said or number_words(int(f["text"]), "and" in f["words"]))
    generate_world(SPEECH_WORLD, tmp_path)
    assert _digest(tmp_path) == _digest(speech_world)


def test_speech_is_off_by_default() -> None:
    assert WorldParams().speech is False
