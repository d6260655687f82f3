"""The fast and careful variants of the video tools on world videos made to separate them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from orchestra.tools.base import Observation
from orchestra.tools.video import VideoEvents, VideoText
from orchestra.world.video import render_video


def _moved(obs: Observation, truth: dict) -> bool:
    """Every move of the truth found (same shape, start within 0.5 s)."""
    moves = [e for e in truth["events"] if e["kind"] == "move"]
    return bool(moves) and all(
        any(
            g["kind"] == "move" and g["object"].split("#")[0] == e["object"] and abs(g["t"] - e["t"]) <= 0.5
            for g in obs.data["events"]
        )
        for e in moves
    )


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, dict[str, Observation]]:
    """A level-1 video whose objects sweep across the frame in under half a second."""
    path = tmp_path_factory.mktemp("video_variants") / "sweep.mp4"
    truth = render_video(
        np.random.default_rng(2), 1.0, path, text_mode="none", n_objects=2, require=("move",)
    )
    return path, truth, {m: VideoEvents()(path=str(path), mode=m) for m in ("fast", "careful")}


@pytest.fixture(scope="module")
def brief_caption(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, dict[str, Observation]]:
    """A level-1 video whose caption is shown for under half a second, in faint small type."""
    path = tmp_path_factory.mktemp("video_variants") / "caption.mp4"
    truth = render_video(
        np.random.default_rng(4), 1.0, path, text_mode="caption", caption="MARLOW", n_objects=2
    )
    return path, truth, {m: VideoText()(path=str(path), mode=m) for m in ("fast", "careful")}


def test_level_is_recorded_in_truth_and_makes_the_clip_harder(tmp_path: Path) -> None:
    easy = render_video(
        np.random.default_rng(2), 0.0, tmp_path / "easy.mp4", text_mode="caption", caption="AB"
    )
    hard = render_video(
        np.random.default_rng(2), 1.0, tmp_path / "hard.mp4", text_mode="caption", caption="AB"
    )
    assert (easy["level"], hard["level"]) == (0.0, 1.0)
    assert hard["noise_sigma"] > easy["noise_sigma"] and hard["text_px"] < easy["text_px"]
    shown = [t["t_end"] - t["t_start"] for t in (easy["text"][0], hard["text"][0])]
    assert shown[1] < shown[0]
    again = render_video(
        np.random.default_rng(2), 1.0, tmp_path / "again.mp4", text_mode="caption", caption="AB"
    )
    assert (tmp_path / "again.mp4").read_bytes() == (tmp_path / "hard.mp4").read_bytes() and again == hard


def test_careful_follows_a_fast_sweep_that_fast_sampling_loses(sweep: tuple) -> None:
    _, truth, obs = sweep
    assert _moved(obs["careful"], truth)
    assert not _moved(obs["fast"], truth)
    assert obs["fast"].data["confidence"] < 0.6 <= obs["careful"].data["confidence"]
    assert obs["fast"].data["frames_sampled"] < obs["careful"].data["frames_sampled"]


def test_careful_reads_a_brief_caption_that_fast_sampling_misses(brief_caption: tuple) -> None:
    _, truth, obs = brief_caption
    careful, fast = obs["careful"].data, obs["fast"].data
    assert [t["text"] for t in careful["timeline"]] == ["MARLOW"]
    assert abs(careful["timeline"][0]["t_start"] - truth["text"][0]["t_start"]) <= 0.5
    assert [t["text"] for t in fast["timeline"]] != ["MARLOW"]
    assert fast["confidence"] < 0.6 <= careful["confidence"]


def test_fast_is_faster_on_the_same_file(
    sweep: tuple, brief_caption: tuple, best_latency: Callable[..., float]
) -> None:
    for (path, _, _), tool in ((sweep, VideoEvents()), (brief_caption, VideoText())):
        assert best_latency(tool, path, "fast", runs=2) < best_latency(tool, path, "careful", runs=2)


def test_mode_is_reported_defaults_to_careful_and_is_validated(sweep: tuple) -> None:
    path, _, obs = sweep
    assert obs["fast"].data["mode"] == "fast" and obs["careful"].data["mode"] == "careful"
    for tool in (VideoEvents(), VideoText()):
        assert tool.input_schema["properties"]["mode"]["enum"] == ["fast", "careful"]
        bad = tool(path=str(path), mode="slow")
        assert not bad.ok and "unknown mode" in (bad.error or "")
    default = VideoEvents()(path=str(path))
    assert default.data["mode"] == "careful"
    assert default.data["events"] == obs["careful"].data["events"]
    assert 0.0 <= default.data["confidence"] <= 1.0


def test_fast_times_a_colour_change_to_the_frame_between_its_samples(small_world: Path) -> None:
    """Sparse sampling finds the change; the frames between the two samples time it exactly."""
    import json

    from orchestra.tools.video import VideoEvents

    media = [json.loads(x) for x in (small_world / "truth" / "media.jsonl").read_text().splitlines()]
    tool, checked = VideoEvents(), 0
    for m in media:
        changes = [e for e in m["facts"].get("events", []) if e["kind"] == "color_change"]
        if m["modality"] != "video" or len(changes) != 1:
            continue
        obs = tool(path=str(small_world / "media" / m["path"]), mode="fast")
        got = [e for e in obs.data["events"] if e["kind"] == "colour_change"]
        if obs.ok and len(got) == 1:
            assert got[0]["t_error_s"] == 0.0 and abs(got[0]["t"] - changes[0]["t"]) < 1e-6, (got, changes)
            checked += 1
    assert checked >= 1


def test_fast_confirms_a_caption_seen_in_one_sample_on_a_neighbouring_frame(tmp_path: Path) -> None:
    """A 0.5 s caption falls in one fast sample: unconfirmed it scores 0.55 of its reading; read
    the same again on a frame a quarter gap away, it is sure (and right)."""
    from orchestra.tools.video import _frames, text_timeline

    path = tmp_path / "half_second.mp4"
    truth = render_video(
        np.random.default_rng(2), 0.9, path, text_mode="caption", caption="MARLOW", n_objects=2
    )
    assert truth["text"][0]["t_end"] - truth["text"][0]["t_start"] <= 0.5
    obs = VideoText()(path=str(path), mode="fast")
    assert [t["text"] for t in obs.data["timeline"]] == ["MARLOW"]
    assert obs.data["confidence_why"]["confirmed_by_neighbours"] == 1
    assert obs.data["timeline"][0]["confidence"] == obs.data["confidence"] >= 0.6
    info, frames, times = _frames(str(path), "fast", 8.0)
    _, alone, why = text_timeline(frames, times, 1.0 / info.fps, info.duration, "fast")
    assert why["confirmed_by_neighbours"] == 0 and alone <= 0.55
