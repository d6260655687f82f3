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
    seed=6,
    n_seeds=16,
    n_entities=40,
    speech=True,
    task_mix={"audio": 1, "image": 0, "image_audio": 1, "video_audio": 0},
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


# --- the embedded speech tool ---------------------------------------------------------------------


@needs_espeak
def test_speech_tool_reads_clean_numbers_and_years(tmp_path: Path) -> None:
    """Clean speech (level 0, held-out world voices) is read exactly, with its words and their times."""
    from orchestra.tools.speech import TEMPLATE_VOICES, AudioSpeech

    world_voices = {lang + var for lang in WORLD_LANGS for var in WORLD_VARIANTS}
    assert not world_voices & set(TEMPLATE_VOICES)  # the templates hold every world speaker out
    tool = AudioSpeech()
    read = []
    for i, (value, year) in enumerate(((412, False), (1984, True), (70, False), (2007, True))):
        x, truth = audio.render_speech(np.random.default_rng([11, i]), value, 0.0, year=year)
        assert truth["voice"] not in TEMPLATE_VOICES
        path = tmp_path / f"{i}.wav"
        audio.save_wav(x, path)
        obs = tool(path=str(path))
        assert obs.ok, obs.error
        read.append((obs.data["words"] == truth["words"], obs.data["number"] == value))
        seg = obs.data["segments"]
        assert [s["word"] for s in seg] == obs.data["words"] and all(s["end"] > s["start"] for s in seg)
        assert truth["onset_s"] - 0.1 <= seg[0]["start"] and seg[-1]["end"] <= truth["duration_s"]
    assert sum(n for _, n in read) >= 3, read


def test_speech_tool_fails_clearly_on_bad_audio(tmp_path: Path) -> None:
    from orchestra.tools.speech import AudioSpeech

    silent, corrupt, rate = tmp_path / "silent.wav", tmp_path / "corrupt.wav", tmp_path / "8k.wav"
    audio.save_wav(np.zeros(16000, dtype=np.int16), silent)
    corrupt.write_bytes(b"RIFF\x10\x00\x00\x00WAVEjunkjunk")
    import wave

    with wave.open(str(rate), "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(8000), w.writeframes(b"\x01\x00" * 8000)
    tool = AudioSpeech()
    for path, reason in (
        (silent, "silent"),
        (corrupt, "WAV"),
        (rate, "16 kHz"),
        (tmp_path / "no.wav", "not found"),
    ):
        obs = tool(path=str(path))
        assert not obs.ok and "MediaError" in (obs.error or "") and reason in (obs.error or ""), obs.error


@needs_espeak
def test_noise_alone_is_no_number(tmp_path: Path) -> None:
    from orchestra.tools.speech import AudioSpeech

    path = tmp_path / "noise.wav"
    noise = np.random.default_rng(0).normal(0, 3000, 32000)
    audio.save_wav(np.clip(noise, -32768, 32767).astype(np.int16), path)
    obs = AudioSpeech()(path=str(path))
    assert not obs.ok and "MediaError" in (obs.error or "")


# --- the oracle answers speech tasks with the tool -------------------------------------------------


@needs_espeak
def test_oracle_answers_speech_tasks_with_the_speech_tool(speech_world: Path) -> None:
    """The builtin experts read the spoken numbers with audio_speech (never the truth): most speech
    tasks answered right, and every wrong answer comes from a misheard number."""
    from orchestra.agent.policies import oracle_for
    from orchestra.agent.systems import Environment, builtin_backends, evidence_of, run_task_sync
    from orchestra.config import AgentParams
    from orchestra.schemas import PerceiveStep, read_tasks_json
    from orchestra.tools.registry import default_registry

    tasks = [
        t
        for t in read_tasks_json(speech_world / "tasks.json")
        if any(
            isinstance(s, PerceiveStep) and s.perception == "speech_number" for s in t.solution_program or []
        )
    ]
    assert len(tasks) >= 3
    agent = AgentParams()
    with default_registry(speech_world) as tools:
        env = Environment(
            tools=tools, backends=builtin_backends(agent), agent=agent, media_root=speech_world / "media"
        )
        right = 0
        for task in tasks:
            traj = run_task_sync(task, "orchestra", oracle_for(task, "orchestra", env.agent), env)
            used = {c.tool for e in evidence_of(traj) for c in e.tool_calls}
            assert "audio_speech" in used, (task.id, used)
            if traj.answer == task.answer:
                right += 1
                continue
            heard = [
                e.value
                for s, e in zip(task.solution_program or [], evidence_of(traj), strict=False)
                if isinstance(s, PerceiveStep) and s.perception == "speech_number"
            ]
            assert heard and all(str(v) != task.answer for v in heard), (task.id, used)
    assert right / len(tasks) >= 0.6, (right, len(tasks))
