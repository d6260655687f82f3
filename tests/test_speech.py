"""Speech: spoken numbers and names in the world (espeak-ng), the embedded template recogniser, and its
answers."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from orchestra import espeak
from orchestra.config import WorldParams
from orchestra.errors import ToolError, WorldError
from orchestra.world import audio, generate_world
from orchestra.world.speech import WORLD_LANGS, WORLD_VARIANTS, number_words, year_words

needs_espeak = pytest.mark.skipif(not espeak.available(), reason="espeak-ng is not installed")
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
    names = {json.loads(line)["name"] for line in (speech_world / "truth" / "entities.jsonl").open()}
    said_names = [m["facts"] for m in spoken if m["facts"].get("name")]
    assert said_names and len(said_names) < len(spoken), "a speech world says numbers and names"
    for m in spoken:
        f = m["facts"]
        if f.get("name"):
            assert f["text"] in names and f["words"] == f["text"].split()
            continue
        said = year_words(int(f["text"]), "and" in f["words"]) if f["year"] else None
        assert f["words"] == (said or number_words(int(f["text"]), "and" in f["words"]))
    generate_world(SPEECH_WORLD, tmp_path)
    assert _digest(tmp_path) == _digest(speech_world)


def test_params_yaml_turns_speech_on_and_a_world_without_espeak_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestra.config import load_params

    assert WorldParams().speech is False  # code that builds its own WorldParams keeps speech-free worlds
    assert load_params(Path(__file__).parents[1] / "params.yaml").seed.world.speech is True
    monkeypatch.setattr("orchestra.world.generate.speech_available", lambda: False)
    with pytest.raises(WorldError, match="seed.world.speech"):
        generate_world(SPEECH_WORLD, tmp_path)


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


@needs_espeak
def test_a_cold_call_says_what_it_loaded_and_a_warm_one_nothing(tmp_path: Path) -> None:
    from orchestra.tools import speech

    x, _ = audio.render_speech(np.random.default_rng([11, 0]), 412, 0.0)
    audio.save_wav(x, tmp_path / "412.wav")
    speech.templates.cache_clear()  # this process's copy: the next call loads them again
    tool = speech.AudioSpeech()
    cold, warm = tool(path=str(tmp_path / "412.wav")), tool(path=str(tmp_path / "412.wav"))
    n = len(speech.templates().words)
    assert cold.ok and re.fullmatch(
        rf"{n} word templates \(\d+ MB\) (read from the cache|rendered with "
        r"espeak-ng) in \d+\.\d\d s",
        cold.data["loaded"][0],
    ), cold.data
    assert warm.ok and "loaded" not in warm.data and warm.data["number"] == cold.data["number"]


@needs_espeak
def test_speech_tool_reads_clean_names_among_namesakes_and_still_numbers(tmp_path: Path) -> None:
    """Built with names (near-namesakes among them), the tool reads a clean held-out speaker saying a
    name as that name (no number), still reads numbers as numbers, and its cache version names the
    vocabulary. Pooled, a worker builds it with the same names."""
    from orchestra.tools.pool import PooledTool
    from orchestra.tools.speech import AudioSpeech

    names = ["Bradratu", "Bradritu", "Bronas Gestan", "Bronas Gestun", "Kotus", "Femin", "Giman", "Totrom"]
    tool = AudioSpeech(names=names)
    assert tool.version != AudioSpeech().version and tool.version != AudioSpeech(names=names[:-1]).version
    assert AudioSpeech(names=list(reversed(names))).version == tool.version
    pooled = PooledTool.wrap(tool, 1)
    assert pooled.version == tool.version and pooled.config() == AudioSpeech().config() == {}
    assert pooled.inner.config() == {"names": sorted(names)}
    said = []
    for i, name in enumerate(["Kotus", "Bronas Gestan", "Femin"]):
        x, truth = audio.render_spoken_name(np.random.default_rng([12, i]), name, 0.0)
        assert truth["words"] == name.split() and truth["name"] is True
        audio.save_wav(x, tmp_path / f"{i}.wav")
        obs = (pooled if i == 2 else tool)(path=str(tmp_path / f"{i}.wav"))
        assert obs.ok, obs.error
        said.append(obs.data["text"] == name and obs.data["kind"] == "name" and obs.data["number"] is None)
    assert sum(said) >= 2, said
    x, _ = audio.render_speech(np.random.default_rng([11, 0]), 412, 0.0)
    audio.save_wav(x, tmp_path / "412.wav")
    obs = tool(path=str(tmp_path / "412.wav"))
    assert obs.ok and obs.data["kind"] == "number" and obs.data["number"] == 412, obs.text


@needs_espeak
def test_template_cache_keeps_the_most_recently_used_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new template file makes room: the least recently used beyond KEEP_CACHED go, a file read
    counts as used, and a file being written is left alone."""
    import os

    from orchestra.tools import speech

    monkeypatch.setenv("ORCHESTRA_CACHE_DIR", str(tmp_path))
    folder = tmp_path / "speech_templates"
    folder.mkdir()
    old = [folder / f"old{i}.npz" for i in range(speech.KEEP_CACHED + 2)]
    for i, f in enumerate(old):
        f.write_bytes(b"x")
        os.utime(f, (1000 + i, 1000 + i))
    (folder / "x.123.tmp.npz").write_bytes(b"partial")
    os.utime(folder / "x.123.tmp.npz", (1, 1))
    render = lambda: [("one", speech._espeak("one", "en-us"))]  # noqa: E731
    t = speech._cached(("prune test",), render)
    kept = sorted(f.name for f in folder.glob("*.npz"))
    new = [f for f in kept if not f.startswith(("old", "x."))]
    assert len(new) == 1 and "x.123.tmp.npz" in kept
    assert {f"old{i}.npz" for i in range(3, len(old))} == set(kept) - {"x.123.tmp.npz", *new}
    os.utime(folder / new[0], (1, 1))
    again = speech._cached(("prune test",), render)  # read from the file, which is now the newest
    assert np.array_equal(again.frames, t.frames) and (folder / new[0]).stat().st_mtime > 1000


@needs_espeak
def test_template_cache_renders_once_for_callers_that_miss_it_together(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading
    import time

    from orchestra.tools import speech

    monkeypatch.setenv("ORCHESTRA_CACHE_DIR", str(tmp_path))
    calls = []

    def render() -> list[tuple[str, np.ndarray]]:
        calls.append(threading.get_ident())
        time.sleep(0.5)  # the others arrive while it renders
        return [("two", speech._espeak("two", "en-us"))]

    got: list[speech.Templates] = []
    threads = [
        threading.Thread(target=lambda: got.append(speech._cached(("once",), render))) for _ in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and len(got) == 3
    assert all(np.array_equal(g.frames, got[0].frames) and g.words == ("two",) for g in got)


@needs_espeak
def test_espeak_each_gives_one_sound_per_text_like_single_calls() -> None:
    texts = ["Kotus", "Bronas Gestan", "four hundred and twelve", "A & B <x>"]
    each = espeak.espeak_each(texts, "en-us+m1", 150)
    assert len(each) == len(texts)

    def sounding(x: np.ndarray) -> int:  # samples from the first to the last loud one
        loud = np.flatnonzero(np.abs(x) > 0.01)
        return int(loud[-1] - loud[0])

    for text, (x, rate) in zip(texts, each, strict=True):
        alone, rate1 = espeak.espeak(text, "en-us+m1", 150)
        assert rate == rate1 and 0.8 < sounding(x) / sounding(alone) < 1.25, text
    with pytest.raises(ToolError, match="3 texts came out as 2 pieces"):  # a silent text: no pairing guessed
        espeak.espeak_each(["one", " ", "two"], "en-us", 150, error=ToolError)


def _fake_espeak(tmp_path: Path, sounds: list[bytes]) -> Path:
    """A folder with an ``espeak-ng`` that writes ``sounds`` in turn, one a run (the last one again after)."""
    folder = tmp_path / "bin"
    folder.mkdir(parents=True)
    for i, wav in enumerate(sounds):
        (folder / f"sound{i}.wav").write_bytes(wav)
    script = folder / "espeak-ng"
    script.write_text(
        "#!/bin/sh\n"
        f'd="{folder}"; n=$(cat "$d/count" 2>/dev/null || echo 0); echo $((n + 1)) > "$d/count"\n'
        f'[ "$n" -ge {len(sounds)} ] && n={len(sounds) - 1}\n'
        'cat "$d/sound$n.wav"\n'
    )
    script.chmod(0o755)
    return folder


def test_a_sound_counts_only_once_two_espeak_runs_agree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """espeak-ng 1.51 gave the same arguments different samples in rare runs: a deviating run is outvoted,
    and runs that never agree are an error naming the text, not a guess."""
    one, other, third = (audio.wav_bytes(np.full(160, v, dtype=np.int16)) for v in (100, 200, 300))
    folder = _fake_espeak(tmp_path, [other, one, one])
    monkeypatch.setenv("PATH", f"{folder}:/usr/bin:/bin")
    x, rate = espeak.espeak("seven", "en-us", 150)
    assert rate == 16_000 and np.allclose(x, 100 / 32768) and (folder / "count").read_text().strip() == "3"
    folder = _fake_espeak(tmp_path / "never", [one, other, third, audio.wav_bytes(np.ones(8, np.int16))])
    monkeypatch.setenv("PATH", f"{folder}:/usr/bin:/bin")
    with pytest.raises(WorldError, match="'seven': 4 runs gave 4 different sounds"):
        espeak.espeak("seven", "en-us", 150, error=WorldError)


def test_match_is_the_textbook_recursion_on_templates_heard_in_the_noise() -> None:
    """:func:`match` against the definitions written out: each template scaled to the span's speech
    energy plus the noise, normalised cepstra, the textbook DTW, for templates of many lengths."""
    from orchestra.tools.speech_dsp import _DCT, cepstra
    from orchestra.tools.speech_match import match

    def textbook(q: np.ndarray, t: np.ndarray) -> float:
        acc = np.full((len(q) + 1, len(t) + 1), np.inf)
        acc[0, 0] = 0.0
        for i in range(1, len(q) + 1):
            for j in range(1, len(t) + 1):
                c = float(np.linalg.norm(q[i - 1] - t[j - 1]))
                acc[i, j] = min(acc[i - 1, j] + c, acc[i, j - 1] + c, acc[i - 1, j - 1] + 2 * c)
        return float(acc[-1, -1]) / (len(q) + len(t))

    rng = np.random.default_rng(0)
    noise = rng.uniform(0.01, 0.1, size=20)
    for n, lengths in ((1, [1, 3]), (9, [1, 7, 2]), (12, [30, 5, 12]), (31, [8, 40, 1, 19])):
        span = rng.uniform(0.0, 5.0, size=(n, 20))
        frames = rng.uniform(0.0, 3.0, size=(sum(lengths), 20)).astype(np.float32)
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        query = cepstra(span)
        speech = max(span.sum(1).mean() - noise.sum(), 1e-3 * noise.sum() + 1e-12)
        want = []
        for i in range(len(lengths)):
            t = frames[offsets[i] : offsets[i + 1]].astype(np.float64)
            heard = t * (speech / t.sum(1).mean()) + noise
            c = np.log(heard + 1e-10) @ _DCT.T
            want.append(textbook(query, (c - c.mean(0)) / (c.std(0) + 1e-6)))
        which = np.arange(len(lengths))[::-1]  # any order, any subset
        got = match(query, span, noise, frames, offsets, which)
        assert np.allclose(got, np.array(want)[which], rtol=1e-9, atol=1e-9), (n, got, want)


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
    """The builtin experts read the spoken numbers and names with audio_speech (never the truth; the
    names it knows are the world's page titles): most speech tasks answered right, and every wrong
    answer comes from a misheard number or name."""
    from orchestra.agent.policies import oracle_for
    from orchestra.agent.runtime import Environment
    from orchestra.agent.systems import evidence_of, run_task_sync
    from orchestra.backends.pool import builtin_backends
    from orchestra.config import AgentParams
    from orchestra.schemas import PerceiveStep, read_tasks_json
    from orchestra.tools.registry import default_registry

    spoken = ("speech_number", "speech_name")
    tasks = [
        t
        for t in read_tasks_json(speech_world / "tasks.json")
        if any(isinstance(s, PerceiveStep) and s.perception in spoken for s in t.solution_program or [])
    ]
    assert len(tasks) >= 3
    assert any(
        isinstance(s, PerceiveStep) and s.perception == "speech_name"
        for t in tasks
        for s in t.solution_program or []
    )
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
                if isinstance(s, PerceiveStep) and s.perception in spoken
            ]
            assert heard and all(str(v) != task.answer for v in heard), (task.id, used)
    assert right / len(tasks) >= 0.6, (right, len(tasks))


# --- the production path: an OpenAI-compatible transcription endpoint ----------------------------


@pytest.fixture(scope="module")
def spoken_wav(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A clean held-out speaker saying 412 (the recogniser reads it: see the clean test)."""
    path = tmp_path_factory.mktemp("spoken") / "412.wav"
    audio.save_wav(audio.render_speech(np.random.default_rng([11, 0]), 412, 0.0)[0], path)
    return path


@needs_espeak
def test_orchestra_serve_transcribes_for_our_client_and_the_openai_client(spoken_wav: Path) -> None:
    """`orchestra serve`'s /v1/audio/transcriptions answers the tools.speech openai backend (through the
    tool registry) and the official client's ``audio.transcriptions.create`` on loopback."""
    import openai

    from orchestra.agent.serve import ScriptedResponder, start_server
    from orchestra.config import ToolParams
    from orchestra.tools.registry import default_registry
    from orchestra.tools.speech_openai import OpenAISpeech

    with start_server(ScriptedResponder([])) as srv:
        params = ToolParams(speech={"backend": "openai", "base_url": srv.url, "model": "orchestra-speech"})
        with default_registry(None, params) as tools:
            tool = tools.get("audio_speech")
            assert isinstance(tool, OpenAISpeech)
            obs = tool(path=str(spoken_wav))
        assert obs.ok and obs.data["number"] == 412 and obs.data["text"] == "four hundred twelve", obs
        client = openai.OpenAI(base_url=srv.url, api_key="none", max_retries=0, timeout=30)
        with spoken_wav.open("rb") as f:
            got = client.audio.transcriptions.create(model="orchestra-speech", file=f)
        assert got.text == "four hundred twelve"
        with spoken_wav.open("rb") as f:
            plain = client.audio.transcriptions.create(model="m", file=f, response_format="text")
        assert str(plain).strip() == "four hundred twelve"
        bad = spoken_wav.parent / "noise.wav"
        bad.write_bytes(spoken_wav.read_bytes()[:44] + bytes(32000))  # a WAV of silence
        with bad.open("rb") as f, pytest.raises(openai.BadRequestError, match="silent"):
            client.audio.transcriptions.create(model="m", file=f)


@needs_espeak
def test_orchestra_serve_with_a_world_transcribes_its_names(
    speech_world: Path, serve_process: Any, tmp_path: Path
) -> None:
    """`orchestra serve --world DIR` (a real process): its transcription endpoint knows the world's page
    titles, so a spoken name comes back as the name the in-process tool reads, for the official client."""
    import openai

    from orchestra.tools.registry import page_store, speech_names
    from orchestra.tools.speech import AudioSpeech

    names = speech_names(page_store(speech_world))
    wav = tmp_path / "name.wav"
    audio.save_wav(audio.render_spoken_name(np.random.default_rng([13, 0]), names[0], 0.0)[0], wav)
    local = AudioSpeech(names=names)(path=str(wav))
    assert local.ok and local.data["kind"] == "name" and local.data["text"] in names, local.text
    script = tmp_path / "script.jsonl"
    script.write_text("")
    with serve_process(script, extra=("--world", str(speech_world))) as (_, url):
        client = openai.OpenAI(base_url=url, api_key="none", max_retries=0, timeout=60)
        with wav.open("rb") as f:
            got = client.audio.transcriptions.create(model="orchestra-speech", file=f)
    assert got.text == local.data["text"]


def test_transcripts_in_digits_or_words_become_numbers() -> None:
    from orchestra.errors import ReplyError
    from orchestra.tools.speech_openai import text_to_number

    assert text_to_number(" 412.")[1] == 412 and text_to_number("1,984")[1] == 1984
    assert text_to_number("Four hundred and twelve.")[1] == 412
    assert text_to_number("Nineteen o-five")[1] == 1905 and text_to_number("twenty-three")[1] == 23
    with pytest.raises(ReplyError):
        text_to_number("Hello there.")


def test_openai_speech_turns_http_errors_timeouts_and_bad_replies_into_failed_observations(
    loopback, spoken_wav: Path, tmp_path: Path
) -> None:
    from http.server import BaseHTTPRequestHandler

    from orchestra.tools.speech_openai import OpenAISpeech

    seen: list[bytes] = []

    def handler(status: int, body: bytes, delay: float = 0.0) -> type[BaseHTTPRequestHandler]:
        class H(BaseHTTPRequestHandler):
            def log_message(self, *a: object) -> None:
                return

            def do_POST(self) -> None:  # noqa: N802
                seen.append(self.rfile.read(int(self.headers["Content-Length"])))
                seen.append(self.headers["Content-Type"].encode() + b" " + self.path.encode())
                import time

                time.sleep(delay)
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        return H

    def run(h: type[BaseHTTPRequestHandler], timeout: float = 5.0, path: Path = spoken_wav) -> object:
        port = loopback(h)
        return OpenAISpeech(f"http://127.0.0.1:{port}/v1", "whisper-1", timeout_s=timeout)(path=str(path))

    ok = run(handler(200, b'{"text": "Nineteen eighty-four."}'))
    assert ok.ok and ok.data["number"] == 1984
    assert b'name="model"\r\n\r\nwhisper-1' in seen[0] and b'filename="412.wav"' in seen[0]
    assert seen[1].startswith(b"multipart/form-data; boundary=") and seen[1].endswith(
        b"/v1/audio/transcriptions"
    )
    for h, why in (
        (handler(500, b'{"error": {"message": "model overloaded"}}'), "HTTP 500"),
        (handler(200, b"<html>"), "no JSON"),
        (handler(200, b'{"txt": "412"}'), "no 'text'"),
        (handler(200, b'{"text": "no idea"}'), "says no number"),
        (handler(200, b'{"text": "412"}', delay=2.0), "timed out"),
    ):
        obs = run(h, timeout=0.5)
        assert not obs.ok and why in (obs.error or ""), (why, obs.error)
    sent = len(seen)
    corrupt = tmp_path / "corrupt.wav"
    corrupt.write_bytes(b"RIFF0000WAVEjunk")
    obs = run(handler(200, b'{"text": "412"}'), path=corrupt)
    assert not obs.ok and "MediaError" in (obs.error or "") and len(seen) == sent  # never uploaded
    with pytest.raises(ValueError, match="base_url and model"):
        from orchestra.config import ToolParams

        ToolParams(speech={"backend": "openai"})
