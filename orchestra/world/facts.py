"""Perception facts: render one media file for a task and say what can be read from it, and how."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from orchestra.config import WorldParams
from orchestra.errors import WorldError
from orchestra.io import atomic_write_bytes
from orchestra.world import audio, image
from orchestra.world.kb import Entity, KnowledgeBase
from orchestra.world.perception import perceive

#: the task type whose audio a ``video_audio_track: muxed`` world writes as its video's sound track
MUXED_TYPE = "video w/ audio"


@dataclass
class Media:
    id: str
    path: str  # relative to the media root
    modality: str
    truth: dict[str, Any]


@dataclass
class Fact:
    """One value a perception step reads from one media file."""

    media: Media
    perception: str
    args: dict[str, Any]
    kind: str  # name | count | number | year
    phrase: str  # noun phrase naming the value, e.g. "the number of beeps in the audio"
    how: str  # annotated-solution wording, e.g. "Count the beeps in the audio"
    intro: str = ""  # name facts: the sentence that introduces the entity
    entity: Entity | None = None
    value: Any = field(init=False)

    def __post_init__(self) -> None:
        self.value = perceive(self.media.truth, self.perception, self.args)


_STEM_LETTERS = "bcdfghjkmnpqrstvwxz"
#: in a speech world, the share of audio numbers, years and names that are spoken (the rest: the other
#: producers; names otherwise in Morse)
SPEECH_SHARE = 0.5


def _a(phrase: str) -> str:
    return ("an " if phrase[0] in "aeiou" else "a ") + phrase


def _drawn(rng: np.random.Generator, value: int | None, low: int, high: int) -> int:
    """``value``, or a number drawn from [low, high) when it is None."""
    return value if value is not None else int(rng.integers(low, high))


class MediaWriter:
    """Renders media for one world: opaque rng-drawn file names, files written atomically."""

    def __init__(self, params: WorldParams, kb: KnowledgeBase, media_root: Path, speech: bool) -> None:
        self.params, self.kb, self.root, self.speech = params, kb, Path(media_root), speech
        self.records: list[dict[str, Any]] = []
        self._names: set[str] = set()
        self.task_id = ""
        self.task_type = ""
        self.muxed = params.video_audio_track == "muxed"
        self._tracks: dict[str, np.ndarray] = {}  # muxed: audio held for its task's video, by media id

    def _name(self, rng: np.random.Generator, folder: str, ext: str) -> str:
        """An opaque file name: 12 rng-drawn consonants, so no number or (vowel-bearing) name fits in it."""
        while True:
            stem = "".join(_STEM_LETTERS[i] for i in rng.integers(0, len(_STEM_LETTERS), 12).tolist())
            if stem not in self._names:
                self._names.add(stem)
                return f"{folder}/{stem}.{ext}"

    def _record(self, rel: str, modality: str, truth: dict[str, Any]) -> Media:
        media = Media(f"{modality}_{Path(rel).stem}", rel, modality, truth)
        self.records.append(
            {
                "id": media.id,
                "path": rel,
                "modality": modality,
                "kind": truth["kind"],
                "task_id": self.task_id,
                "facts": truth,
            }
        )
        return media

    def image(self, rng: np.random.Generator, img: Any, truth: dict[str, Any]) -> Media:
        fmt = "jpg" if truth.get("jpeg_quality", 100) < 100 else "png"
        rel = self._name(rng, "images", fmt)
        data = image.image_bytes(img, fmt, quality=95)
        atomic_write_bytes(self.root / rel, data)
        return self._record(rel, "image", truth)

    def audio(self, rng: np.random.Generator, samples: np.ndarray, truth: dict[str, Any]) -> Media:
        rel = self._name(rng, "audios", "wav")  # drawn in both forms: the rest of the world is the same
        if self.muxed and self.task_type == MUXED_TYPE:  # no WAV: :meth:`mux` makes it the video's track
            media = Media(f"audio_{Path(rel).stem}", rel, "audio", truth)
            self._tracks[media.id] = samples
            return media
        audio.save_wav(samples, self.root / rel)
        return self._record(rel, "audio", truth)

    def mux(self, media: list[Media]) -> tuple[list[Media], dict[str, str]]:
        """A task's media with its held audio muxed into its video (muxed ``video w/ audio``): the
        video file gains the sound as a PCM track, its truth the audio's as ``audio_track``. Returns
        the media left (the video alone) and audio id -> video id; unchanged when nothing is held."""
        held = [m for m in media if m.id in self._tracks]
        if not held:
            return media, {}
        videos = [m for m in media if m.modality == "video"]
        if len(held) != 1 or len(videos) != 1:
            raise WorldError(f"task {self.task_id}: muxing needs one video and one audio, got {len(media)}")
        from orchestra.world.mux import mux_audio

        sound, video = held[0], videos[0]
        file = self.root / video.path
        mux_audio(file, self._tracks.pop(sound.id), audio.SAMPLE_RATE, file)
        video.truth["audio_track"] = sound.truth  # the same dict as the video's record's facts
        return [m for m in media if m is not sound], {sound.id: video.id}

    def video(
        self,
        rng: np.random.Generator,
        text_mode: str,
        caption: str | None = None,
        require: tuple[str, ...] = (),
    ) -> Media:
        from orchestra.world.video import render_video

        p = self.params
        rel = self._name(rng, "videos", "mp4")
        truth = render_video(
            rng,
            p.noise.draw(rng, "video"),
            self.root / rel,
            size=tuple(p.video_size),
            fps=p.video_fps,
            seconds=p.video_seconds,
            text_mode=text_mode,
            caption=caption,
            require=require,
        )
        return self._record(rel, "video", truth)

    # --- name facts -------------------------------------------------------------------------------

    def name_fact(self, rng: np.random.Generator, modality: str, e: Entity) -> Fact:
        """A new media file of ``modality`` that shows, says or spells ``e``'s name."""
        if modality == "image":
            text = e.name.upper() if rng.random() < 0.3 else e.name
            m = self.image(rng, *image.render_sign(rng, text, self.params.noise.draw(rng, "image")))
            how = "read_text"
        elif modality == "audio" and self.speech and rng.random() < SPEECH_SHARE:
            m = self.audio(rng, *audio.render_spoken_name(rng, e.name, self.params.noise.draw(rng, "audio")))
            how = "speech_name"
        elif modality == "audio":
            m = self.audio(rng, *audio.render_morse(rng, e.name, self.params.noise.draw(rng, "audio")))
            how = "morse_text"
        elif modality == "video":
            m = self.video(rng, "caption", caption=e.name.upper())
            how = "caption_text"
        else:
            raise WorldError(f"no name fact for modality {modality!r}")
        where, step, note = _NAME_FACTS[how]
        return Fact(m, how, {}, "name", where, step, note.format(_a(e.etype.phrase)), e)

    # --- number facts -----------------------------------------------------------------------------

    def number_facts(
        self,
        rng: np.random.Generator,
        modality: str,
        kind: str,
        n: int = 1,
        year: int | None = None,
        category: str = "",
    ) -> list[Fact]:
        """``n`` facts of ``kind`` (count | number | year) from one new media file of ``modality``."""
        how = self._producer(rng, modality, kind, n)
        if how == "shapes":
            return self._shape_facts(rng, kind, n)
        if how == "chart":
            return self._chart_facts(rng, kind, n, category)
        if how == "change":
            return [self._change_fact(rng, kind)]
        media = self._value_media(rng, how, kind, year)
        perception, phrase, step = _NUMBER_FACTS[how]
        noun = "year" if kind == "year" else "number"
        return [Fact(media, perception, {}, kind, phrase.format(noun=noun), step)]

    def _producer(self, rng: np.random.Generator, modality: str, kind: str, n: int) -> str:
        """Which producer (``_PRODUCERS``) renders ``n`` facts of ``kind`` from ``modality``, drawn."""
        choices = _PRODUCERS[(modality, kind)]
        if n > 1:
            choices = [c for c in choices if c in ("shapes", "chart")]
        if kind in ("number", "year") and not self.speech:
            choices = [c for c in choices if c != "speech"]
        if not choices:
            raise WorldError(f"no producer for {n} {kind} fact(s) from {modality}")
        if self.speech and "speech" in choices and rng.random() < SPEECH_SHARE:
            return "speech"  # OmniGAIA's audio is mostly speech; drawn only in speech worlds
        return choices[int(rng.integers(len(choices)))]

    def _value_media(self, rng: np.random.Generator, how: str, kind: str, value: int | None) -> Media:
        """A new media file from which producer ``how`` reads one value: ``value`` where the producer
        shows a given number (drawn when None), else what the rendering makes."""
        noise = self.params.noise.draw
        if how == "sign":
            v = _drawn(rng, value, 10, 10000)
            return self.image(rng, *image.render_sign(rng, str(v), noise(rng, "image")))
        if how == "dtmf":
            v = _drawn(rng, value, 100, 100000)
            return self.audio(rng, *audio.render_dtmf(rng, str(v), noise(rng, "audio")))
        if how == "morse":
            v = _drawn(rng, value, 10, 1000)
            return self.audio(rng, *audio.render_morse(rng, str(v), noise(rng, "audio")))
        if how == "speech":
            v = _drawn(rng, value, 10, 1000)
            level = noise(rng, "audio")
            return self.audio(rng, *audio.render_speech(rng, v, level, year=kind == "year"))
        if how in ("beeps", "pitch"):
            return self.audio(rng, *audio.render_beeps(rng, noise(rng, "audio")))
        if how == "caption":
            return self.video(rng, "caption", caption=str(_drawn(rng, value, 10, 10000)))
        if how == "score":
            return self.video(rng, "scoreboard")
        if how == "appear":
            return self.video(rng, "none", require=("appear",))
        raise WorldError(f"unknown producer {how!r}")  # pragma: no cover - _PRODUCERS lists known ones

    def _shape_facts(self, rng: np.random.Generator, kind: str, n: int) -> list[Fact]:
        """``n`` counts from one new image of shapes: of a colour, or of a colour and a shape."""
        level = self.params.noise.draw(rng, "image")
        m = self.image(rng, *image.render_shapes(rng, level, n_colors=max(3, n + 1)))
        counts: dict[str, dict[str, int]] = m.truth["counts"]
        colors = [c for c in counts]
        facts = []
        for c in [colors[i] for i in rng.permutation(len(colors))[:n].tolist()]:
            shapes = sorted(counts[c])
            if rng.random() < 0.4:  # the shapes of one kind in the colour
                s = shapes[int(rng.integers(len(shapes)))]
                what, args = f"{c} {s}s", {"color": c, "shape": s}
            else:
                what, args = f"{c} shapes", {"color": c}
            phrase, step = f"the number of {what} in the image", f"Count the {what} in the image"
            facts.append(Fact(m, "count_shapes", args, kind, phrase, step))
        return facts

    def _chart_facts(self, rng: np.random.Generator, kind: str, n: int, category: str) -> list[Fact]:
        """``n`` values from one new bar chart (labelled with ``category``'s names where it has enough)
        or line chart."""
        chart = "bar" if rng.random() < 0.6 else "line"
        labels = self._chart_labels(rng, category) if chart == "bar" else None
        level = self.params.noise.draw(rng, "image")
        m = self.image(rng, *image.render_chart(rng, level, chart, labels=labels))
        picked = [m.truth["labels"][i] for i in rng.permutation(len(m.truth["labels"]))[:n].tolist()]
        return [
            Fact(
                m,
                "chart_value",
                {"label": lab},
                kind,
                f"the value shown for {lab} in the {chart} chart",
                f"Read the value for {lab} in the {chart} chart",
            )
            for lab in picked
        ]

    def _change_fact(self, rng: np.random.Generator, kind: str) -> Fact:
        """When one object of a new video changes colour."""
        m = self.video(rng, "none", require=("color_change",))
        objs = sorted({e["object"] for e in m.truth["events"] if e["kind"] == "color_change"})
        o = objs[int(rng.integers(len(objs)))]
        return Fact(
            m,
            "color_change_second",
            {"object": o},
            kind,
            f"the time in seconds (from the start) at which the {o} in the video changes colour",
            f"Find when the {o} in the video changes colour",
        )

    def _chart_labels(self, rng: np.random.Generator, category: str) -> list[str] | None:
        names = sorted(e.name for e in self.kb.subjects(category) if " " not in e.name and len(e.name) <= 7)
        n = int(rng.integers(4, 6))
        if len(names) < n:
            return None
        return [names[i] for i in rng.choice(len(names), size=n, replace=False).tolist()]


#: name perception -> (what the value is, the step that reads it, the note; {} is the entity type)
_NAME_FACTS: dict[str, tuple[str, str, str]] = {
    "read_text": (
        "the name on the sign in the image",
        "Read the sign in the image",
        "The sign in the image shows the name of {}.",
    ),
    "speech_name": (
        "the name spoken in the audio",
        "Transcribe the speech",
        "The audio says the name of {}.",
    ),
    "morse_text": (
        "the word spelled in Morse code in the audio",
        "Decode the Morse code in the audio",
        "The audio spells the name of {} in Morse code.",
    ),
    "caption_text": (
        "the name in the caption of the video",
        "Read the caption in the video",
        "The caption in the video shows the name of {}.",
    ),
}

#: producer of one value -> (its perception, what the value is, the step that reads it); {noun} is
#: "year" for a year fact, "number" otherwise
_NUMBER_FACTS: dict[str, tuple[str, str, str]] = {
    "sign": (
        "read_number",
        "the {noun} shown on the sign in the image",
        "Read the number on the sign in the image",
    ),
    "dtmf": (
        "dtmf_number",
        "the {noun} dialled with keypad (DTMF) tones in the audio",
        "Decode the keypad (DTMF) tones in the audio",
    ),
    "morse": (
        "morse_number",
        "the {noun} spelled in Morse code in the audio",
        "Decode the Morse code in the audio",
    ),
    "speech": ("speech_number", "the {noun} spoken in the audio", "Transcribe the speech"),
    "beeps": ("count_beeps", "the number of beeps in the audio", "Count the beeps in the audio"),
    "pitch": (
        "beep_pitch",
        "the pitch of the beeps in the audio in Hz (a multiple of 100)",
        "Measure the pitch of the beeps in the audio",
    ),
    "caption": (
        "caption_number",
        "the {noun} shown in the caption of the video",
        "Read the caption in the video",
    ),
    "score": (
        "final_score_total",
        "the total number of points on the scoreboard at the end of the video",
        "Read the final scoreboard in the video and add both scores",
    ),
    "appear": (
        "count_appearances",
        "the number of objects that appear after the video starts",
        "Count the objects that appear during the video",
    ),
}

_PRODUCERS: dict[tuple[str, str], list[str]] = {
    ("image", "count"): ["shapes"],
    ("image", "number"): ["chart", "sign"],
    ("image", "year"): ["sign"],
    ("audio", "count"): ["beeps"],
    ("audio", "number"): ["dtmf", "morse", "pitch", "speech"],
    ("audio", "year"): ["dtmf", "morse", "speech"],
    ("video", "count"): ["score", "appear", "change"],
    ("video", "number"): ["caption"],
    ("video", "year"): ["caption"],
}
