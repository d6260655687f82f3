"""Media as chat content parts, for a model that takes them (a provider's ``inputs``).

An image goes as an ``image_url`` data URL: the file's own bytes when its longer side is within
``image_max_side``, else a PNG scaled down to it. Audio goes as an ``input_audio`` part (WAV, base64:
a WAV file's own bytes, any other sound decoded to 16 kHz mono first), or, with ``audio_via:
transcriptions``, as the text the provider's ``/audio/transcriptions`` endpoint hears in it. A video
goes as ``video_frames`` frames sampled evenly over its length (image parts, scaled like images) and,
when it has one, its sound track (as audio). Each input is announced by a text part naming its
reference (``#M1 image (id):``). A modality the provider does not take sends nothing: its model
reads that input through the tools, as before.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from orchestra.config import ProviderSpec
from orchestra.errors import RecordError
from orchestra.io import media_file
from orchestra.schemas import ModalInput
from orchestra.tools.media import MediaError, check_file, decode_audio_track, read_video, wav_bytes

__all__ = ["MIME", "content_parts", "image_part", "sound_part", "takes"]

#: image signatures (``orchestra.tools.media``' names) -> MIME type
MIME = {
    "PNG": "image/png",
    "JPEG": "image/jpeg",
    "GIF": "image/gif",
    "BMP": "image/bmp",
    "WEBP": "image/webp",
}
#: the rate audio other than a WAV file is decoded to before it is sent
AUDIO_RATE = 16000


def takes(spec: ProviderSpec | None, modality: str) -> bool:
    """Whether the provider's model takes ``modality`` as content parts."""
    return spec is not None and modality in spec.inputs


def _data_url(mime: str, data: bytes) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def _png(rgb: np.ndarray, max_side: int) -> bytes:
    from PIL import Image

    im = Image.fromarray(rgb)
    if max(im.size) > max_side:
        im.thumbnail((max_side, max_side), Image.Resampling.LANCZOS)
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    return buf.getvalue()


def image_part(path: Path, max_side: int) -> dict[str, Any]:
    """An ``image_url`` part: the file as it is when it fits ``max_side``, else a scaled-down PNG."""
    from PIL import Image, UnidentifiedImageError

    p = check_file(path, "image")
    data = p.read_bytes()
    try:
        with Image.open(io.BytesIO(data)) as im:
            fmt, size = im.format or "", im.size
            rgb = np.asarray(im.convert("RGB")) if max(size) > max_side or fmt not in MIME else None
    except (OSError, UnidentifiedImageError, ValueError) as e:
        raise MediaError(f"cannot send image {p}: {e}") from e
    if rgb is None:
        return {"type": "image_url", "image_url": {"url": _data_url(MIME[fmt], data)}}
    return {"type": "image_url", "image_url": {"url": _data_url("image/png", _png(rgb, max_side))}}


def _wav(path: Path) -> bytes:
    """A WAV file's own bytes; any other sound (or a video's track) decoded to a 16 kHz mono WAV."""
    p = Path(path)
    data = p.read_bytes()
    if data[:4] == b"RIFF" and data[8:12] == b"WAVE":
        return data
    return wav_bytes(decode_audio_track(p, AUDIO_RATE), AUDIO_RATE)


def sound_part(wav: bytes, spec: ProviderSpec, client: Any) -> dict[str, Any]:
    """The sound as the provider takes it: an ``input_audio`` part, or the transcript as text."""
    if spec.audio_via == "transcriptions":
        text = client.transcribe(wav, spec.transcription_model)
        return {"type": "text", "text": f"transcript: {text.strip()}"}
    return {
        "type": "input_audio",
        "input_audio": {"data": base64.b64encode(wav).decode("ascii"), "format": "wav"},
    }


def _video(path: Path, spec: ProviderSpec, client: Any, with_sound: bool) -> list[dict[str, Any]]:
    info, _, _ = read_video(path, max_frames=0)
    n = min(spec.video_frames, info.frame_count)
    picks = sorted({int(round(x)) for x in np.linspace(0, info.frame_count - 1, n)})
    _, frames, kept = read_video(path, indices=set(picks))
    parts: list[dict[str, Any]] = []
    for index, bgr in zip(kept, frames, strict=True):
        seconds = index / info.fps
        png = _png(np.ascontiguousarray(bgr[:, :, ::-1]), spec.image_max_side)
        parts += [
            {"type": "text", "text": f"frame at {seconds:.2f} s"},
            {"type": "image_url", "image_url": {"url": _data_url("image/png", png)}},
        ]
    if with_sound:
        try:
            track = decode_audio_track(Path(path), AUDIO_RATE)
        except MediaError:
            return parts  # a silent video: frames only
        parts += [
            {"type": "text", "text": "its sound track"},
            sound_part(wav_bytes(track, AUDIO_RATE), spec, client),
        ]
    return parts


def _confined(root: Path, rel: str) -> Path:
    try:
        return media_file(root, rel)
    except RecordError as e:
        raise MediaError(str(e)) from e


def content_parts(
    inputs: Sequence[tuple[str, ModalInput]],
    media_root: Path | None,
    spec: ProviderSpec | None,
    client: Any = None,
) -> list[dict[str, Any]]:
    """The parts for the ``(key, modal input)`` pairs whose modality ``spec`` takes (module docstring);
    ``client``: the provider's OpenAIClient, for ``audio_via: transcriptions``. MediaError when a file
    cannot be read."""
    if spec is None or not spec.inputs:
        return []
    parts: list[dict[str, Any]] = []
    for key, m in inputs:
        if not takes(spec, m.type):
            continue
        path = Path(m.path) if media_root is None else _confined(Path(media_root), m.path)
        parts.append({"type": "text", "text": f"#{key} {m.type} ({m.id}):"})
        if m.type == "image":
            parts.append(image_part(path, spec.image_max_side))
        elif m.type == "audio":
            parts.append(sound_part(_wav(check_file(path, "audio")), spec, client))
        elif m.type == "video":
            parts += _video(path, spec, client, with_sound=True)
    return parts
