"""Media reach the models: a provider that takes images, audio or video gets them as content parts over
real loopback HTTP, and the bytes it decodes are the files sent (or the scaled frames, for video)."""

from __future__ import annotations

import asyncio
import base64
import io
import json
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from orchestra.agent.serve import ScriptedResponder, start_server
from orchestra.backends.base import SubTaskInput
from orchestra.backends.openai_backend import OpenAIBackend
from orchestra.config import ProviderSpec
from orchestra.lm.clients import client_for
from orchestra.schemas import ModalInput, SubTask, Task, read_tasks_json


def _spec(url: str, **kw: Any) -> ProviderSpec:
    return ProviderSpec(kind="openai", base_url=url, model="m", max_retries=0, timeout_s=20, **kw)


def _run(spec: ProviderSpec, mods: dict[str, ModalInput], root: Path, goal: str = "look at #M1") -> Any:
    backend = OpenAIBackend("seer", client_for(spec), {"ocr": 1.0}, media=spec)
    node = SubTask(id="E1", goal=goal, modalities=list(mods))
    sti = SubTaskInput(question="q?", subtask=node, modal_inputs=mods, media_root=str(root), max_steps=2)
    return asyncio.run(backend.run(sti, []))


def _parts(request: dict[str, Any]) -> list[dict[str, Any]]:
    content = request["messages"][1]["content"]
    assert isinstance(content, list), content
    return content


def _decoded(url: str) -> tuple[str, bytes]:
    head, data = url.split(",", 1)
    return head, base64.b64decode(data)


def _task(world: Path, kinds: set[str]) -> Task:
    return next(
        t for t in read_tasks_json(world / "tasks.json") if {m.type for m in t.omni_modal_input} == kinds
    )


def test_image_and_audio_arrive_as_the_files_sent(small_world: Path) -> None:
    task = _task(small_world, {"image", "audio"})
    mods = {f"M{k}": m for k, m in enumerate(task.omni_modal_input, 1)}
    responder = ScriptedResponder([{"content": "ANSWER: 3"}])
    with start_server(responder) as srv:
        res = _run(_spec(srv.url, inputs=["image", "audio"]), mods, small_world / "media", "read #M1 and #M2")
    assert res.ok and res.value == 3
    parts = _parts(responder.requests[0])
    assert parts[0]["type"] == "text" and "Sub-task: read #M1 and #M2" in parts[0]["text"]
    images = [p for p in parts if p["type"] == "image_url"]
    sounds = [p for p in parts if p["type"] == "input_audio"]
    assert len(images) == 1 and len(sounds) == 1
    image = next(m for m in task.omni_modal_input if m.type == "image")
    audio = next(m for m in task.omni_modal_input if m.type == "audio")
    head, data = _decoded(images[0]["image_url"]["url"])
    mime = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg"}[Path(image.path).suffix]
    assert head == f"data:{mime};base64" and data == (small_world / "media" / image.path).read_bytes()
    assert sounds[0]["input_audio"]["format"] == "wav"
    assert (
        base64.b64decode(sounds[0]["input_audio"]["data"])
        == (small_world / "media" / audio.path).read_bytes()
    )
    labels = [p["text"] for p in parts if p["type"] == "text"][1:]
    assert labels == [f"#M1 image ({image.id}):", f"#M2 audio ({audio.id}):"]


def test_a_large_image_is_scaled_to_the_cap_and_untaken_media_stay_paths(tmp_path: Path) -> None:
    big = tmp_path / "big.jpg"
    Image.new("RGB", (1600, 900), (200, 30, 30)).save(big, format="JPEG")
    mods = {"M1": ModalInput(type="image", id="big", path="big.jpg")}
    responder = ScriptedResponder([{"content": "ANSWER: red"}, {"content": "ANSWER: red"}])
    with start_server(responder) as srv:
        assert _run(_spec(srv.url, inputs=["image"], image_max_side=400), mods, tmp_path).ok
        assert _run(_spec(srv.url, inputs=["audio"]), mods, tmp_path).ok
    head, data = _decoded(
        next(p for p in _parts(responder.requests[0]) if p["type"] == "image_url")["image_url"]["url"]
    )
    assert head == "data:image/png;base64" and Image.open(io.BytesIO(data)).size == (400, 225)
    plain = responder.requests[1]["messages"][1]["content"]  # a provider without images: the path, no parts
    assert isinstance(plain, str) and str(tmp_path / "big.jpg") in plain


def test_a_video_goes_as_sampled_frames_and_its_sound_track(small_muxed_world: Path) -> None:
    task = next(
        t for t in read_tasks_json(small_muxed_world / "tasks.json") if t.task_type == "video w/ audio"
    )
    video = task.omni_modal_input[0]
    assert video.type == "video" and len(task.omni_modal_input) == 1  # muxed: one MP4 with its sound
    responder = ScriptedResponder([{"content": "ANSWER: 4"}])
    with start_server(responder) as srv:
        spec = _spec(srv.url, inputs=["video"], video_frames=5, image_max_side=96)
        assert _run(spec, {"M1": video}, small_muxed_world / "media").ok
    parts = _parts(responder.requests[0])
    frames = [p for p in parts if p["type"] == "image_url"]
    assert len(frames) == 5
    for p in frames:
        assert max(Image.open(io.BytesIO(_decoded(p["image_url"]["url"])[1])).size) == 96
    said = [p["text"] for p in parts if p["type"] == "text"]
    assert said[2].startswith("frame at 0.00 s") and "its sound track" in said
    sound = base64.b64decode(next(p for p in parts if p["type"] == "input_audio")["input_audio"]["data"])
    assert sound[:4] == b"RIFF" and len(sound) > 16000  # a second of 16 kHz mono PCM at least


def test_audio_can_go_through_the_providers_transcription_endpoint(small_world: Path, loopback: Any) -> None:
    task = _task(small_world, {"audio"})
    audio = task.omni_modal_input[0]
    seen: dict[str, Any] = {}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            return

        def do_POST(self) -> None:  # noqa: N802 - stdlib name
            body = self.rfile.read(int(self.headers["Content-Length"]))
            if self.path.endswith("/audio/transcriptions"):
                seen["upload"] = body
                reply: dict[str, Any] = {"text": "  forty two  "}
            else:
                seen["chat"] = json.loads(body)
                reply = {"choices": [{"message": {"role": "assistant", "content": "ANSWER: 42"}}]}
            data = json.dumps(reply).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    url = f"http://127.0.0.1:{loopback(Handler)}/v1"
    spec = _spec(url, inputs=["audio"], audio_via="transcriptions", transcription_model="whisper-x")
    res = _run(spec, {"M1": audio}, small_world / "media")
    assert res.ok and res.value == 42
    wav = (small_world / "media" / audio.path).read_bytes()
    assert wav in seen["upload"] and b'name="model"\r\n\r\nwhisper-x' in seen["upload"]
    parts = _parts(seen["chat"])
    assert {"type": "text", "text": "transcript: forty two"} in parts
    assert not [p for p in parts if p["type"] == "input_audio"]


def test_unreadable_media_fail_the_sub_task_not_the_run(tmp_path: Path) -> None:
    (tmp_path / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 20)
    mods = {"M1": ModalInput(type="image", id="broken", path="broken.png")}
    with start_server(ScriptedResponder([])) as srv:
        res = _run(_spec(srv.url, inputs=["image"]), mods, tmp_path)
    assert not res.ok and "cannot send the sub-task's media" in (res.error or "")


@pytest.mark.parametrize("kind", ["transformers", "builtin"])
def test_only_an_openai_provider_declares_inputs(kind: str) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="inputs .* is for kind 'openai'"):
        ProviderSpec(kind=kind, model="m", inputs=["image"])  # type: ignore[arg-type]
