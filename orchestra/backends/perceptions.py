"""The perception table: world perception names -> goal phrase, modality, skill, tool and value reader.

One row per perception of ``orchestra/world/perception.py``; each reader takes a tool
observation's structured ``data`` (and the perception's args) and returns the value, or raises
:class:`GoalError` naming what the observation lacks.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from orchestra.errors import OrchestraError

__all__ = ["PERCEPTIONS", "Extractor", "GoalError", "PerceptionSpec"]


class GoalError(OrchestraError):
    """A goal is outside the builtin grammar, or a tool's observation lacks the value it asks for."""


Extractor = Callable[[Mapping[str, Any], Mapping[str, Any]], Any]
Confidence = Callable[[Mapping[str, Any], Mapping[str, Any]], float | None]


def _need(data: Mapping[str, Any], key: str) -> Any:
    if key not in data or data[key] is None:
        raise GoalError(f"the observation has no {key!r} (keys: {', '.join(sorted(data)) or 'none'})")
    return data[key]


def _int(text: Any, what: str) -> int:
    digits = re.sub(r"[\s,]", "", str(text))
    if not re.fullmatch(r"-?\d+", digits):
        raise GoalError(f"{what} {text!r} is not a whole number")
    return int(digits)


def _text(data: Mapping[str, Any], _: Mapping[str, Any]) -> str:
    text = " ".join(str(_need(data, "text")).split())
    if not text:
        raise GoalError("the tool read no text")
    return text


def _number(data: Mapping[str, Any], args: Mapping[str, Any]) -> int:
    return _int(_text(data, args), "the text read")


def _dtmf(data: Mapping[str, Any], _: Mapping[str, Any]) -> int:
    return _int(_need(data, "digits"), "the DTMF key sequence")


def _spoken(data: Mapping[str, Any], _: Mapping[str, Any]) -> int:
    return _int(_need(data, "number"), "the spoken number")


def _count(data: Mapping[str, Any], _: Mapping[str, Any]) -> int:
    return int(_need(data, "count"))


def _pitch(data: Mapping[str, Any], _: Mapping[str, Any]) -> int:
    tones = _need(data, "tones")
    if not tones:
        raise GoalError("no tones were found, so there is no pitch")
    freqs = sorted(float(t["freq_hz"]) for t in tones)
    return int(round(freqs[len(freqs) // 2] / 100.0)) * 100


_SCORE = re.compile(r"\s*(\d+)\s*[-–:]\s*(\d+)\s*")


def _timeline(data: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    items = _need(data, "timeline")
    if not items:
        raise GoalError("no on-screen text was found")
    return list(items)


def _caption_item(data: Mapping[str, Any]) -> Mapping[str, Any]:
    """The caption: the longest-shown on-screen text that is not a score (ties: the earliest)."""
    texts = [
        t
        for t in _timeline(data)
        if not _SCORE.fullmatch(str(t["text"])) and len(str(t["text"]).strip()) >= 2
    ]
    if not texts:
        raise GoalError("no caption-like text (only scores or stray marks) was found")
    return max(texts, key=lambda t: (float(t["t_end"]) - float(t["t_start"]), -float(t["t_start"])))


def _caption(data: Mapping[str, Any], _: Mapping[str, Any]) -> str:
    return " ".join(str(_caption_item(data)["text"]).split())


def _caption_number(data: Mapping[str, Any], args: Mapping[str, Any]) -> int:
    return _int(_caption(data, args), "the caption")


def _final_score(data: Mapping[str, Any]) -> tuple[Mapping[str, Any], re.Match[str]]:
    """The scoreboard shown last (the timeline item and its 'home - away' match)."""
    scores = [(t, _SCORE.fullmatch(str(t["text"]))) for t in _timeline(data)]
    found = [(t, m) for t, m in scores if m]
    if not found:
        raise GoalError("no scoreboard ('home - away') was found")
    return max(found, key=lambda x: float(x[0]["t_end"]))


def _score_total(data: Mapping[str, Any], _: Mapping[str, Any]) -> int:
    m = _final_score(data)[1]
    return int(m.group(1)) + int(m.group(2))


def _text_confidence(pick: Callable[[Mapping[str, Any]], Mapping[str, Any]]) -> Confidence:
    """The confidence of the one on-screen text the value comes from (its timeline item's), halved
    per text region the tool saw but could not read (one of those might be the text asked for);
    the tool's overall confidence when its items carry none."""

    def conf(data: Mapping[str, Any], args: Mapping[str, Any]) -> float | None:
        item = pick(data)
        if item.get("confidence") is None:
            return _tool_confidence(data, args)
        unread = int((data.get("confidence_why") or {}).get("unread_regions", 0))
        return float(item["confidence"]) * 0.5**unread

    return conf


def _appearances(data: Mapping[str, Any], _: Mapping[str, Any]) -> int:
    return sum(1 for e in _need(data, "events") if e.get("kind") == "appear")


def _change_event(data: Mapping[str, Any], args: Mapping[str, Any]) -> Mapping[str, Any]:
    obj = str(args.get("object", "")).lower()
    ids = {str(o["id"]) for o in data.get("objects", []) if str(o.get("shape", "")).lower() == obj}
    ids |= {obj}
    changes = [
        e
        for e in _need(data, "events")
        if e.get("kind") in ("colour_change", "color_change") and str(e.get("object", "")).lower() in ids
    ]
    if len(changes) != 1:
        raise GoalError(f"the {obj} changes colour {len(changes)} times in the timeline, not once")
    return changes[0]


def _colour_change(data: Mapping[str, Any], args: Mapping[str, Any]) -> int | float:
    t = float(_change_event(data, args)["t"])
    return int(t) if t.is_integer() else t


def _change_confidence(data: Mapping[str, Any], args: Mapping[str, Any]) -> float | None:
    """The timeline's confidence, and low (at most 0.2) when the change's time is an estimate between
    samples (``t_error_s`` beyond half a frame): the answer is that time, to the frame."""
    conf = data.get("confidence")
    if conf is None:
        return None
    frame = 1.0 / float(data.get("fps") or 1.0)
    error = float(_change_event(data, args).get("t_error_s") or 0.0)
    return float(conf) if error <= frame / 2 else min(float(conf), 0.2)


def _chart_confidence(data: Mapping[str, Any], args: Mapping[str, Any]) -> float | None:
    """The confidence of the one value asked for (``value_confidences`` by label), not the chart's
    weakest value's; the tool's overall confidence when it gives none per value."""
    labels = [str(x).strip() for x in data.get("labels") or []]
    per_value = data.get("value_confidences") or []
    label = str(args.get("label", "")).strip()
    if label in labels and len(per_value) == len(labels) and per_value[labels.index(label)] is not None:
        return float(per_value[labels.index(label)])
    return _tool_confidence(data, args)


def _tool_confidence(data: Mapping[str, Any], _: Mapping[str, Any]) -> float | None:
    conf = data.get("confidence")
    return None if conf is None else float(conf)


def _chart(data: Mapping[str, Any], args: Mapping[str, Any]) -> int:
    if data.get("value") is not None:  # the tool was asked for the label itself
        return int(round(float(data["value"])))
    labels = [str(x).strip() for x in _need(data, "labels")]
    values = list(_need(data, "values"))
    label = str(args.get("label", "")).strip()
    if label not in labels:
        raise GoalError(f"the chart has no label {label!r} (labels read: {', '.join(labels)})")
    value = values[labels.index(label)]
    if value is None:
        raise GoalError(f"the chart's value for {label!r} could not be read")
    return int(round(float(value)))


@dataclass(frozen=True)
class PerceptionSpec:
    """One world perception: the goal phrase (``{arg}`` placeholders), the modality it reads, the skill
    it needs, the tool and its extra arguments, and how the value is read from ``Observation.data``."""

    name: str
    phrase: str
    modality: str
    skill: str
    tool: str
    extract: Extractor
    defaults: dict[str, str] = field(default_factory=dict)  # arg -> word meaning "not given"
    tool_args: tuple[str, ...] = ()  # perception args passed on to the tool
    #: how sure the value is, from the same data: the tool's confidence unless the value needs more
    confidence: Confidence = _tool_confidence

    def render(self, args: Mapping[str, Any]) -> str:
        values = {
            k: str(args.get(k) if args.get(k) is not None else self.defaults.get(k, ""))
            for k in re.findall(r"\{(\w+)\}", self.phrase)
        }
        return self.phrase.format(**values)

    def pattern(self) -> re.Pattern[str]:
        parts = re.split(r"\{(\w+)\}", self.phrase)
        rx = "".join(re.escape(p) if i % 2 == 0 else f"(?P<{p}>.+?)" for i, p in enumerate(parts))
        return re.compile(rx + r"\s+in\s+(?P<ref>#?M[1-9][0-9]*)", re.IGNORECASE)

    def args_from(self, groups: Mapping[str, str]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in groups.items():
            if k == "ref":
                continue
            v = v.strip().strip("\"'")
            if v.lower() != self.defaults.get(k, "\0").lower():
                out[k] = v
        return out


def _perceptions(*specs: PerceptionSpec) -> dict[str, PerceptionSpec]:
    return {s.name: s for s in specs}


#: world perception name -> how a builtin expert performs it (THE one mapping table).
PERCEPTIONS: dict[str, PerceptionSpec] = _perceptions(
    PerceptionSpec("dtmf_number", "decode the dtmf digits", "audio", "audio_signal", "audio_dtmf", _dtmf),
    PerceptionSpec("count_beeps", "count the beeps", "audio", "audio_signal", "audio_tones", _count),
    PerceptionSpec(
        "beep_pitch", "measure the beep pitch in hz", "audio", "audio_signal", "audio_tones", _pitch
    ),
    PerceptionSpec("morse_text", "decode the morse text", "audio", "audio_signal", "audio_morse", _text),
    PerceptionSpec(
        "morse_number", "decode the morse number", "audio", "audio_signal", "audio_morse", _number
    ),
    # speech runs on the audio experts (skill audio_signal): a separate skill would change routing and
    # the expert pool of worlds without speech, whose numbers must not move
    PerceptionSpec(
        "speech_number", "transcribe the spoken number", "audio", "audio_signal", "audio_speech", _spoken
    ),
    PerceptionSpec(
        "speech_name", "transcribe the spoken name", "audio", "audio_signal", "audio_speech", _text
    ),
    PerceptionSpec("read_text", "read the text in the image", "image", "ocr", "image_ocr", _text),
    PerceptionSpec("read_number", "read the number in the image", "image", "ocr", "image_ocr", _number),
    PerceptionSpec(
        "count_shapes",
        "count the shapes of colour {color} and type {shape}",
        "image",
        "counting",
        "image_count_objects",
        _count,
        defaults={"color": "any", "shape": "any"},
        tool_args=("color", "shape"),
    ),
    PerceptionSpec(
        "chart_value",
        "read the chart value for the label {label}",
        "image",
        "chart",
        "image_read_chart",
        _chart,
        tool_args=("label",),
        confidence=_chart_confidence,
    ),
    PerceptionSpec(
        "caption_text",
        "read the caption text",
        "video",
        "video_temporal",
        "video_text",
        _caption,
        confidence=_text_confidence(_caption_item),
    ),
    PerceptionSpec(
        "caption_number",
        "read the caption number",
        "video",
        "video_temporal",
        "video_text",
        _caption_number,
        confidence=_text_confidence(_caption_item),
    ),
    PerceptionSpec(
        "final_score_total",
        "add up the final scoreboard score",
        "video",
        "video_temporal",
        "video_text",
        _score_total,
        confidence=_text_confidence(lambda data: _final_score(data)[0]),
    ),
    PerceptionSpec(
        "count_appearances",
        "count the objects that appear",
        "video",
        "video_temporal",
        "video_events",
        _appearances,
    ),
    PerceptionSpec(
        "color_change_second",
        "find the second at which the {object} changes colour",
        "video",
        "video_temporal",
        "video_events",
        _colour_change,
        confidence=_change_confidence,
    ),
)
