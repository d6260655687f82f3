"""Fast vs careful variants of the image tools: media that separates them, latency, confidence, mode."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageDraw

from orchestra.tools.image import ImageCountObjects, ImageOCR, ImageReadChart
from orchestra.world import image as wimage

LABELS = ["Vuga", "Tremo", "Dask", "Pelin"]


@pytest.fixture(scope="module")
def media(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, dict]]:
    d = tmp_path_factory.mktemp("variants")
    out: dict[str, tuple[Path, dict]] = {}
    # a small sign rotated by ~12 degrees at a hard level: the raw single pass does not deskew it
    img, truth = wimage.render_sign(np.random.default_rng(2), "Gate 47", 0.5)
    wimage.save_png(img, d / "sign.png")
    out["sign"] = (d / "sign.png", truth)
    # a chart shrunk to a small screenshot: native-scale tick OCR and whole-pixel bar tops are off
    img, truth = wimage.render_chart(np.random.default_rng(11), 0.5, "bar", labels=LABELS)
    wimage.save_png(img, d / "chart.png")
    out["chart"] = (d / "chart.png", truth)
    # two touching shapes of different colours plus a separate one: one blob for a single threshold
    img = Image.new("RGB", (320, 200), (235, 235, 228))
    dr = ImageDraw.Draw(img)
    dr.rectangle((60, 70, 110, 120), fill=(215, 35, 35))  # red square
    dr.ellipse((110, 70, 160, 120), fill=(35, 75, 215))  # blue circle touching it
    dr.polygon([(250, 60), (215, 130), (285, 130)], fill=(35, 155, 55))  # green triangle
    img.save(d / "touching.png")
    counts = {"red": {"square": 1}, "blue": {"circle": 1}, "green": {"triangle": 1}}
    out["touching"] = (d / "touching.png", {"counts": counts})
    # a rounded square whose fill ratio lies between a square's and a circle's, and a clear circle
    img = Image.new("RGB", (320, 200), (235, 235, 228))
    dr = ImageDraw.Draw(img)
    dr.rounded_rectangle((60, 60, 140, 140), radius=27, fill=(215, 35, 35))
    dr.ellipse((200, 70, 260, 130), fill=(35, 75, 215))
    img.save(d / "rounded.png")
    out["rounded"] = (d / "rounded.png", {})
    return out


def _values_ok(got: list[float], want: list[int]) -> bool:
    return len(got) == len(want) and all(abs(g - w) <= 0.02 * w for g, w in zip(got, want, strict=True))


def test_careful_ocr_reads_the_rotated_sign_fast_misses(
    media: dict, best_latency: Callable[..., float]
) -> None:
    path, truth = media["sign"]
    assert abs(truth["rotation_deg"]) > 10 and truth["level"] == 0.5
    careful, fast = ImageOCR()(path=str(path)), ImageOCR()(path=str(path), mode="fast")
    assert careful.ok and careful.data["text"] == "Gate 47" and careful.data["mode"] == "careful"
    assert fast.ok and fast.data["text"] != "Gate 47" and fast.data["mode"] == "fast"
    assert fast.data["confidence"] < 0.6 <= careful.data["confidence"] <= 1.0
    assert best_latency(ImageOCR(), path, "fast") < best_latency(ImageOCR(), path, "careful")


def test_careful_shapes_split_touching_colours_fast_merges(media: dict) -> None:
    path, truth = media["touching"]
    careful = ImageCountObjects()(path=str(path))
    fast = ImageCountObjects()(path=str(path), mode="fast")
    assert careful.ok and careful.data["counts"] == truth["counts"] and careful.data["mode"] == "careful"
    assert fast.ok and fast.data["counts"] != truth["counts"] and fast.data["mode"] == "fast"
    assert fast.data["confidence"] < careful.data["confidence"]
    assert 0.0 <= fast.data["confidence"] < 0.6 <= careful.data["confidence"] <= 1.0
    t_fast = min(ImageCountObjects()(path=str(path), mode="fast").latency_s for _ in range(3))
    t_careful = min(ImageCountObjects()(path=str(path)).latency_s for _ in range(3))
    assert t_fast < t_careful


def test_a_count_is_unsure_only_where_the_question_depends_on_an_unsure_reading(media: dict) -> None:
    """The fast count cannot tell the rounded square's shape: asked for squares it says so; asked
    for red things (any shape) or for blue circles the shape of the red one does not matter."""
    path, _ = media["rounded"]
    tool = ImageCountObjects()
    by_shape = tool(path=str(path), mode="fast", shape="square")
    by_colour = tool(path=str(path), mode="fast", colour="red")
    other = tool(path=str(path), mode="fast", colour="blue", shape="circle")
    assert by_colour.ok and by_colour.data["count"] == 1
    assert by_shape.data["confidence"] < 0.6 <= by_colour.data["confidence"]
    assert other.data["count"] == 1 and other.data["confidence"] >= 0.6


def test_careful_chart_reads_the_small_chart_fast_is_off(
    media: dict, best_latency: Callable[..., float]
) -> None:
    path, truth = media["chart"]
    assert truth["scale"] < 1.0
    careful = ImageReadChart()(path=str(path))
    fast = ImageReadChart()(path=str(path), mode="fast")
    assert careful.ok and _values_ok(careful.data["values"], truth["values"])
    assert fast.ok and not _values_ok(fast.data["values"], truth["values"])
    assert (careful.data["mode"], fast.data["mode"]) == ("careful", "fast")
    assert fast.data["confidence"] < 0.6 <= careful.data["confidence"] <= 1.0
    assert len(fast.data["value_confidences"]) == len(fast.data["values"])
    assert best_latency(ImageReadChart(), path, "fast") < best_latency(ImageReadChart(), path, "careful")


@pytest.mark.parametrize("tool", [ImageOCR, ImageCountObjects, ImageReadChart])
def test_mode_is_declared_and_validated(media: dict, tool: type) -> None:
    prop = tool.input_schema["properties"]["mode"]
    assert prop["type"] == "string" and prop["enum"] == ["fast", "careful"]
    obs = tool()(path=str(media["sign"][0]), mode="turbo")
    assert not obs.ok and "turbo" in (obs.error or "")


def test_renders_are_deterministic_and_record_the_level() -> None:
    for render in (
        lambda rng: wimage.render_sign(rng, "Gate 47", 0.4),
        lambda rng: wimage.render_shapes(rng, 0.4),
        lambda rng: wimage.render_chart(rng, 0.4, "line"),
    ):
        (a, ta), (b, tb) = render(np.random.default_rng(5)), render(np.random.default_rng(5))
        assert wimage.image_bytes(a, "png") == wimage.image_bytes(b, "png") and ta == tb
        assert ta["level"] == 0.4
