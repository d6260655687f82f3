"""Muxed "video w/ audio" (``seed.world.video_audio_track: muxed``): one MP4 whose sound track is the
task's audio, extracted by video_extract_audio to what the separate WAV held; same params, same bytes."""

from __future__ import annotations

import hashlib
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from conftest import SMALL_MUXED_WORLD

from orchestra.backends.goals import PERCEPTIONS
from orchestra.schemas import PerceiveStep, Task, read_tasks_json
from orchestra.tools.base import Tool
from orchestra.tools.media import load_wav, read_video
from orchestra.tools.registry import tool_classes
from orchestra.tools.video import VideoExtractAudio
from orchestra.world import generate_world
from orchestra.world.audio import render_dtmf
from orchestra.world.replay import replay_world
from orchestra.world.video import render_video

MUXED = "video w/ audio"
TOOLS = {cls.name: cls for cls in tool_classes()}  # in-process instances: no worker pool to close


def _hashes(world: Path) -> dict[str, str]:
    return {
        str(f.relative_to(world)): hashlib.sha256(f.read_bytes()).hexdigest()
        for f in sorted(world.rglob("*"))
        if f.is_file()
    }


def _tasks(world: Path) -> dict[str, Task]:
    return {t.id: t for t in read_tasks_json(world / "tasks.json")}


def _streams(path: Path) -> list[tuple[str, str]]:
    import av

    with av.open(str(path)) as box:
        return [(s.type, s.codec_context.name) for s in box.streams]


def _pairs(separate: Path, muxed: Path) -> list[tuple[Task, Task]]:
    a, b = _tasks(separate), _tasks(muxed)
    return [(a[k], b[k]) for k in a if a[k].task_type == MUXED]


def test_a_muxed_task_lists_one_video_with_a_pcm_track(small_world: Path, small_muxed_world: Path) -> None:
    pairs = _pairs(small_world, small_muxed_world)
    assert len(pairs) >= 5
    for sep, mux in pairs:
        assert [m.type for m in sep.omni_modal_input] == ["video", "audio"]
        assert [m.type for m in mux.omni_modal_input] == ["video"]
        video = mux.omni_modal_input[0]
        assert video == sep.omni_modal_input[0]  # same id and path: only the file's content differs
        assert _streams(small_muxed_world / "media" / video.path) == [
            ("video", "mpeg4"),
            ("audio", "pcm_s16le"),
        ]
        assert not (small_muxed_world / "media" / sep.omni_modal_input[1].path).exists()
        # the same program, its audio steps reading the video; question and answer unchanged
        audio_id = sep.omni_modal_input[1].id
        moved = [
            s.model_copy(update={"input_id": video.id})
            if isinstance(s, PerceiveStep) and s.input_id == audio_id
            else s
            for s in sep.solution_program or []
        ]
        assert mux.solution_program == moved
        assert (mux.question, mux.answer) == (sep.question, sep.answer)
    assert replay_world(small_muxed_world) == {"replayed": 24}


def test_the_rest_of_a_muxed_world_is_the_same_bytes(small_world: Path, small_muxed_world: Path) -> None:
    sep, mux = _hashes(small_world), _hashes(small_muxed_world)
    changed = {p for p in sep.keys() & mux.keys() if sep[p] != mux[p]}
    videos = {f"media/{a.omni_modal_input[0].path}" for a, _ in _pairs(small_world, small_muxed_world)}
    wavs = {f"media/{a.omni_modal_input[1].path}" for a, _ in _pairs(small_world, small_muxed_world)}
    assert changed == videos | {"tasks.json", "truth/media.jsonl", "truth/world.json"}
    assert set(sep) - set(mux) == wavs and set(mux) <= set(sep)
    others = {k: t for k, t in _tasks(small_world).items() if t.task_type != MUXED}
    assert others and all(_tasks(small_muxed_world)[k] == t for k, t in others.items())


def test_material_facts_include_the_muxed_track(small_world: Path, small_muxed_world: Path) -> None:
    """anchor_facts' material (what else a task's media answer) reads a muxed video's sound too."""
    from orchestra.data.anchors import material_steps
    from orchestra.world.replay import load_truth

    def facts(world: Path, task: Task) -> list[tuple[str, str, object]]:
        steps = material_steps(task, load_truth(world).media)
        return sorted((s.perception, str(sorted(s.args.items())), s.value) for s in steps)

    pairs = _pairs(small_world, small_muxed_world)
    audio = [PERCEPTIONS[f[0]].modality for sep, _ in pairs for f in facts(small_world, sep)]
    assert "audio" in audio
    for sep, mux in pairs:
        assert facts(small_muxed_world, mux) == facts(small_world, sep)


def test_a_muxed_video_is_fused_across_picture_and_sound(small_muxed_world: Path) -> None:
    """rewrite_candidates' cross-modal fusion counts a muxed video's picture and sound as two inputs
    (one file, so none before): fused programs read both, in questions worded for one file."""
    from orchestra.config import RewriteParams
    from orchestra.data.anchors import material_steps
    from orchestra.data.phrases import QUESTIONS
    from orchestra.data.recheck import fact_of
    from orchestra.data.rewrite import rewrite_seed
    from orchestra.world.replay import load_truth

    truth = load_truth(small_muxed_world)
    fused = []
    for seed in _tasks(small_muxed_world).values():
        if seed.task_type != MUXED:
            continue
        material = [fact_of(seed, s, "truth") for s in material_steps(seed, truth.media)]
        steps = [s for s in seed.solution_program or [] if isinstance(s, PerceiveStep)]
        out = rewrite_seed(
            seed, [fact_of(seed, s, "truth") for s in steps], material, truth.kb, RewriteParams()
        )
        fused += [(c.task, c.template) for c in out if c.strategy == "cross_modal_fusion"]
    assert len(fused) >= 3
    for task, template in fused:
        read = {PERCEPTIONS[s.perception].modality for s in task.solution_program or [] if s.op == "perceive"}
        assert read == {"video", "audio"} and len(task.omni_modal_input) == 1
        assert template in QUESTIONS["cross_modal_fusion"]["number_one_file"] and "input" not in task.question


def test_same_params_give_the_same_muxed_bytes(small_muxed_world: Path, tmp_path: Path) -> None:
    generate_world(SMALL_MUXED_WORLD, tmp_path / "again")
    assert _hashes(tmp_path / "again") == _hashes(small_muxed_world)


def _audio_tool(task: Task) -> tuple[Tool, PerceiveStep]:
    step = next(
        s
        for s in task.solution_program or []
        if isinstance(s, PerceiveStep) and PERCEPTIONS[s.perception].modality == "audio"
    )
    return TOOLS[PERCEPTIONS[step.perception].tool](), step


def test_the_extracted_track_is_the_source_audio(
    small_world: Path, small_muxed_world: Path, tmp_path: Path
) -> None:
    """Sample for sample (PCM, no resampling at 16 kHz), so the audio tools observe exactly what they
    observe on the separate WAV; the video stream is the separate MP4's, frame for frame."""
    extract = VideoExtractAudio()
    for sep, mux in _pairs(small_world, small_muxed_world):
        video = small_muxed_world / "media" / mux.omni_modal_input[0].path
        source = small_world / "media" / sep.omni_modal_input[1].path
        obs = extract(path=str(video), out_path=str(tmp_path / f"{mux.id}.wav"))
        assert obs.ok, obs.error
        got, want = load_wav(obs.data["out_path"]), load_wav(source)
        assert got.rate == want.rate == 16000 and got.channels == 1 and got.sample_width == 2
        assert abs(got.duration - want.duration) < 1.0 / 8  # within a frame (8 fps); in fact equal
        assert np.array_equal(got.samples, want.samples)
        assert obs.data["duration_s"] == pytest.approx(want.duration, abs=1e-4)
        tool, step = _audio_tool(sep)
        on_wav = tool(path=str(source), **step.args)
        on_track = tool(path=obs.data["out_path"], **step.args)
        assert on_wav.ok and on_track.ok and on_track.data == on_wav.data
        _, a, _ = read_video(small_world / "media" / sep.omni_modal_input[0].path)
        _, b, _ = read_video(video)
        assert len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


@pytest.fixture(scope="module")
def muxed_file(small_muxed_world: Path) -> Path:
    task = next(t for t in _tasks(small_muxed_world).values() if t.task_type == MUXED)
    return small_muxed_world / "media" / task.omni_modal_input[0].path


def _faststart(src: Path, dest: Path) -> None:
    """``src`` remuxed with its index (moov) first, as streaming MP4s are: a cut file still opens."""
    import av

    with (
        av.open(str(src)) as inp,
        av.open(str(dest), "w", format="mp4", options={"movflags": "+faststart"}) as out,
    ):
        streams = {s.index: out.add_stream_from_template(s) for s in inp.streams}
        for pkt in inp.demux():
            if pkt.dts is not None:
                pkt.stream = streams[pkt.stream.index]
                out.mux(pkt)


def test_extract_audio_refuses_broken_and_silent_videos(muxed_file: Path, tmp_path: Path) -> None:
    data = muxed_file.read_bytes()
    cut = tmp_path / "cut.mp4"  # index at the end (as the world writes): the cut file has none
    cut.write_bytes(data[: len(data) * 9 // 10])
    fast = tmp_path / "fast.mp4"
    _faststart(muxed_file, fast)
    assert _streams(fast) == _streams(muxed_file)
    fast_cut = tmp_path / "fast_cut.mp4"  # index first: it opens, its track decodes short
    fast_bytes = fast.read_bytes()
    fast_cut.write_bytes(fast_bytes[: len(fast_bytes) * 3 // 5])
    silent = tmp_path / "silent.mp4"
    render_video(np.random.default_rng(3), 0.2, silent, seconds=1.0, text_mode="none")
    tool = VideoExtractAudio()
    assert tool(path=str(fast)).ok
    for path, needle in (
        (cut, "corrupt"),
        (fast_cut, "truncated"),
        (silent, "no audio stream (its streams: video)"),
    ):
        obs = tool(path=str(path))
        assert not obs.ok and needle in (obs.error or ""), (path.name, obs.error)
        assert obs.text.startswith("[video_extract_audio failed]")


def test_extract_audio_resamples_an_aac_stereo_track(tmp_path: Path) -> None:
    """A real video's track (AAC, 44.1 kHz, stereo) comes out as the 16 kHz mono WAV the tools read."""
    import av

    rng = np.random.default_rng(5)
    samples, truth = render_dtmf(rng, "4096", 0.1)
    rate = 44100
    x = samples.astype(np.float32) / 32768.0
    up = np.interp(np.arange(int(len(x) * rate / 16000)) * 16000 / rate, np.arange(len(x)), x)
    stereo = np.stack([up, up]).astype(np.float32)
    video = tmp_path / "v.mp4"
    render_video(rng, 0.2, video, seconds=truth["duration_s"] + 0.5, text_mode="none")
    out = tmp_path / "aac.mp4"
    with av.open(str(video)) as src, av.open(str(out), "w", format="mp4") as dst:
        vout = dst.add_stream_from_template(src.streams.video[0])
        aout = dst.add_stream("aac", rate=rate, layout="stereo")
        for pkt in src.demux(src.streams.video[0]):
            if pkt.dts is not None:
                pkt.stream = vout
                dst.mux(pkt)
        for start in range(0, stereo.shape[1], 1024):
            frame = av.AudioFrame.from_ndarray(
                np.ascontiguousarray(stereo[:, start : start + 1024]), format="fltp", layout="stereo"
            )
            frame.sample_rate, frame.pts, frame.time_base = rate, start, Fraction(1, rate)
            dst.mux(aout.encode(frame))
        dst.mux(aout.encode(None))
    assert _streams(out) == [("video", "mpeg4"), ("audio", "aac")]
    obs = VideoExtractAudio()(path=str(out))
    assert obs.ok, obs.error
    wav = load_wav(obs.data["out_path"])
    assert wav.rate == 16000 and wav.channels == 1
    assert abs(wav.duration - len(samples) / 16000) < 0.1
    dtmf = TOOLS["audio_dtmf"]()(path=obs.data["out_path"])
    assert dtmf.ok and dtmf.data["digits"] == "4096"
