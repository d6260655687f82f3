"""Accuracy of the perception tools (and web search recall@5) against the world's ground truth.

Usage: python bench/tools_accuracy.py [--n 200] [--seed 9301] [--workers 2] [--only ocr_name,dtmf,...]
                                      [--mode careful|fast|both]

Every item is fresh: rendered by the world's renderers (orchestra.world.image/audio/video) from a
bench-only seed at a level drawn from the default noise ranges of params (WorldParams().noise),
saved to a temporary folder, and read back by the tool through the file alone. Only this bench
compares with the truth. Prints one row per measure and tool variant (n, accuracy, target,
pass/miss, median tool latency), examples of misses, and a final RESULT line; exits 1 when a
target of the careful variant is missed.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from orchestra.config import WorldParams

NOISE = WorldParams().noise
# measure -> (target accuracy, what is counted)
TARGETS: dict[str, tuple[float, str]] = {
    "ocr_name": (0.95, "sign with a name, text exact"),
    "ocr_number": (0.95, "sign with a number, text exact"),
    "shape_counts": (0.95, "image: every colour x shape count exact"),
    "chart_values": (0.90, "chart value within 2 %"),
    "dtmf": (0.99, "digit string exact"),
    "morse": (0.95, "text exact (names and numbers)"),
    "beep_count": (0.98, "beep count exact"),
    "video_events": (0.90, "event kind + object shape, time within 0.5 s"),
    "search_recall5": (0.98, "entity URL in top 5 for its name"),
    "speech_words": (0.90, "spoken number/year words (held-out voices), aligned; an insertion is a miss"),
    "speech_names": (0.90, "spoken name exact (held-out voices), among a default world's page titles"),
}
#: measures run on fewer items than --n (each item gives several rows): share of --n
ITEM_SHARE = {"speech_words": 1 / 3}
EXTRA = {
    "beep_pitch": "pitch within 1 %",
    "video_text": "timeline texts exact (spaces ignored), times +-0.5 s",
    "chart_labels": "every category label exact",
    "speech_number": "spoken number/year exact (one row per utterance)",
}


def _name(rng: np.random.Generator) -> str:
    from orchestra.world.names import make_word

    name = make_word(rng) if rng.random() < 0.5 else f"{make_word(rng, 2, 2, 6)} {make_word(rng, 2, 3, 8)}"
    return name.upper() if rng.random() < 0.3 else name


def _image(img: Any, folder: Path, i: int, rng: np.random.Generator) -> Path:
    from orchestra.world.image import save_jpeg, save_png

    if rng.random() < 0.5:
        path = folder / f"{i}.png"
        save_png(img, path)
    else:
        path = folder / f"{i}.jpg"
        save_jpeg(img, path)
    return path


def _wav(x: np.ndarray, folder: Path, i: int) -> Path:
    from orchestra.world.audio import save_wav

    path = folder / f"{i}.wav"
    save_wav(x, path)
    return path


def _call(tool: Any, mode: str | None, **args: Any) -> Any:
    """Run ``tool`` with ``mode`` when its schema has one (fast / careful variants), else as it is."""
    if mode is not None and "mode" in tool.input_schema.get("properties", {}):
        args["mode"] = mode
    return tool(**args)


def _row(
    measure: str, ok: bool, obs: Any, example: str, truth: dict[str, Any] | None = None
) -> dict[str, Any]:
    """One scored reading: the measure, right or not, the tool's latency and confidence, the file's
    drawn level (when the renderer recorded one) and an example line for the misses."""
    return {
        "m": measure,
        "ok": ok,
        "lat": obs.latency_s,
        "conf": obs.data.get("confidence"),
        "level": (truth or {}).get("level"),
        "ex": example,
    }


def run_item(measure: str, seed: int, i: int, folder: str, mode: str | None = None) -> list[dict[str, Any]]:
    """Render item ``i`` of ``measure``, run the tool on the saved file, score it. One or more rows.
    The same item (same seed) is rendered for every ``mode``, so modes compare on identical media."""
    from orchestra.tools import audio as A
    from orchestra.tools import image as I
    from orchestra.tools import video as V
    from orchestra.world import audio, image, video

    rng = np.random.default_rng([seed, list(TARGETS).index(measure), i])
    d = Path(folder)
    if measure in ("ocr_name", "ocr_number"):
        text = _name(rng) if measure == "ocr_name" else str(int(rng.integers(10, 10000)))
        img, truth = image.render_sign(rng, text, NOISE.draw(rng, "image"))
        obs = _call(I.ImageOCR(), mode, path=str(_image(img, d, i, rng)))
        got = obs.data.get("text", "").strip()
        return [_row(measure, got == text, obs, f"{text!r} -> {got!r}", truth)]
    if measure == "shape_counts":
        img, truth = image.render_shapes(rng, NOISE.draw(rng, "image"))
        obs = _call(I.ImageCountObjects(), mode, path=str(_image(img, d, i, rng)))
        got = obs.data.get("counts", {})
        return [_row(measure, got == truth["counts"], obs, f"truth {truth['counts']} got {got}", truth)]
    if measure == "chart_values":
        from orchestra.world.names import make_word

        kind = "bar" if i % 2 == 0 else "line"
        labels = [make_word(rng, 2, 3, 7) for _ in range(int(rng.integers(4, 6)))] if kind == "bar" else None
        if labels and len(set(labels)) < len(labels):
            labels = None
        img, truth = image.render_chart(rng, NOISE.draw(rng, "image"), kind, labels=labels)
        obs = _call(I.ImageReadChart(), mode, path=str(_image(img, d, i, rng)))
        vals, labs = obs.data.get("values", []), obs.data.get("labels", [])
        confs = obs.data.get("value_confidences", [])
        rows = []
        for k, tv in enumerate(truth["values"]):
            v = vals[k] if len(vals) == len(truth["values"]) else None
            rows.append(
                {
                    "m": measure,
                    "ok": v is not None and abs(v - tv) <= 0.02 * abs(tv),
                    "lat": obs.latency_s if k == 0 else None,
                    "conf": confs[k] if v is not None and len(confs) == len(vals) else None,
                    "ex": f"{kind} {truth['labels'][k]}={tv} -> {v} ({obs.error or ''})",
                }
            )
        rows.append(
            {
                "m": "chart_labels",
                "ok": labs == truth["labels"],
                "lat": None,
                "ex": f"{truth['labels']} -> {labs}",
            }
        )
        return rows
    if measure == "dtmf":
        digits = str(int(rng.integers(100, 100000)))
        x, truth = audio.render_dtmf(rng, digits, NOISE.draw(rng, "audio"))
        obs = _call(A.AudioDTMF(), mode, path=str(_wav(x, d, i)))
        got = obs.data.get("digits", "")
        return [_row(measure, got == digits, obs, f"{digits} -> {got}", truth)]
    if measure == "morse":
        text = _name(rng).upper() if i % 2 == 0 else str(int(rng.integers(10, 1000)))
        x, truth = audio.render_morse(rng, text, NOISE.draw(rng, "audio"))
        obs = _call(A.AudioMorse(), mode, path=str(_wav(x, d, i)))
        got = obs.data.get("text", "")
        return [_row(measure, got == text, obs, f"{text!r} -> {got!r}", truth)]
    if measure == "speech_words":
        return _speech_rows(rng, d, i, seed)
    if measure == "speech_names":
        name = _speech_names(seed)[int(rng.integers(len(_speech_names(seed))))]
        x, truth = audio.render_spoken_name(rng, name, NOISE.draw(rng, "audio"))
        obs = _speech_tool(seed)(path=str(_wav(x, d, i)))
        got = obs.data.get("text") if obs.ok else obs.error
        conf = obs.data.get("confidence")
        ex = f"{name!r} ({truth['voice']}, SNR {truth['snr_db']} dB) -> {got!r} conf {conf}"
        return [_row(measure, obs.ok and got == name, obs, ex, truth)]
    if measure == "beep_count":
        x, truth = audio.render_beeps(rng, NOISE.draw(rng, "audio"))
        obs = _call(A.AudioTones(), mode, path=str(_wav(x, d, i)))
        tones = obs.data.get("tones", [])
        pitch = statistics.median([t["freq_hz"] for t in tones]) if tones else 0.0
        return [
            _row(
                measure,
                obs.data.get("count") == truth["count"],
                obs,
                f"{truth['count']} -> {obs.data.get('count')}",
                truth,
            ),
            {
                "m": "beep_pitch",
                "ok": abs(pitch - truth["freq_hz"]) <= 0.01 * truth["freq_hz"],
                "lat": None,
                "ex": f"{truth['freq_hz']} Hz -> {pitch:.1f} Hz",
            },
        ]
    if measure == "video_events":
        text_mode = ("caption", "scoreboard", "none")[i % 3]  # not ``mode``: that is the tool variant
        path = d / f"{i}.mp4"
        truth = video.render_video(
            rng, NOISE.draw(rng, "video"), path, text_mode=text_mode, caption=_name(rng).upper()
        )
        obs = _call(V.VideoEvents(), mode, path=str(path))
        got = obs.data.get("events", [])
        seen = [(g["kind"], g["object"], g["t"]) for g in got]
        conf, level = obs.data.get("confidence"), truth["level"]
        rows = []
        for e in truth["events"]:
            kind = "colour_change" if e["kind"] == "color_change" else e["kind"]
            hit = any(
                g["kind"] == kind and g["object"].split("#")[0] == e["object"] and abs(g["t"] - e["t"]) <= 0.5
                for g in got
            )
            rows.append(
                {
                    "m": measure,
                    "ok": hit,
                    "lat": obs.latency_s if not rows else None,
                    "conf": conf,
                    "item": i,
                    "level": level,
                    "ex": f"{e['kind']} {e['object']} @{e['t']} -> {seen} conf {conf}",
                }
            )
        tobs = _call(V.VideoText(), mode, path=str(path))
        tl = [(t["text"].replace(" ", ""), t["t_start"], t["t_end"]) for t in tobs.data.get("timeline", [])]
        tt = [(t["text"].replace(" ", ""), t["t_start"], t["t_end"]) for t in truth["text"]]
        ok = len(tl) == len(tt) and all(
            a[0] == b[0] and abs(a[1] - b[1]) <= 0.5 and abs(a[2] - b[2]) <= 0.5
            for a, b in zip(tl, tt, strict=False)
        )
        tconf = tobs.data.get("confidence")
        rows.append(
            {
                "m": "video_text",
                "ok": ok,
                "lat": tobs.latency_s,
                "conf": tconf,
                "item": i,
                "level": level,
                "ex": f"{tt} -> {tl} conf {tconf}",
            }
        )
        return rows
    raise ValueError(f"unknown measure {measure!r}")


def _align(ref: list[str], hyp: list[str]) -> tuple[list[bool], int]:
    """Per reference word whether the edit-distance alignment matches it, and the inserted words."""
    d = np.zeros((len(ref) + 1, len(hyp) + 1), dtype=int)
    d[:, 0], d[0, :] = range(len(ref) + 1), range(len(hyp) + 1)
    for a in range(1, len(ref) + 1):
        for b in range(1, len(hyp) + 1):
            d[a, b] = min(d[a - 1, b] + 1, d[a, b - 1] + 1, d[a - 1, b - 1] + (ref[a - 1] != hyp[b - 1]))
    ok, inserted, a, b = [False] * len(ref), 0, len(ref), len(hyp)
    while a or b:
        if a and b and d[a, b] == d[a - 1, b - 1] + (ref[a - 1] != hyp[b - 1]):
            ok[a - 1], a, b = ref[a - 1] == hyp[b - 1], a - 1, b - 1
        elif a and d[a, b] == d[a - 1, b] + 1:
            a -= 1
        else:
            inserted, b = inserted + 1, b - 1
    return ok, inserted


@functools.cache
def _speech_names(seed: int) -> list[str]:
    """The page titles of a default-sized knowledge base drawn from the bench seed (near-namesakes
    included, as the world makes them): the names the speech tool may hear."""
    from orchestra.world.kb import build_kb

    p = WorldParams()
    kb = build_kb(
        np.random.default_rng([seed, 0]), p.n_entities, list(p.categories), p.distractors_per_entity
    )
    return sorted({e.name for e in kb.entities})


@functools.cache
def _speech_tool(seed: int) -> Any:
    """The speech tool as the pipeline builds it: numbers and the names of :func:`_speech_names`."""
    from orchestra.tools.speech import AudioSpeech

    return AudioSpeech(names=_speech_names(seed))


def _speech_rows(rng: np.random.Generator, d: Path, i: int, seed: int) -> list[dict[str, Any]]:
    """A number (10..999) or, every third item, a year (1000..2030) said by a world speaker (voices the
    tool's templates never use) at a level from the default audio range, read by the tool that also
    knows the bench world's names; rows per word and per number."""
    from orchestra.world import audio

    year = i % 3 == 0
    value = int(rng.integers(1000, 2031)) if year else int(rng.integers(10, 1000))
    x, truth = audio.render_speech(rng, value, NOISE.draw(rng, "audio"), year=year)
    obs = _speech_tool(seed)(path=str(_wav(x, d, i)))
    heard = obs.data.get("words", []) if obs.ok else []
    ok, inserted = _align(truth["words"], heard)
    ex = f"{' '.join(truth['words'])!r} ({truth['voice']}, SNR {truth['snr_db']} dB) -> {' '.join(heard)!r}"
    rows = [
        {**_row("speech_words", k, obs, ex, truth), "lat": obs.latency_s if not j else None}
        for j, k in enumerate(ok)
    ]
    rows += [{"m": "speech_words", "ok": False, "lat": None, "ex": ex}] * inserted
    rows.append(
        {"m": "speech_number", "ok": obs.ok and obs.data.get("number") == value, "lat": None, "ex": ex}
    )
    return rows


def search_rows(seed: int, n: int) -> list[dict[str, Any]]:
    """Recall@5 of web_search for entity names in a freshly generated world (truth read by the bench)."""
    from orchestra.tools.search import WebSearch
    from orchestra.world.generate import generate_world

    with tempfile.TemporaryDirectory() as tmp:
        params = WorldParams(seed=seed, n_entities=max(n, 200), n_seeds=10)
        generate_world(params, Path(tmp))
        ents = [
            json.loads(line) for line in (Path(tmp) / "truth" / "entities.jsonl").read_text().splitlines()
        ]
        tool = WebSearch.from_world(Path(tmp))
        rows = []
        for e in ents:
            obs = tool(query=e["name"], k=5)
            urls = [h["url"] for h in obs.data.get("results", [])]
            rows.append(
                {
                    "m": "search_recall5",
                    "ok": e["url"] in urls,
                    "lat": obs.latency_s,
                    "ex": f"{e['name']!r} -> {urls[:3]}",
                }
            )
        return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200, help="items per measure")
    ap.add_argument("--seed", type=int, default=9301, help="bench seed (not used by any world)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--only", default="", help="comma-separated measures")
    ap.add_argument(
        "--mode",
        choices=["careful", "fast", "both"],
        default="careful",
        help="tool variant (tools without variants ignore it); targets hold for careful; both: same items",
    )
    args = ap.parse_args(argv)
    measures = [m for m in TARGETS if not args.only or m in args.only.split(",")]
    modes = ["careful", "fast"] if args.mode == "both" else [args.mode]
    rows: list[dict[str, Any]] = []
    begin = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp, ProcessPoolExecutor(max_workers=args.workers) as pool:
        jobs = []
        for m in measures:
            if m == "search_recall5":
                continue
            for mode in modes:
                folder = Path(tmp) / m / mode
                folder.mkdir(parents=True)
                items = max(1, round(args.n * ITEM_SHARE.get(m, 1.0)))
                jobs += [
                    (mode, pool.submit(run_item, m, args.seed, i, str(folder), mode)) for i in range(items)
                ]
        if "search_recall5" in measures:
            rows += [{**r, "mode": modes[0]} for r in search_rows(args.seed, args.n)]
        for mode, job in jobs:
            rows += [{**r, "mode": mode} for r in job.result()]
    by: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        by.setdefault((r["m"], r["mode"]), []).append(r)
    print(
        f"{'measure':<16}{'mode':<9}{'n':>6}{'accuracy':>10}{'target':>8}  "
        f"{'status':<6}{'median s':>9}  counted"
    )
    missed = []
    for m in list(TARGETS) + list(EXTRA):
        for mode in modes:
            if (m, mode) not in by:
                continue
            rs = by[(m, mode)]
            acc = sum(r["ok"] for r in rs) / len(rs)
            lats = [r["lat"] for r in rs if r["lat"] is not None]
            target = TARGETS.get(m, (None, ""))[0] if mode == "careful" else None
            status = "-" if target is None else ("pass" if acc >= target else "MISS")
            if status == "MISS":
                missed.append(m)
            med = f"{statistics.median(lats):.3f}" if lats else "-"
            tgt = f"{target:.2f}" if target is not None else "-"
            what = TARGETS[m][1] if m in TARGETS else EXTRA[m]
            print(f"{m:<16}{mode:<9}{len(rs):>6}{acc:>10.3f}{tgt:>8}  {status:<6}{med:>9}  {what}")
    for (m, mode), rs in by.items():
        bad = [r["ex"] for r in rs if not r["ok"]]
        if bad:
            print(f"\nmisses of {m} ({mode}) ({len(bad)}), first {min(5, len(bad))}:")
            for ex in bad[:5]:
                print(f"  {ex}")
    counts = Counter(r["m"] for r in rows if r["mode"] == modes[0])
    summary = " ".join(
        f"{m}@{mode}={sum(r['ok'] for r in by[(m, mode)]) / len(by[(m, mode)]):.3f}"
        for m in TARGETS
        for mode in modes
        if (m, mode) in by
    )
    passed = not missed and all(
        counts[m] >= args.n * ITEM_SHARE.get(m, 1.0) for m in measures if m != "chart_values"
    )
    print(f"\nwall time {time.perf_counter() - begin:.0f}s")
    print(f"RESULT tools_accuracy pass={str(passed).lower()} missed={','.join(missed) or 'none'} {summary}")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
