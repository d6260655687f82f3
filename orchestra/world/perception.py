"""Perception operations evaluated on a media file's ground truth: what a perfect tool would read."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from orchestra.errors import WorldError

Truth = dict[str, Any]


def _need(truth: Truth, kind: str) -> Truth:
    """``truth`` when it is of ``kind``; a muxed video's ``audio_track`` when that is; else WorldError."""
    if truth.get("kind") == kind:
        return truth
    track = truth.get("audio_track")
    if truth.get("kind") == "video" and isinstance(track, dict) and track.get("kind") == kind:
        return track
    raise WorldError(f"perception needs a {kind} media file, got {truth.get('kind')!r}")


def read_text(truth: Truth, **_: Any) -> str:
    truth = _need(truth, "sign")
    return str(truth["text"])


def read_number(truth: Truth, **_: Any) -> int:
    return int(read_text(truth))


def count_shapes(truth: Truth, color: str | None = None, shape: str | None = None, **_: Any) -> int:
    truth = _need(truth, "shapes")
    return sum(
        1
        for s in truth["shapes"]
        if (color is None or s["color"] == color) and (shape is None or s["shape"] == shape)
    )


def chart_value(truth: Truth, label: str, **_: Any) -> int:
    truth = _need(truth, "chart")
    if label not in truth["labels"]:
        raise WorldError(f"chart has no label {label!r}")
    return int(truth["values"][truth["labels"].index(label)])


def dtmf_number(truth: Truth, **_: Any) -> int:
    truth = _need(truth, "dtmf")
    return int(truth["digits"])


def count_beeps(truth: Truth, **_: Any) -> int:
    truth = _need(truth, "beeps")
    return len(truth["onsets_s"])


def beep_pitch(truth: Truth, **_: Any) -> int:
    truth = _need(truth, "beeps")
    return int(round(truth["freq_hz"] / 100.0)) * 100


def morse_text(truth: Truth, **_: Any) -> str:
    truth = _need(truth, "morse")
    return str(truth["text"])


def morse_number(truth: Truth, **_: Any) -> int:
    return int(morse_text(truth))


def speech_number(truth: Truth, **_: Any) -> int:
    truth = _need(truth, "speech")
    return int(truth["text"])


def speech_name(truth: Truth, **_: Any) -> str:
    truth = _need(truth, "speech")
    return str(truth["text"])


def _text(truth: Truth, role: str) -> list[Truth]:
    _need(truth, "video")
    items = [t for t in truth["text"] if t["role"] == role]
    if not items:
        raise WorldError(f"video shows no {role}")
    return items


def caption_text(truth: Truth, **_: Any) -> str:
    texts = {t["text"] for t in _text(truth, "caption")}
    if len(texts) != 1:
        raise WorldError(f"video shows {len(texts)} different captions")
    return texts.pop()


def caption_number(truth: Truth, **_: Any) -> int:
    return int(caption_text(truth))


def final_score_total(truth: Truth, **_: Any) -> int:
    last = max(_text(truth, "scoreboard"), key=lambda t: t["t_end"])
    home, away = (int(p) for p in last["text"].split("-"))
    return home + away


def count_appearances(truth: Truth, **_: Any) -> int:
    _need(truth, "video")
    return sum(1 for e in truth["events"] if e["kind"] == "appear")


def color_change_second(truth: Truth, object: str, **_: Any) -> int | float:
    _need(truth, "video")
    times = [e["t"] for e in truth["events"] if e["kind"] == "color_change" and e["object"] == object]
    if len(times) != 1:
        raise WorldError(f"the {object} changes colour {len(times)} times, not once")
    return int(times[0]) if float(times[0]).is_integer() else float(times[0])


PERCEPTIONS: dict[str, Callable[..., Any]] = {
    f.__name__: f
    for f in (
        read_text,
        read_number,
        count_shapes,
        chart_value,
        dtmf_number,
        count_beeps,
        beep_pitch,
        morse_text,
        morse_number,
        speech_number,
        speech_name,
        caption_text,
        caption_number,
        final_score_total,
        count_appearances,
        color_change_second,
    )
}


def perceive(truth: Truth, perception: str, args: dict[str, Any]) -> Any:
    """Apply perception ``perception`` with ``args`` to a media file's truth."""
    fn = PERCEPTIONS.get(perception)
    if fn is None:
        raise WorldError(f"unknown perception {perception!r}; known: {sorted(PERCEPTIONS)}")
    try:
        return fn(truth, **args)
    except (KeyError, TypeError, ValueError) as e:
        raise WorldError(f"perception {perception}({args}) failed on {truth.get('kind')!r} truth: {e}") from e
