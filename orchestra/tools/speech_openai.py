"""audio_speech on an OpenAI-compatible ``/v1/audio/transcriptions`` endpoint (vLLM serving Whisper,
faster-whisper-server, a hosted API, or `orchestra serve`): the production speech path."""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any, ClassVar

from orchestra.errors import ReplyError, ToolError
from orchestra.tools.base import FailureKinds, Observation, Tool
from orchestra.tools.media import FILE_FAILURES, check_file, load_wav
from orchestra.tools.speech import AudioSpeech
from orchestra.tools.speech_words import CLASSES, words_to_number

_SPOKEN = {"o": "oh", "nought": "zero"}  # how transcripts spell two number words


def multipart(fields: dict[str, str], file_field: str, filename: str, data: bytes) -> tuple[bytes, str]:
    """A multipart/form-data body with text ``fields`` and one file, and its Content-Type."""
    boundary = f"orchestra-{uuid.uuid4().hex}"
    parts = [
        f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode()
        for k, v in fields.items()
    ]
    parts.append(
        f'--{boundary}\r\nContent-Disposition: form-data; name="{file_field}"; filename="{filename}"\r\n'
        "Content-Type: audio/wav\r\n\r\n".encode()
        + data
        + b"\r\n"
    )
    return b"".join(parts) + f"--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


def text_to_number(text: str) -> tuple[list[str], int]:
    """The number a transcript says: digits as written ("412.", "1,984") or number words
    ("Four hundred and twelve.", "nineteen oh-five"); the words read and the value."""
    digits = re.sub(r"(?<=\d)[,\s](?=\d{3}\b)", "", text)
    found = re.findall(r"-?\d+", digits)
    if len(found) == 1:
        return [found[0]], int(found[0])
    words = [_SPOKEN.get(w, w) for w in re.findall(r"[a-z]+", text.lower())]
    words = [w for w in words if w in CLASSES]
    if not words:
        raise ReplyError(f"the transcript {text!r} says no number")
    return words, words_to_number(words)


class OpenAISpeech(Tool):
    """audio_speech through an OpenAI-compatible transcription endpoint: the WAV is checked locally
    (a corrupt file never leaves the machine), uploaded as multipart form data (``file``, ``model``,
    ``response_format=json``) and the reply's ``text`` read as a number. HTTP errors, timeouts and
    replies without text are ToolError / ReplyError: a failed observation the agent reads."""

    name: ClassVar[str] = AudioSpeech.name
    failure_kinds: ClassVar[FailureKinds] = FILE_FAILURES
    description: ClassVar[str] = (
        "Transcribe a spoken number or year in a WAV file with a speech-recognition model: returns the "
        "transcript and the number it says."
    )
    input_schema: ClassVar[dict[str, Any]] = AudioSpeech.input_schema

    def __init__(
        self, base_url: str, model: str, api_key_env: str | None = None, timeout_s: float = 60.0
    ) -> None:
        self.url = base_url.rstrip("/") + "/audio/transcriptions"
        self.model, self.api_key_env, self.timeout_s = model, api_key_env, timeout_s

    def transcribe(self, path: Path) -> str:
        """The endpoint's transcript of the WAV file at ``path``."""
        body, ctype = multipart(
            {"model": self.model, "response_format": "json"}, "file", path.name, path.read_bytes()
        )
        headers = {"Content-Type": ctype, "Accept": "application/json"}
        if self.api_key_env:
            key = os.environ.get(self.api_key_env, "")
            if not key:
                raise ToolError(f"the transcription endpoint needs an API key in ${self.api_key_env}")
            headers["Authorization"] = f"Bearer {key}"
        request = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as resp:
                raw = resp.read(1_000_000)
        except urllib.error.HTTPError as e:
            detail = e.read(300).decode("utf-8", "replace")
            raise ToolError(f"the transcription endpoint answered HTTP {e.code}: {detail}") from e
        except TimeoutError as e:
            raise ToolError(f"the transcription endpoint timed out after {self.timeout_s:g} s") from e
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            if isinstance(reason, TimeoutError):
                raise ToolError(f"the transcription endpoint timed out after {self.timeout_s:g} s") from e
            raise ToolError(f"the transcription endpoint {self.url} is unreachable: {reason}") from e
        try:
            reply = json.loads(raw)
        except json.JSONDecodeError as e:
            raise ReplyError(f"the transcription endpoint answered no JSON: {raw[:120]!r}") from e
        if not isinstance(reply, dict) or not isinstance(reply.get("text"), str):
            raise ReplyError(f"the transcription reply has no 'text': {str(reply)[:120]}")
        return reply["text"]

    def run(self, path: str) -> Observation:
        p = check_file(path, "audio")
        load_wav(p)  # a corrupt or empty WAV is a MediaError here, not an upload
        text = self.transcribe(p)
        words, number = text_to_number(text)
        return Observation(
            tool=self.name,
            text=f"Speech: {text.strip()!r} = {number}",
            data={"text": text.strip(), "words": words, "number": number, "model": self.model},
        )
