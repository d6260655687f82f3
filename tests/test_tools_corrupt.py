"""Corrupt, empty, mislabelled and missing media give error Observations with clear messages."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from orchestra.tools.audio import AudioDTMF, AudioMorse, AudioSegment, AudioTones
from orchestra.tools.base import Tool
from orchestra.tools.image import ImageCountObjects, ImageCrop, ImageDescribe, ImageOCR, ImageReadChart
from orchestra.tools.media import wav_bytes
from orchestra.tools.video import VideoEvents, VideoExtractAudio, VideoSampleFrames, VideoText
from orchestra.world.audio import render_beeps, save_wav
from orchestra.world.image import render_shapes, save_jpeg, save_png
from orchestra.world.video import render_video

IMAGE_TOOLS: list[Tool] = [ImageOCR(), ImageCountObjects(), ImageReadChart(), ImageDescribe(), ImageCrop()]
AUDIO_TOOLS: list[Tool] = [AudioDTMF(), AudioTones(), AudioMorse(), AudioSegment()]
VIDEO_TOOLS: list[Tool] = [VideoSampleFrames(), VideoEvents(), VideoText(), VideoExtractAudio()]
EXTRA = {"image_crop": {"box": [0, 0, 10, 10]}}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("corrupt")
    rng = np.random.default_rng(11)
    img, _ = render_shapes(rng, 0.3)
    save_png(img, d / "good.png")
    save_jpeg(img, d / "good.jpg")
    x, _ = render_beeps(rng, 0.1, count=2)
    save_wav(x, d / "good.wav")
    render_video(rng, 0.2, d / "good.mp4", seconds=1.0, text_mode="none")
    out = {
        "truncated_png": d / "truncated.png",
        "truncated_jpg": d / "truncated.jpg",
        "text_png": d / "notes.png",
        "empty_png": d / "empty.png",
        "bad_header_wav": d / "bad_header.wav",
        "no_data_wav": d / "no_data.wav",
        "bad_rate_wav": d / "bad_rate.wav",
        "text_wav": d / "text.wav",
        "empty_wav": d / "empty.wav",
        "empty_mp4": d / "empty.mp4",
        "text_mp4": d / "text.mp4",
        "truncated_mp4": d / "truncated.mp4",
        "missing": d / "does_not_exist.png",
        "good_mp4": d / "good.mp4",
    }
    png = (d / "good.png").read_bytes()
    out["truncated_png"].write_bytes(png[: len(png) // 2])
    jpg = (d / "good.jpg").read_bytes()
    out["truncated_jpg"].write_bytes(jpg[: len(jpg) // 3])
    out["text_png"].write_text("this is not a picture\n")
    out["empty_png"].write_bytes(b"")
    wav = (d / "good.wav").read_bytes()
    out["bad_header_wav"].write_bytes(b"JUNK" + wav[4:])
    out["no_data_wav"].write_bytes(wav[:36])  # RIFF + fmt chunk, no data chunk
    out["bad_rate_wav"].write_bytes(wav[:24] + struct.pack("<I", 0) + wav[28:])
    out["text_wav"].write_text("RIFF? no.\n")
    out["empty_wav"].write_bytes(b"")
    out["empty_mp4"].write_bytes(b"")
    out["text_mp4"].write_text("not a movie at all\n" * 10)
    mp4 = (d / "good.mp4").read_bytes()
    out["truncated_mp4"].write_bytes(mp4[: len(mp4) // 2])
    return out


def _check(tool: Tool, path: Path, *needles: str) -> None:
    obs = tool(path=str(path), **EXTRA.get(tool.name, {}))
    assert not obs.ok, f"{tool.name} accepted {path.name}: {obs.text}"
    assert obs.error and obs.text.startswith(f"[{tool.name} failed]")
    low = obs.error.lower()
    assert any(n in low for n in needles), f"{tool.name} on {path.name}: unclear message {obs.error!r}"


@pytest.mark.parametrize("tool", IMAGE_TOOLS, ids=lambda t: t.name)
def test_image_tools_refuse_bad_files(tool: Tool, files: dict[str, Path]) -> None:
    _check(tool, files["truncated_png"], "truncated", "corrupt")
    _check(tool, files["truncated_jpg"], "truncated", "corrupt")
    _check(tool, files["text_png"], "not an image")
    _check(tool, files["empty_png"], "empty")
    _check(tool, files["missing"], "not found")
    _check(tool, files["bad_header_wav"], "not an image")


@pytest.mark.parametrize("tool", AUDIO_TOOLS, ids=lambda t: t.name)
def test_audio_tools_refuse_bad_files(tool: Tool, files: dict[str, Path]) -> None:
    _check(tool, files["bad_header_wav"], "not a wav", "riff")
    _check(tool, files["no_data_wav"], "no data chunk")
    _check(tool, files["bad_rate_wav"], "invalid")
    _check(tool, files["text_wav"], "not a wav")
    _check(tool, files["empty_wav"], "empty")
    _check(tool, files["missing"], "not found")
    _check(tool, files["truncated_png"], "not a wav")


@pytest.mark.parametrize("tool", VIDEO_TOOLS, ids=lambda t: t.name)
def test_video_tools_refuse_bad_files(tool: Tool, files: dict[str, Path]) -> None:
    _check(tool, files["empty_mp4"], "empty")
    _check(tool, files["text_mp4"], "cannot open", "no decodable", "corrupt")
    _check(tool, files["truncated_mp4"], "cannot open", "no decodable", "corrupt")
    _check(tool, files["missing"], "not found")
    _check(tool, files["text_png"], "cannot open", "no decodable", "corrupt")


def test_missing_argument_and_bad_options(files: dict[str, Path]) -> None:
    for tool in IMAGE_TOOLS + AUDIO_TOOLS + VIDEO_TOOLS:
        obs = tool()
        assert not obs.ok and "missing required argument" in (obs.error or "")
    good_png, good_mp4 = files["text_png"].with_name("good.png"), files["good_mp4"]
    obs = ImageCountObjects()(path=str(good_png), colour="octarine")
    assert not obs.ok and "valid:" in (obs.error or "")
    obs = ImageCrop()(path=str(good_png), box=[500, 500, 600, 600])
    assert not obs.ok and "outside" in (obs.error or "")
    obs = AudioSegment()(path=str(good_png.with_name("good.wav")), start=2.0, end=1.0)
    assert not obs.ok and "bad time range" in (obs.error or "")
    obs = VideoSampleFrames()(path=str(good_mp4), times=[99.0])
    assert not obs.ok and "outside the video" in (obs.error or "")


def test_extract_audio_explains_a_silent_video(files: dict[str, Path]) -> None:
    obs = VideoExtractAudio()(path=str(files["good_mp4"]))
    assert not obs.ok
    assert "no audio stream" in (obs.error or "") and "vide" in (obs.error or "")


def test_tiny_and_odd_but_valid_inputs_do_not_crash(tmp_path: Path) -> None:
    from PIL import Image

    tiny = tmp_path / "tiny.png"
    Image.new("RGB", (3, 3), (255, 255, 255)).save(tiny)
    for tool in IMAGE_TOOLS:
        obs = tool(path=str(tiny), **EXTRA.get(tool.name, {"box": [0, 0, 3, 3]}))
        assert isinstance(obs.ok, bool) and obs.text
    silent = tmp_path / "silent.wav"
    silent.write_bytes(wav_bytes(np.zeros(1600, dtype=np.int16), 16000))
    for tool in AUDIO_TOOLS:
        obs = tool(path=str(silent))
        assert obs.ok, obs.text
    assert AudioTones()(path=str(silent)).data["count"] == 0
    assert AudioDTMF()(path=str(silent)).data["digits"] == ""
