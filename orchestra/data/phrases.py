"""Surface forms of the builtin rewriter: noun phrases for values, entities and operations, and
question templates per strategy. Each entry lists several wordings; the rewriter draws one."""

from __future__ import annotations

import re
from typing import Any

#: modality words (the rewriter never names a file)
MEDIA_WORDS: dict[str, tuple[str, ...]] = {
    "image": ("image", "picture"),
    "audio": ("audio", "recording", "audio clip"),
    "video": ("video", "clip"),
}

#: perception -> noun phrases for the value it reads ({m}: the modality word, {color}/{shape}/... args)
VALUE_PHRASES: dict[str, tuple[str, ...]] = {
    "read_number": ("the number on the sign in the {m}", "the number written on the sign in the {m}"),
    "read_text": ("the name on the sign in the {m}", "the word written on the sign in the {m}"),
    "count_shapes": ("the number of {color} shapes in the {m}", "the count of {color} objects in the {m}"),
    "count_shapes+shape": (
        "the number of {color} {shape}s in the {m}",
        "the count of {color} {shape}s in the {m}",
    ),
    "chart_value": ("the value shown for {label} in the chart", "the chart's value for {label}"),
    "dtmf_number": (
        "the number dialled with keypad (DTMF) tones in the {m}",
        "the number keyed in as DTMF tones in the {m}",
    ),
    "count_beeps": ("the number of beeps in the {m}", "the count of beeps heard in the {m}"),
    "beep_pitch": (
        "the pitch of the beeps in the {m} in Hz (a multiple of 100)",
        "the beep frequency in the {m}, in Hz rounded to a multiple of 100",
    ),
    "morse_number": ("the number spelled in Morse code in the {m}", "the number the {m} taps out in Morse"),
    "morse_text": ("the word spelled in Morse code in the {m}", "the word the {m} taps out in Morse"),
    "speech_number": ("the number spoken in the {m}",),
    "speech_name": ("the name spoken in the {m}", "the name said aloud in the {m}"),
    "caption_number": ("the number shown in the caption of the {m}", "the number in the {m}'s caption"),
    "caption_text": ("the caption of the {m}", "the text of the {m}'s caption"),
    "final_score_total": (
        "the total number of points on the scoreboard at the end of the {m}",
        "the sum of both scores on the {m}'s final scoreboard",
    ),
    "count_appearances": (
        "the number of objects that appear after the {m} starts",
        "how many objects enter the {m} after its start",
    ),
    "color_change_second": (
        "the second at which the {object} in the {m} changes colour",
        "the time in seconds when the {object} in the {m} turns a new colour",
    ),
}

#: name-reading perception -> where the name is shown (for "the <type> whose name is <where>")
NAME_SOURCES: dict[str, tuple[str, ...]] = {
    "read_text": ("shown on the sign in the {m}", "written on the sign in the {m}"),
    "morse_text": ("spelled in Morse code in the {m}", "tapped out in Morse code in the {m}"),
    "speech_name": ("spoken in the {m}", "said aloud in the {m}"),
    "caption_text": ("shown in the caption of the {m}", "given by the {m}'s caption"),
}

ENTITY_BY_NAME: tuple[str, ...] = ("the {type} whose name is {where}", "the {type} with its name {where}")
ENTITY_BY_RELATION: tuple[str, ...] = ("the {rel} of {parent}", "the {rel} listed for {parent}")
ATTRIBUTE: tuple[str, ...] = ("the {noun} of {entity}", "the {noun} the wiki gives for {entity}")

#: operation -> noun phrases over operand phrases {a} and {b}
OPERATIONS: dict[str, tuple[str, ...]] = {
    "sum": ("the sum of {a} and {b}", "{a} plus {b}", "the total of {a} and {b}"),
    "absdiff": ("the absolute difference between {a} and {b}", "the gap between {a} and {b}"),
    "product": ("{a} multiplied by {b}", "the product of {a} and {b}"),
    "divided": ("{a} divided by {b}, rounded to the nearest whole number",),
    "max": ("the larger of {a} and {b}", "the greater of {a} and {b}", "whichever is bigger of {a} and {b}"),
    "min": ("the smaller of {a} and {b}", "the lesser of {a} and {b}", "whichever is smaller of {a} and {b}"),
}
EXPRESSIONS: dict[str, str] = {
    "sum": "{a} + {b}",
    "absdiff": "abs({a} - {b})",
    "product": "{a} * {b}",
    "divided": "round({a} / {b})",
    "max": "max({a}, {b})",
    "min": "min({a}, {b})",
}

#: strategy -> question templates ({p}: the answer's phrase; {wiki}: a wiki hint or "")
QUESTIONS: dict[str, dict[str, tuple[str, ...]]] = {
    "numeric_composition": {
        "number": (
            "What is {p}?",
            "Work out {p}.{wiki}",
            "Compute {p} and give it as a number.{wiki}",
            "{wiki_lead}how much is {p}?",
            "Give the value of {p}.{wiki}",
            "Calculate {p}.{wiki}",
        ),
    },
    "cross_modal_fusion": {
        "number": (
            "Combining what the media show, what is {p}?{wiki}",
            "Putting the inputs together, compute {p}.{wiki}",
            "Across both inputs: what is {p}?{wiki}",
            "{wiki_lead}using every input, find {p}.",
            "Fuse the two inputs: give {p}.{wiki}",
            "Read each input, then report {p}.{wiki}",
        ),
        "number_one_file": (  # both read from one muxed video: its picture and its sound track
            "Combining what the video shows and what it plays, what is {p}?{wiki}",
            "Putting picture and sound together, compute {p}.{wiki}",
            "Across the picture and the soundtrack: what is {p}?{wiki}",
            "{wiki_lead}using both what is seen and what is heard, find {p}.",
            "Fuse what you see with what you hear: give {p}.{wiki}",
            "Watch and listen, then report {p}.{wiki}",
        ),
    },
    "constraint_scoping": {
        "number": (
            "Looking only at what is asked for, what is {p}?{wiki}",
            "Under these conditions, give {p}.{wiki}",
            "Restricting yourself to the items named, what is {p}?{wiki}",
            "{wiki_lead}what is {p}, counting only what is described?",
            "Considering just those items: report {p}.{wiki}",
            "Filter as described and give {p}.{wiki}",
        ),
    },
    "multi_hop_chaining": {
        "number": (
            "Follow the links on the world.local wiki: what is {p}?",
            "Chaining wiki pages from world.local, find {p}.",
            "On the world.local wiki, step from page to page to get {p}.",
            "Via the world.local wiki's linked pages, what is {p}?",
            "Hop through the world.local wiki to determine {p}.",
        ),
        "name": (
            "Follow the links on the world.local wiki: what is the name of {p}?",
            "Chaining wiki pages from world.local, name {p}.",
            "On the world.local wiki, step from page to page: who or what is {p}?",
            "Via the world.local wiki's linked pages, give the name of {p}.",
        ),
    },
    "entity_obfuscation": {
        "number": (
            "Without being told any name, find {p} (the world.local wiki has the facts).",
            "Identify the entities only from their descriptions and give {p}; use the world.local wiki.",
            "According to the world.local wiki, what is {p}?",
            "From the description alone, work out {p} with the world.local wiki.",
        ),
        "name": (
            "Without being told any name, identify {p} (the world.local wiki has the facts).",
            "According to the world.local wiki, what is the name of {p}?",
            "From the description alone, name {p}; use the world.local wiki.",
            "Using the world.local wiki, who or what is {p}?",
        ),
    },
}
WIKI_HINTS: tuple[str, ...] = (
    " Use the world.local wiki for facts.",
    " The world.local wiki has the facts you need.",
    " Look facts up on the world.local wiki.",
)
WIKI_LEADS: tuple[str, ...] = ("According to the world.local wiki, ", "With the world.local wiki, ")

_SEED_OPS = (
    (re.compile(r"abs\((v\d+) - (v\d+)\)"), "absdiff"),
    (re.compile(r"round\((v\d+) / (v\d+)\)"), "divided"),
    (re.compile(r"(v\d+) \+ (v\d+)"), "sum"),
    (re.compile(r"(v\d+) \* (v\d+)"), "product"),
    (re.compile(r"max\((v\d+), (v\d+)\)"), "max"),
    (re.compile(r"min\((v\d+), (v\d+)\)"), "min"),
)


def parse_operation(expression: str) -> tuple[str, str, str] | None:
    """(operation, a, b) for a two-operand expression the rewriter can phrase, else None."""
    for pattern, op in _SEED_OPS:
        m = pattern.fullmatch(expression.strip())
        if m:
            return op, m.group(1), m.group(2)
    return None


def fill(template: str, **values: Any) -> str:
    return " ".join(template.format(**values).split())


def template_count() -> dict[str, int]:
    """Distinct question templates per strategy."""
    return {s: sum(len(v) for v in by_kind.values()) for s, by_kind in QUESTIONS.items()}
