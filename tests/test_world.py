"""The procedural world: determinism, replay of every seed, media validity, no answer leaks, CLI."""

from __future__ import annotations

import hashlib
import io
import json
import re
import struct
import time
import wave
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from orchestra import espeak
from orchestra.config import WorldParams
from orchestra.errors import WorldError
from orchestra.schemas import ComputeStep, read_tasks_json
from orchestra.text import format_value
from orchestra.world import audio, generate_world, image
from orchestra.world.cli import app
from orchestra.world.program import safe_eval
from orchestra.world.replay import replay
from orchestra.world.video import render_video

SMALL_WORLD = WorldParams(n_seeds=24, n_entities=60)  # what conftest's small_world fixture generates


def tree_hashes(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def default_world(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], float]:
    out = tmp_path_factory.mktemp("default_world")
    start = time.perf_counter()
    summary = generate_world(WorldParams(), out)
    return out, summary, time.perf_counter() - start


# --- determinism -------------------------------------------------------------------------------------


def test_same_params_give_identical_bytes_and_another_seed_differs(small_world: Path, tmp_path: Path) -> None:
    again = tmp_path / "again"
    generate_world(SMALL_WORLD, again)
    first = tree_hashes(small_world)
    assert first == tree_hashes(again)
    other = tmp_path / "other"
    generate_world(SMALL_WORLD.model_copy(update={"seed": 8}), other)
    second = tree_hashes(other)
    assert first["tasks.json"] != second["tasks.json"]
    assert first["kb/pages.jsonl"] != second["kb/pages.jsonl"]
    assert not set(first.values()) & {h for k, h in second.items() if k.startswith("media/")}


def test_refuses_to_overwrite_an_existing_world(small_world: Path) -> None:
    with pytest.raises(WorldError, match="already holds world output"):
        generate_world(SMALL_WORLD, small_world)


# --- replay ------------------------------------------------------------------------------------------


def test_every_small_world_seed_replays_to_its_answer(small_world: Path) -> None:
    tasks = read_tasks_json(small_world / "tasks.json")
    assert len(tasks) == 24
    for task in tasks:
        assert task.solution_program
        assert replay(task, small_world) == task.answer


def test_default_world_every_seed_replays_within_budget(default_world: tuple[Path, dict, float]) -> None:
    out, summary, elapsed = default_world
    tasks = read_tasks_json(out / "tasks.json")
    assert summary["rows"] == len(tasks) == 300
    assert [replay(t, out) for t in tasks] == [t.answer for t in tasks]
    assert elapsed < 120, f"default world took {elapsed:.0f} s"
    assert summary["media_bytes"] <= 50 * 2**20
    dist = summary["distribution"]
    assert set(dist["task_type"]) == {"image", "audio", "image + audio", "video w/ audio"}
    assert dist["task_type"] == {"audio": 30, "image": 45, "image + audio": 120, "video w/ audio": 105}
    assert set(dist["category"]) == set(WorldParams().categories)
    assert set(dist["tool"]) == {"web_search", "page_browser", "code_executor"}


def test_replay_catches_an_inconsistent_program(small_world: Path) -> None:
    task = next(
        t
        for t in read_tasks_json(small_world / "tasks.json")
        if any(isinstance(s, ComputeStep) for s in t.solution_program or [])
    )
    steps = list(task.solution_program or [])
    i = next(i for i, s in enumerate(steps) if isinstance(s, ComputeStep))
    steps[i] = steps[i].model_copy(update={"value": steps[i].value + 1})
    with pytest.raises(WorldError, match="recorded"):
        replay(task.model_copy(update={"solution_program": steps}), small_world)
    wrong_input = task.model_copy(update={"omni_modal_input": []})
    with pytest.raises(WorldError, match="not in the world's media truth"):
        replay(wrong_input, small_world)


def test_safe_eval_allows_arithmetic_only() -> None:
    assert safe_eval("abs(v1 - v2) * 2", {"v1": 3, "v2": 10}) == 14
    assert safe_eval("round(v1 / v2)", {"v1": 7, "v2": 2}) == 4
    for bad in ("__import__('os')", "v1.real", "[v1]", "v3", "open('x')"):
        with pytest.raises(WorldError):
            safe_eval(bad, {"v1": 1})
    with pytest.raises(WorldError, match="not a number"):
        safe_eval("v1 + 1", {"v1": "Vuga"})
    assert format_value(12.0) == "12" and format_value(3) == "3" and format_value("Vuga") == "Vuga"


# --- the knowledge base ------------------------------------------------------------------------------


def test_pages_have_the_store_keys_and_near_namesakes(small_world: Path) -> None:
    pages = jsonl(small_world / "kb" / "pages.jsonl")
    entities = {e["id"]: e for e in jsonl(small_world / "truth" / "entities.jsonl")}
    assert all(set(p) == {"url", "title", "snippet", "text", "html"} for p in pages)
    assert all(re.fullmatch(r"https://world\.local/wiki/[a-z0-9_]+", p["url"]) for p in pages)
    assert len({p["title"].lower() for p in pages}) == len(pages) == len(entities)
    distractors = [e for e in entities.values() if e["distractor_of"]]
    assert len(distractors) == round(0.3 * 60)
    by_url = {p["url"]: p for p in pages}
    for d in distractors:
        base = entities[d["distractor_of"]]
        assert d["name"] != base["name"] and d["attributes"] != base["attributes"]
        assert f"Not to be confused with {d['name']}" in by_url[base["url"]]["text"]
    for e in entities.values():
        for key, value in e["attributes"].items():
            assert f": {value}\n" in by_url[e["url"]]["text"] + "\n", (e["name"], key)


def test_tasks_read_clearly_and_cite_their_pages(small_world: Path) -> None:
    pages = {p["url"] for p in jsonl(small_world / "kb" / "pages.jsonl")}
    for task in read_tasks_json(small_world / "tasks.json"):
        assert re.fullmatch(r"w7-\d{4}", str(task.id))
        assert task.question.endswith("?") and task.answer
        assert task.total_steps == len(task.solution_program or []) == len(task.annotated_solution or [])
        assert task.level in ("Easy", "Medium")
        for src in task.sources or []:
            assert src.url in pages and src.key_information
        assert {m.type for m in task.omni_modal_input} == set(
            task.task_type.replace(" w/", " +").split(" + ")
        )


# --- media validity and leaks ------------------------------------------------------------------------


def check_media(world: Path) -> int:
    records = jsonl(world / "truth" / "media.jsonl")
    for rec in records:
        path, facts = world / "media" / rec["path"], rec["facts"]
        if rec["modality"] == "image":
            with Image.open(path) as im:
                im.load()
                assert list(im.size) == facts["size"]
        elif rec["modality"] == "audio":
            with wave.open(str(path)) as w:
                assert (w.getframerate(), w.getnchannels(), w.getsampwidth()) == (16000, 1, 2)
                assert abs(w.getnframes() / 16000 - facts["duration_s"]) <= 1 / 16000
        else:
            cap = cv2.VideoCapture(str(path))
            assert cap.get(cv2.CAP_PROP_FPS) == facts["fps"]
            assert int(cap.get(cv2.CAP_PROP_FRAME_COUNT)) == facts["frame_count"]
            n = 0
            while cap.read()[0]:
                n += 1
            cap.release()
            assert n == facts["frame_count"]
    assert len(records) == sum(1 for p in (world / "media").rglob("*") if p.is_file())
    return len(records)


def test_small_world_media_decode_with_stated_rate_duration_and_frames(small_world: Path) -> None:
    assert check_media(small_world) > 24


def test_default_world_media_decode(default_world: tuple[Path, dict, float]) -> None:
    assert check_media(default_world[0]) == default_world[1]["media_files"]


def metadata_bytes(path: Path) -> bytes:
    """The parts of a media file that are not pixel/sample data."""
    data = path.read_bytes()
    if path.suffix == ".png":
        out, i = b"", 8
        while i < len(data):
            n, kind = struct.unpack(">I4s", data[i : i + 8])
            assert kind in (b"IHDR", b"IDAT", b"IEND"), kind
            out += data[i : i + 8 + n] if kind != b"IDAT" else b""
            i += 12 + n
        return out
    if path.suffix == ".jpg":
        assert b"Exif" not in data[:2000] and b"\xff\xfe" not in data[:2000]  # no EXIF, no COM segment
        return data[:600]
    if path.suffix == ".wav":
        with wave.open(io.BytesIO(data)):
            pass
        assert (
            data[12:16] == b"fmt "
            and data[36:40] == b"data"
            and len(data) == 44 + struct.unpack("<I", data[40:44])[0]
        )
        return data[:44]
    i = 0
    while i < len(data):
        n, kind = struct.unpack(">I4s", data[i : i + 8])
        if kind == b"moov":
            return data[i : i + n]
        i += n
    raise AssertionError(f"{path}: no moov box")


def test_media_names_and_metadata_reveal_no_answer(small_world: Path) -> None:
    tasks = read_tasks_json(small_world / "tasks.json")
    records = {r["id"]: r for r in jsonl(small_world / "truth" / "media.jsonl")}
    secrets = {t.answer for t in tasks} | {
        str(f.get("text"))
        for r in records.values()
        for f in [r["facts"]]
        if f.get("text") and isinstance(f["text"], str)
    }
    secrets |= {str(f["digits"]) for r in records.values() for f in [r["facts"]] if "digits" in f}
    for task in tasks:
        for m in task.omni_modal_input:
            assert re.fullmatch(r"(images|audios|videos)/[b-df-hj-np-tv-z]{12}\.(png|jpg|wav|mp4)", m.path)
            assert m.id == f"{m.type}_{Path(m.path).stem}"
            name = Path(m.path).stem.lower()  # the folder and extension are fixed by the pattern above
            assert not [s for s in secrets if s.lower() in name]
            meta = metadata_bytes(small_world / "media" / m.path).lower()
            assert not [s for s in secrets if len(s) >= 3 and s.lower().encode() in meta], m.path


# --- item-level renderers ----------------------------------------------------------------------------


def goertzel(x: np.ndarray, f: float) -> float:
    n = np.arange(len(x))
    return float(abs(np.sum(x * np.exp(-2j * np.pi * f * n / audio.SAMPLE_RATE))))


def test_dtmf_is_standard_and_decodable_by_goertzel() -> None:
    rng = np.random.default_rng(0)
    for digits in ("0123456789", "*#ABCD", "4071"):
        x, truth = audio.render_dtmf(rng, digits, noise=0.1)
        decoded = ""
        for onset, dur in zip(truth["onsets_s"], truth["durations_s"], strict=True):
            seg = x[int(onset * 16000) : int((onset + dur) * 16000)].astype(float)
            row = max(audio.DTMF_ROWS, key=lambda f: goertzel(seg, f))
            col = max(audio.DTMF_COLS, key=lambda f: goertzel(seg, f))
            decoded += audio.DTMF_KEYS[audio.DTMF_ROWS.index(row)][audio.DTMF_COLS.index(col)]
        assert decoded == digits


def envelope_runs(x: np.ndarray, min_gap: float = 0.03) -> list[tuple[float, float]]:
    """(onset, duration) of the loud stretches of ``x``, from a 10 ms RMS envelope."""
    hop = 160
    rms = np.sqrt(np.convolve(x.astype(float) ** 2, np.ones(hop) / hop, mode="same"))[:: hop // 4] / 32768
    on = rms > 0.5 * rms.max()
    runs, start = [], None
    for i, v in enumerate(np.append(on, False)):
        if v and start is None:
            start = i
        elif not v and start is not None:
            runs.append((start * hop / 4 / 16000, (i - start) * hop / 4 / 16000))
            start = None
    return runs


def test_beeps_and_morse_follow_their_truth() -> None:
    rng = np.random.default_rng(1)
    x, truth = audio.render_beeps(rng, noise=0.1, count=7, freq_hz=900)
    assert len(envelope_runs(x)) == truth["count"] == 7
    spectrum = np.abs(np.fft.rfft(x.astype(float)))
    assert abs(np.argmax(spectrum) * 16000 / len(x) - 900) < 5
    x, truth = audio.render_morse(rng, "Vuga 42", noise=0.1)
    assert truth["text"] == "VUGA 42" and truth["code"] == "...- ..- --. .- / ....- ..---"
    runs = envelope_runs(x)
    unit = truth["unit_s"]
    symbols = "".join("." if d < 2 * unit else "-" for _, d in runs)
    assert symbols == truth["code"].replace(" ", "").replace("/", "")


def test_image_renderers_are_deterministic_and_truthful() -> None:
    def render(seed: int) -> list[bytes]:
        rng = np.random.default_rng(seed)
        sign, _ = image.render_sign(rng, "Tamo Brezuran", 0.3)
        shapes, truth = image.render_shapes(rng, 0.3)
        chart, ctruth = image.render_chart(rng, 0.3, "bar", labels=["Vuga", "Kemo", "Tazi", "Bru"])
        assert sum(sum(c.values()) for c in truth["counts"].values()) == len(truth["shapes"])
        assert ctruth["labels"] == ["Vuga", "Kemo", "Tazi", "Bru"] and len(set(ctruth["values"])) == 4
        assert max(ctruth["values"]) <= ctruth["y_max"]
        return [
            image.image_bytes(sign, "jpg"),
            image.image_bytes(shapes, "png"),
            image.image_bytes(chart, "png"),
        ]

    assert render(3) == render(3) != render(4)


def test_shapes_do_not_overlap_and_have_their_colours() -> None:
    img, truth = image.render_shapes(np.random.default_rng(5), noise=0.0)
    px = np.asarray(img)
    for a in truth["shapes"]:
        assert tuple(px[a["cy"], a["cx"]]) == image.COLORS[a["color"]]
        for b in truth["shapes"]:
            if a is not b:
                assert (a["cx"] - b["cx"]) ** 2 + (a["cy"] - b["cy"]) ** 2 > (a["r"] + b["r"]) ** 2


def test_video_events_and_text_match_the_frames(tmp_path: Path) -> None:
    paths = [tmp_path / "a.mp4", tmp_path / "b.mp4"]
    truths = [
        render_video(np.random.default_rng(2), 0.2, p, text_mode="scoreboard", require=("color_change",))
        for p in paths
    ]
    assert paths[0].read_bytes() == paths[1].read_bytes()
    truth = truths[0]
    assert [t["text"] for t in truth["text"]] and all(t["role"] == "scoreboard" for t in truth["text"])
    cap = cv2.VideoCapture(str(paths[0]))
    frames = []
    while True:
        ok, frame = cap.read()
        if not ok:
            break
        frames.append(frame[:, :, ::-1])
    fps, checked = truth["fps"], 0
    for obj in truth["objects"]:
        if any(e["kind"] == "move" and e["object"] == obj["id"] for e in truth["events"]):
            continue
        color, visible_from = obj["color"], obj["visible_from"]
        gone = min(
            [e["t"] for e in truth["events"] if e["object"] == obj["id"] and e["kind"] == "disappear"],
            default=truth["duration_s"],
        )
        changes = {
            int(e["t"] * fps): e["color"]
            for e in truth["events"]
            if e["object"] == obj["id"] and e["kind"] == "color_change"
        }
        for i, frame in enumerate(frames):
            color = changes.get(i, color)
            pixel = frame[obj["y"], obj["x"]].astype(int)
            expected = image.COLORS[color] if visible_from <= i / fps < gone else truth["background"]
            assert np.abs(pixel - np.array(expected)).max() < 40, (obj["id"], i)
            checked += 1
    assert checked >= len(frames)


@pytest.mark.skipif(not espeak.available(), reason="espeak-ng is not installed")
def test_speech_channel_renders_when_espeak_exists() -> None:
    x, truth = audio.render_speech(np.random.default_rng(0), "412", noise=0.0)
    assert truth["kind"] == "speech" and len(x) / 16000 > 0.5 and np.abs(x).max() > 1000


# --- CLI ---------------------------------------------------------------------------------------------


def test_cli_generate_twice_gives_identical_trees_and_replays(tmp_path: Path) -> None:
    params = tmp_path / "params.yaml"
    params.write_text("seed:\n  world:\n    n_entities: 40\n")
    runner = CliRunner()
    trees = []
    for name in ("a", "b"):
        res = runner.invoke(
            app,
            [
                "generate",
                "--out",
                str(tmp_path / name),
                "--seed",
                "3",
                "--n-seeds",
                "8",
                "--params",
                str(params),
            ],
        )
        assert res.exit_code == 0, res.output
        assert "task_type" in res.output and "8 tasks" in res.output
        trees.append(tree_hashes(tmp_path / name))
    assert trees[0] == trees[1]
    assert json.loads((tmp_path / "a" / "tasks.json").read_text())[0]["id"] == "w3-0001"
    res = runner.invoke(
        app,
        ["generate", "--out", str(tmp_path / "a"), "--seed", "3", "--n-seeds", "8", "--params", str(params)],
    )
    assert res.exit_code == 0 and tree_hashes(tmp_path / "a") == trees[0]
    res = runner.invoke(app, ["replay", str(tmp_path / "a")])
    assert res.exit_code == 0 and "8 tasks replayed" in res.output
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "keep.txt").write_text("mine")
    res = runner.invoke(app, ["generate", "--out", str(tmp_path / "junk"), "--params", str(params)])
    assert res.exit_code == 2 and "refusing" in res.output
    assert (tmp_path / "junk" / "keep.txt").read_text() == "mine"
