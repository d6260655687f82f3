"""Perception tools on media from the world's renderers and on media drawn independently here."""

from __future__ import annotations

import struct
from pathlib import Path

import cv2
import numpy as np
import pytest
from PIL import Image, ImageDraw, ImageFont

from orchestra.tools.audio import MORSE, AudioDTMF, AudioMorse, AudioSegment, AudioTones
from orchestra.tools.image import ImageCountObjects, ImageCrop, ImageDescribe, ImageOCR, ImageReadChart
from orchestra.tools.media import load_wav
from orchestra.tools.video import VideoEvents, VideoSampleFrames, VideoText
from orchestra.world import audio as waudio
from orchestra.world import image as wimage
from orchestra.world.video import render_video


def _font(name: str, size: int) -> ImageFont.FreeTypeFont:
    import matplotlib

    return ImageFont.truetype(str(Path(matplotlib.get_data_path()) / "fonts" / "ttf" / name), size)


# ---------------------------------------------------------------- world-rendered media


@pytest.fixture(scope="module")
def world_media(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, dict]]:
    d = tmp_path_factory.mktemp("world_media")
    rng = np.random.default_rng(2024)
    out: dict[str, tuple[Path, dict]] = {}
    for key, text in (("sign_name", "Brado Tisman"), ("sign_upper", "KEZAR"), ("sign_number", "4817")):
        img, truth = wimage.render_sign(rng, text, 0.3)
        wimage.save_jpeg(img, d / f"{key}.jpg")
        out[key] = (d / f"{key}.jpg", truth)
    img, truth = wimage.render_shapes(rng, 0.3)
    wimage.save_png(img, d / "shapes.png")
    out["shapes"] = (d / "shapes.png", truth)
    for kind in ("bar", "line"):
        img, truth = wimage.render_chart(
            rng, 0.3, kind, labels=["Vuga", "Tremo", "Dask", "Pelin"] if kind == "bar" else None
        )
        wimage.save_png(img, d / f"chart_{kind}.png")
        out[f"chart_{kind}"] = (d / f"chart_{kind}.png", truth)
    for key, (x, truth) in {
        "dtmf": waudio.render_dtmf(rng, "80417", 0.1),
        "beeps": waudio.render_beeps(rng, 0.1, count=5, freq_hz=700),
        "morse": waudio.render_morse(rng, "ZODRER 42", 0.1),
    }.items():
        waudio.save_wav(x, d / f"{key}.wav")
        out[key] = (d / f"{key}.wav", truth)
    truth = render_video(rng, 0.2, d / "video.mp4", text_mode="scoreboard", require=("color_change",))
    out["video"] = (d / "video.mp4", truth)
    return out


@pytest.mark.parametrize("key", ["sign_name", "sign_upper", "sign_number"])
def test_ocr_reads_world_signs(world_media: dict, key: str) -> None:
    path, truth = world_media[key]
    obs = ImageOCR()(path=str(path))
    assert obs.ok, obs.text
    assert obs.data["text"] == truth["text"]
    assert obs.data["confidence"] >= 0.6 and obs.data["mode"] == "careful"


def test_shape_counts_match_world_truth(world_media: dict) -> None:
    path, truth = world_media["shapes"]
    obs = ImageCountObjects()(path=str(path))
    assert obs.ok and obs.data["counts"] == truth["counts"]
    colour = next(iter(truth["counts"]))
    one = ImageCountObjects()(path=str(path), colour=colour)
    assert one.data["count"] == sum(truth["counts"][colour].values())


@pytest.mark.parametrize("kind", ["bar", "line"])
def test_chart_values_match_world_truth(world_media: dict, kind: str) -> None:
    path, truth = world_media[f"chart_{kind}"]
    obs = ImageReadChart()(path=str(path))
    assert obs.ok, obs.text
    assert obs.data["kind"] == kind and obs.data["labels"] == truth["labels"]
    assert obs.data["values"] == pytest.approx(truth["values"], rel=0.02)
    label = truth["labels"][1]
    one = ImageReadChart()(path=str(path), label=label)
    assert one.data["value"] == pytest.approx(truth["values"][1], rel=0.02)


def test_audio_tools_on_world_audio(world_media: dict) -> None:
    assert AudioDTMF()(path=str(world_media["dtmf"][0])).data["digits"] == "80417"
    path, truth = world_media["beeps"]
    obs = AudioTones()(path=str(path))
    assert obs.data["count"] == 5
    for tone, onset, dur in zip(obs.data["tones"], truth["onsets_s"], truth["durations_s"], strict=True):
        assert tone["freq_hz"] == pytest.approx(700, rel=0.01)
        assert tone["start"] == pytest.approx(onset, abs=0.02) and tone["duration"] == pytest.approx(
            dur, abs=0.02
        )
    assert AudioMorse()(path=str(world_media["morse"][0])).data["text"] == "ZODRER 42"


def test_video_tools_on_world_video(world_media: dict, tmp_path: Path) -> None:
    path, truth = world_media["video"]
    events = VideoEvents()(path=str(path))
    assert events.ok, events.text
    for e in truth["events"]:
        kind = "colour_change" if e["kind"] == "color_change" else e["kind"]
        assert any(g["kind"] == kind and abs(g["t"] - e["t"]) <= 0.5 for g in events.data["events"]), e
    text = VideoText()(path=str(path))
    got = [(t["text"].replace(" ", ""), t["t_start"]) for t in text.data["timeline"]]
    want = [(t["text"].replace(" ", ""), t["t_start"]) for t in truth["text"]]
    assert [g[0] for g in got] == [w[0] for w in want]
    assert all(abs(g[1] - w[1]) <= 0.5 for g, w in zip(got, want, strict=True))
    frames = VideoSampleFrames()(path=str(path), times=[0.0, 2.5], out_dir=str(tmp_path))
    assert frames.ok and [f["t"] for f in frames.data["frames"]] == [0.0, 2.5]
    assert all(Path(f["path"]).is_file() for f in frames.data["frames"])


def test_crop_segment_and_describe_write_real_files(world_media: dict, tmp_path: Path) -> None:
    path, truth = world_media["sign_number"]
    w, h = truth["size"]
    crop = ImageCrop()(path=str(path), box=[0, 0, 1.0, 1.0], zoom=1.5, out_path=str(tmp_path / "c.png"))
    assert crop.ok and crop.data["text"] == "4817"
    assert Image.open(tmp_path / "c.png").size == (int(w * 1.5), int(h * 1.5))
    desc = ImageDescribe()(path=str(world_media["shapes"][0]))
    assert desc.ok and desc.data["object_count"] == len(world_media["shapes"][1]["shapes"])
    bpath, btruth = world_media["beeps"]
    t0 = btruth["onsets_s"][1] - 0.05
    seg = AudioSegment()(path=str(bpath), start=t0, end=t0 + 0.4, out_path=str(tmp_path / "s.wav"))
    assert seg.ok and load_wav(tmp_path / "s.wav").duration == pytest.approx(0.4, abs=0.002)
    assert len(seg.data["tones"]) >= 1 and seg.data["dominant_hz"] == pytest.approx(700, rel=0.01)


# ---------------------------------------------------------------- independently drawn media


def test_ocr_on_independent_renders(tmp_path: Path) -> None:
    """Hershey vector font via OpenCV (a font the world never uses), white on black, rotated; and a serif
    italic on a textured background."""
    img = np.zeros((200, 520, 3), np.uint8)
    cv2.putText(img, "GATE 27B", (40, 120), cv2.FONT_HERSHEY_DUPLEX, 2.2, (255, 255, 255), 4, cv2.LINE_AA)
    m = cv2.getRotationMatrix2D((260, 100), -7, 1.0)
    img = cv2.warpAffine(img, m, (520, 200))
    cv2.imwrite(str(tmp_path / "hershey.png"), img)
    assert ImageOCR()(path=str(tmp_path / "hershey.png")).data["text"] == "GATE 27B"

    rng = np.random.default_rng(5)
    bg = (rng.integers(150, 200, (160, 600, 3))).astype(np.uint8)
    pil = Image.fromarray(bg)
    ImageDraw.Draw(pil).text(
        (30, 40), "Quillon Harbour 1907", font=_font("DejaVuSerif-Italic.ttf", 44), fill=(10, 10, 60)
    )
    pil = pil.rotate(4, resample=Image.Resampling.BICUBIC, fillcolor=(170, 170, 170))
    pil.save(tmp_path / "serif.jpg", quality=80)
    assert ImageOCR()(path=str(tmp_path / "serif.jpg")).data["text"] == "Quillon Harbour 1907"


def test_shapes_on_independent_render(tmp_path: Path) -> None:
    img = np.full((360, 480, 3), (40, 40, 40), np.uint8)  # dark background, unlike the world's
    cv2.circle(img, (80, 80), 40, (30, 215, 240), -1, cv2.LINE_AA)  # yellow (BGR)
    cv2.circle(img, (200, 80), 25, (60, 60, 220), -1, cv2.LINE_AA)  # red
    cv2.rectangle(img, (300, 40), (440, 110), (60, 60, 220), -1)  # red rectangle
    cv2.fillPoly(img, [np.array([(80, 180), (30, 280), (130, 280)], np.int32)], (230, 120, 40), cv2.LINE_AA)
    star = [
        (
            330 + (50 if i % 2 == 0 else 20) * np.cos(-np.pi / 2 + i * np.pi / 5),
            250 + (50 if i % 2 == 0 else 20) * np.sin(-np.pi / 2 + i * np.pi / 5),
        )
        for i in range(10)
    ]
    cv2.fillPoly(img, [np.array(star, np.int32)], (60, 180, 60), cv2.LINE_AA)
    cv2.rectangle(img, (180, 200), (250, 270), (230, 120, 40), -1)  # blue square
    cv2.imwrite(str(tmp_path / "shapes.png"), img)
    obs = ImageCountObjects()(path=str(tmp_path / "shapes.png"))
    assert obs.ok
    assert obs.data["counts"] == {
        "blue": {"triangle": 1, "square": 1},
        "red": {"circle": 1, "rectangle": 1},
        "green": {"star": 1},
        "yellow": {"circle": 1},
    }
    assert ImageCountObjects()(path=str(tmp_path / "shapes.png"), colour="red").data["count"] == 2


def test_chart_drawn_by_matplotlib(tmp_path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    values = [12.0, 37.5, 25.0, 44.0]
    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    ax.bar(["North", "South", "East", "West"], values, color="tab:green")
    ax.set_ylim(0, 50)
    ax.set_title("Quarterly units")
    fig.savefig(tmp_path / "mpl.png")
    plt.close(fig)
    obs = ImageReadChart()(path=str(tmp_path / "mpl.png"))
    assert obs.ok, obs.text
    assert obs.data["kind"] == "bar" and obs.data["labels"] == ["North", "South", "East", "West"]
    assert obs.data["values"] == pytest.approx(values, abs=0.02 * 50)


def _wav24_stereo(path: Path, x: np.ndarray, rate: int) -> None:
    """A 24-bit stereo WAV written by hand (the world only writes 16-bit mono)."""
    v = np.clip(np.rint(x * (2**23 - 1)), -(2**23), 2**23 - 1).astype(np.int32)
    st = np.repeat(v, 2)
    raw = np.stack([st & 0xFF, (st >> 8) & 0xFF, (st >> 16) & 0xFF], axis=1).astype(np.uint8).tobytes()
    fmt = struct.pack("<HHIIHH", 1, 2, rate, rate * 6, 6, 24)
    path.write_bytes(
        b"RIFF"
        + struct.pack("<I", 36 + len(raw))
        + b"WAVE"
        + b"fmt "
        + struct.pack("<I", 16)
        + fmt
        + b"data"
        + struct.pack("<I", len(raw))
        + raw
    )


def test_audio_on_independent_renders(tmp_path: Path) -> None:
    rate = 44100
    rng = np.random.default_rng(9)

    def tone(freqs: list[float], dur: float) -> np.ndarray:
        t = np.arange(int(dur * rate)) / rate
        return sum(0.3 * np.sin(2 * np.pi * f * t) for f in freqs) / len(freqs)

    def gap(dur: float) -> np.ndarray:
        return np.zeros(int(dur * rate))

    keys = {"9": (852, 1477), "#": (941, 1477), "1": (697, 1209), "D": (941, 1633)}
    x = np.concatenate([gap(0.1)] + [p for k in "91#1D" for p in (tone(list(keys[k]), 0.07), gap(0.06))])
    _wav24_stereo(tmp_path / "dtmf.wav", x + rng.normal(0, 0.02, len(x)), rate)
    assert AudioDTMF()(path=str(tmp_path / "dtmf.wav")).data["digits"] == "91#1D"

    pitches = [440.0, 880.0, 1250.0]
    x = np.concatenate([gap(0.2)] + [p for f in pitches for p in (tone([f], 0.3), gap(0.2))])
    _wav24_stereo(tmp_path / "beeps.wav", x, rate)
    tones = AudioTones()(path=str(tmp_path / "beeps.wav")).data["tones"]
    assert [round(t["freq_hz"]) for t in tones] == [440, 880, 1250]
    assert [t["start"] for t in tones] == pytest.approx([0.2, 0.7, 1.2], abs=0.01)

    unit, code = 0.05, [MORSE_INV[c] for c in "SOS7"]
    parts = [gap(0.3)]
    for letter in code:
        for sym in letter:
            parts += [tone([600.0], unit * (1 if sym == "." else 3)), gap(unit)]
        parts[-1] = gap(3 * unit)
    x = np.concatenate(parts)
    _wav24_stereo(tmp_path / "morse.wav", x + rng.normal(0, 0.03, len(x)), rate)
    assert AudioMorse()(path=str(tmp_path / "morse.wav")).data["text"] == "SOS7"


MORSE_INV = {v: k for k, v in MORSE.items()}


def test_video_on_independent_render(tmp_path: Path) -> None:
    """320x240 at 12 fps drawn with OpenCV: a circle turns from red to blue at 1.5 s, a square leaves at
    2.0 s, a triangle slides right from 1.0 s to 2.0 s; a Hershey-font caption appears at 1.0 s."""
    path, fps, n = tmp_path / "indep.mp4", 12, 36
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), float(fps), (320, 240))
    for i in range(n):
        t = i / fps
        f = np.full((240, 320, 3), (250, 250, 250), np.uint8)
        cv2.circle(f, (60, 60), 22, (40, 40, 220) if t < 1.5 else (220, 80, 30), -1, cv2.LINE_AA)
        if t < 2.0:
            cv2.rectangle(f, (240, 40), (280, 80), (40, 160, 40), -1)
        x = 60 + int(120 * min(1.0, max(0.0, t - 1.0)))
        cv2.fillPoly(
            f, [np.array([(x, 120), (x - 22, 160), (x + 22, 160)], np.int32)], (0, 140, 255), cv2.LINE_AA
        )
        if t >= 1.0:
            cv2.putText(f, "EXIT 9", (100, 215), cv2.FONT_HERSHEY_SIMPLEX, 1.2, (20, 20, 20), 3, cv2.LINE_AA)
        writer.write(f)
    writer.release()
    ev = VideoEvents()(path=str(path)).data["events"]

    def near(kind: str, t: float) -> bool:
        return any(e["kind"] == kind and abs(e["t"] - t) <= 0.5 for e in ev)

    assert near("colour_change", 1.5) and near("disappear", 2.0) and near("move", 1.0), ev
    change = next(e for e in ev if e["kind"] == "colour_change")
    assert (change["from"], change["colour"]) == ("red", "blue")
    timeline = VideoText()(path=str(path)).data["timeline"]
    assert [t["text"] for t in timeline] == ["EXIT 9"] and abs(timeline[0]["t_start"] - 1.0) <= 0.5
